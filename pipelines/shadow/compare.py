"""ShadowComparison: the current model's results against a candidate's on the same frames —
frame agreement (the measure ``vidpipe model check`` reports: ``Agreement``), boxes and
scores side by side, and what the candidate costs per frame.

Of the frames the current model saw, a ``share`` is given to the candidate (every frame at
1.0; at 0.25, every fourth of each stream). The current model's detections are the
reference, as the model in service.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.frame import Detections, Result
from pipelines.postprocess.agreement import Agreement
from pipelines.shadow.model import ShadowModel

SCORE_BINS = np.linspace(0.0, 1.0, 11)  # the scores' histogram: tenths


@dataclass(slots=True)
class Side:
    """One model's boxes over the frames compared."""

    boxes: int = 0
    scores: np.ndarray = field(default_factory=lambda: np.zeros(len(SCORE_BINS) - 1, np.int64))

    def add(self, detections: Detections) -> None:
        self.boxes += len(detections)
        self.scores += np.histogram(detections.score, SCORE_BINS)[0]

    def as_dict(self, frames: int) -> dict[str, Any]:
        return {"boxes": self.boxes, "boxes_per_frame": round(self.boxes / frames, 3)
                if frames else None, "score_histogram": self.scores.tolist()}


@dataclass(slots=True)
class StreamShadow:
    agreement: Agreement = field(default_factory=Agreement)
    current: Side = field(default_factory=Side)
    candidate: Side = field(default_factory=Side)
    offered: int = 0


class ShadowComparison:
    def __init__(self, model: ShadowModel, current_name: str, share: float = 1.0) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.model, self.current_name, self.share = model, current_name, share
        self.streams: dict[str, StreamShadow] = {}
        self.wall_s: list[float] = []  # per frame compared: the candidate's time
        self.cpu_s = 0.0

    def wanted(self, result: Result) -> bool:
        """Whether the candidate is to see this result's frame (the model saw it, and it is
        in the share)."""
        if result.predicted or result.frame.skipped or result.frame.image is None:
            return False
        stream = self.streams.setdefault(result.frame.stream_id, StreamShadow())
        stream.offered += 1
        return int(stream.offered * self.share) > int((stream.offered - 1) * self.share)

    def compare(self, results: list[Result]) -> None:
        """Run the candidate on ``results``' frames (``wanted`` ones) and count."""
        if results:
            self.record(results, *self.detect(results))

    def detect(self, results: list[Result]) -> tuple[list[Detections], float, float]:
        """The candidate's boxes on ``results``' frames, the wall and CPU seconds it took
        (nothing counted yet: ``record``)."""
        wall, cpu = time.perf_counter(), time.thread_time()
        found = self.model.detect([r.frame for r in results])
        return found, time.perf_counter() - wall, time.thread_time() - cpu

    def record(self, results: list[Result], found: list[Detections], wall_s: float,
               cpu_s: float) -> None:
        """Count what ``detect`` found against the current model's detections."""
        self.cpu_s += cpu_s
        spent = wall_s / len(results)
        for result, candidate in zip(results, found, strict=True):
            stream = self.streams[result.frame.stream_id]
            current = result.detections
            stream.agreement.add(current, candidate)
            stream.current.add(current)
            stream.candidate.add(candidate)
            self.wall_s.append(spent)

    def report(self) -> dict[str, Any]:
        total = Agreement()
        current, candidate = Side(), Side()
        for s in self.streams.values():
            for name in ("frames", "agreed", "boxes_reference", "boxes_other",
                         "frames_missing"):
                setattr(total, name, getattr(total, name) + getattr(s.agreement, name))
            total.ious += s.agreement.ious
            total.score_diffs += s.agreement.score_diffs
            for mine, theirs in ((current, s.current), (candidate, s.candidate)):
                mine.boxes += theirs.boxes
                mine.scores += theirs.scores
        frames = total.frames
        wall = np.asarray(self.wall_s) * 1000
        return {
            "current": self.current_name, "candidate": self.model.spec.name,
            "candidate_file": self.model.path.name, "share": self.share,
            "frames_offered": sum(s.offered for s in self.streams.values()),
            "agreement": total.as_dict(),
            "detections": {"current": current.as_dict(frames),
                           "candidate": candidate.as_dict(frames),
                           "score_bins": SCORE_BINS.round(1).tolist()},
            "candidate_ms_per_frame": {"p50": round(float(np.percentile(wall, 50)), 3),
                                       "p95": round(float(np.percentile(wall, 95)), 3)}
            if wall.size else None,
            "candidate_cpu_ms_per_frame": round(self.cpu_s * 1000 / frames, 3)
            if frames else None,
            "streams": {sid: {"agreement": s.agreement.as_dict(),
                              "current": s.current.as_dict(s.agreement.frames),
                              "candidate": s.candidate.as_dict(s.agreement.frames)}
                        for sid, s in self.streams.items()},
        }

    def close(self) -> None:
        self.model.close()
