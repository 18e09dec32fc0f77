"""TrackAttributes: one stream's classifier answers per track, and which tracks a frame's
picture should be classified for.

A confirmed track (of the classes a classifier runs on) is classified on the first detected
frame it has an id, and again when its picture got better — score x box area more than
``better`` above the picture it was last classified on — at least ``reclassify_s`` after
(the stream's timeline). Its answer is the latest: a better picture's. A track unseen for
``STALE_FRAMES`` frames is forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.classify.config import ClassifierConfig
from pipelines.classify.model import Answer, Classifier
from pipelines.frame import Detections

STALE_FRAMES = 900


@dataclass(slots=True)
class _Classified:
    answer: Answer
    quality: float  # score x area of the picture it was classified on
    at: float  # when, on the stream's timeline (seconds)
    frame: int  # the frame (of this stream's counter) it was last seen on


@dataclass(slots=True)
class Request:
    """The tracks of one frame one classifier is to answer for: rows of ``boxes``."""

    classifier: int  # index into the stream's classifiers
    track_ids: list[int]
    boxes: np.ndarray  # (N, 4) source pixels
    qualities: list[float]
    now: float


class TrackAttributes:
    """``entries``: each classifier's config, the loaded classifier and the detector's class
    ids it runs on (None: all)."""

    def __init__(self, entries: list[tuple[ClassifierConfig, Classifier, set[int] | None]]
                 ) -> None:
        self.entries = entries
        self._tracks: list[dict[int, _Classified]] = [{} for _ in entries]
        self._frame = 0

    def wanted(self, detections: Detections, now: float) -> list[Request]:
        """What to classify on a detected frame at ``now`` (its confirmed tracks)."""
        self._frame += 1
        d = detections
        areas = np.clip(d.xyxy[:, 2] - d.xyxy[:, 0], 0, None) * \
            np.clip(d.xyxy[:, 3] - d.xyxy[:, 1], 0, None)
        quality = d.score * areas
        requests = []
        for k, (config, _, class_ids) in enumerate(self.entries):
            known = self._tracks[k]
            rows = []
            for i, tid in enumerate(d.track_id.tolist()):
                if tid < 0 or (class_ids is not None and int(d.class_id[i]) not in class_ids):
                    continue
                seen = known.get(tid)
                if seen is not None:
                    seen.frame = self._frame
                    if (quality[i] <= seen.quality * (1.0 + config.better)
                            or now - seen.at < config.reclassify_s):
                        continue
                rows.append(i)
            if rows:
                requests.append(Request(k, [int(d.track_id[i]) for i in rows],
                                        d.xyxy[rows].astype(np.float32),
                                        [float(quality[i]) for i in rows], now))
        if self._frame % 64 == 0:
            for known in self._tracks:
                for tid in [t for t, c in known.items() if self._frame - c.frame > STALE_FRAMES]:
                    del known[tid]
        return requests

    def record(self, request: Request, answers: list[Answer]) -> None:
        known = self._tracks[request.classifier]
        for tid, quality, answer in zip(request.track_ids, request.qualities, answers,
                                        strict=True):
            known[tid] = _Classified(answer, quality, request.now, self._frame)

    def of(self, track_ids: np.ndarray) -> dict[int, Answer]:
        """The answers known for ``track_ids`` (every classifier's heads together)."""
        out: dict[int, Answer] = {}
        for tid in track_ids.tolist():
            if tid < 0:
                continue
            merged: Answer = {}
            for known in self._tracks:
                found = known.get(tid)
                if found is not None:
                    merged.update(found.answer)
            if merged:
                out[tid] = merged
        return out
