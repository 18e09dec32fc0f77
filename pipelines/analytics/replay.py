"""Replay: a run's tracking and counting again from its ``detections.jsonl`` — the tracker,
lines and zones fed the boxes the model gave, frame by frame, with no decoding and no model —
to see what other lines, zones or tracker settings would have counted.

The model's frames are the lines without ``"predicted"``: their boxes go to the tracker (track
ids cleared). A predicted line (``--detect-every``, ``--detect-fps``) rides with the next
frame the model saw, as it did in the run, and gets the tracker's boxes between the two; a
``"skipped"`` line (motion gating) comes out with no boxes, and one with ``"skipped_run"``
stands for that many skipped frames in a row (``sinks.quiet``). The boxes are the ones written,
rounded to 0.01 px and scores to 1e-4: a replay with the run's own settings gives the run's
counts (tests/app/test_replay.py) unless the rounding breaks a tie otherwise.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.analytics.stream import StreamAnalytics
from pipelines.errors import ConfigError
from pipelines.frame import Detections, Frame, Result
from pipelines.sinks.quiet import unfold


@dataclass(frozen=True, slots=True)
class RecordedFrame:
    """One line of a run's detections.jsonl, as the tracker is given it."""

    index: int
    pts: float | None
    detections: Detections  # the boxes written, track ids cleared
    predicted: bool = False  # the tracker's boxes in the run: the model did not see it
    skipped: str | None = None  # motion gating kept it from the model
    analytics: dict[str, Any] | None = None  # the stream's counts after it, as written


@dataclass
class Replayed:
    """What a stream's analytics made of its recorded frames."""

    counts: dict[str, Any]  # StreamAnalytics.counts() after the last frame
    events: Counter[str] = field(default_factory=Counter)  # event type -> how many
    frames: int = 0


def recorded_streams(path: Path) -> dict[str, list[RecordedFrame]]:
    """A run's detections.jsonl, per stream in the order written (frame order); ConfigError
    for a file that is missing or not one."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (a run's folder holds detections.jsonl)")
    with path.open(encoding="utf-8") as lines:
        return recorded_frames(lines, str(path))


def recorded_frames(lines: Iterable[str], where: str) -> dict[str, list[RecordedFrame]]:
    """Detection lines per stream, in the order written, a quiet stretch's line as the
    frames it stands for (``sinks.quiet.unfold``); ConfigError naming ``where`` and the line
    for one that is not one."""
    streams: dict[str, list[RecordedFrame]] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            records = unfold(json.loads(text))
            stream, frames = str(records[0]["stream"]), [_frame(r) for r in records]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"{where}, line {number}: not a detection line ({e})") from None
        streams.setdefault(stream, []).extend(frames)
    return streams


def last_counts(frames: list[RecordedFrame]) -> dict[str, Any] | None:
    """A stream's counts after its last frame that has them (None: its lines have none)."""
    return next((f.analytics for f in reversed(frames) if f.analytics is not None), None)


def _frame(record: dict[str, Any]) -> RecordedFrame:
    boxes = record["detections"]
    xyxy = np.asarray([d["box"] for d in boxes], np.float32).reshape(-1, 4)
    return RecordedFrame(int(record["frame"]), None if record.get("pts") is None
                         else float(record["pts"]),
                         Detections(xyxy, np.asarray([d["score"] for d in boxes], np.float32),
                                    np.asarray([d["class_id"] for d in boxes], np.int32)),
                         bool(record.get("predicted", False)), record.get("skipped"),
                         record.get("analytics"))


def replay(frames: Iterable[RecordedFrame], stream: str, config: AnalyticsConfig,
           spec: ModelSpec, fps: float, *, mot: list[str] | None = None) -> Replayed:
    """``frames`` (one stream's, in order) through a new StreamAnalytics of ``config``;
    ``mot``: where to put the confirmed tracks' boxes as MOT rows (1-based frames, ids).
    Recorded boxes have no pictures: the run's classifiers are left out, and a line or zone
    that counts by their answers is a ConfigError."""
    filtered = [c.name for c in config.lines if c.attributes] + \
        [c.name for c in config.zones if c.attributes]
    if filtered:
        raise ConfigError(f"stream {stream}: {', '.join(filtered)} count by classifier "
                          "answers (attributes), which a replay of recorded boxes cannot "
                          "give: replay other lines or zones (--line, --zone)")
    analytics = StreamAnalytics(stream, config.model_copy(update={"classifiers": []}), spec,
                                fps)
    replayed = Replayed(analytics.counts())
    for result in _results(frames, stream):
        for out in analytics.process(result):
            replayed.frames += 1
            for event in out.events:
                replayed.events[event["type"]] += 1
            if mot is not None:
                d = out.detections
                for (x1, y1, x2, y2), score, tid in zip(d.xyxy.tolist(), d.score.tolist(),
                                                        d.track_id.tolist(), strict=True):
                    if tid >= 0:
                        mot.append(f"{out.frame.index + 1},{tid + 1},{x1:.2f},{y1:.2f},"
                                   f"{x2 - x1:.2f},{y2 - y1:.2f},{score:.4f},-1,-1,-1\n")
    replayed.counts = analytics.counts()
    return replayed


def _results(frames: Iterable[RecordedFrame], stream: str) -> Iterator[Result]:
    """The model's results as the analytics stage got them: each carrying the predicted
    frames before it as riders."""
    riders: list[Frame] = []
    for recorded in frames:
        frame = Frame(stream, recorded.index, recorded.pts, 0.0, None, skipped=recorded.skipped)
        if recorded.predicted and recorded.skipped is None:
            riders.append(frame)
            continue
        frame.riders, riders = riders, []
        boxes = Detections.empty() if recorded.skipped else recorded.detections
        yield Result(frame, boxes)
    if riders:  # predicted frames after the last one the model saw (a stopped run's):
        last = riders.pop()  # out with no boxes, the tracker left alone
        last.riders, last.skipped = riders, "end"
        yield Result(last, Detections.empty())


def stream_fps(frames: list[RecordedFrame]) -> float:
    """A stream's rate from its frames' times (median interval); 30 where they have none."""
    times = np.asarray([f.pts for f in frames if f.pts is not None], np.float64)
    steps = np.diff(times)
    steps = steps[steps > 0]
    return float(1.0 / np.median(steps)) if len(steps) else 30.0
