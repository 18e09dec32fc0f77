"""JsonlSink: one JSON line per frame — stream, frame index, pts, time, and its detections —
but one for a quiet stretch of skipped frames (``sinks.quiet``).

``detection_line`` is the one line format: ``vidpipe run``'s file, the service's per-stream
files and its results feed all write it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks import quiet
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.stage import ClosingSink
from pipelines.walltime import wall_time


def detection_record(result: Result, spec: ModelSpec,
                     every_line: bool = False) -> dict[str, Any]:
    """A frame's result as JSON-ready data: stream, frame, pts (the stream's timeline: never
    null, never back), time (when it was captured, UTC ISO 8601; decoded, for a file),
    detections. The first frame after a camera was away has ``gap_s``. Where the stream is
    tracked, each detection has ``track_id`` (null: no confirmed track), a frame the model
    did not see has ``"predicted": true`` (``"skipped": "idle"`` where motion gating kept it
    from the model: nothing moved, nothing was seen lately), and with lines or zones
    ``analytics`` holds the stream's counts after the frame; a track its classifiers have
    answered for has ``attributes`` (head -> [label, confidence]); a service stream's line
    names the ``model`` file that saw the frame (it changes where a candidate was promoted).
    The last line of a quiet stretch of skipped frames has ``skipped_run`` (the frames it
    stands for: ``sinks.quiet``), unless ``every_line`` writes each of them.
    """
    d = result.detections
    frame = result.frame
    tracked = result.analytics is not None
    record: dict[str, Any] = {
        "stream": frame.stream_id,
        "frame": frame.index,
        "pts": None if frame.pts is None else round(frame.pts, 6),
        "time": wall_time(frame),
        "detections": [
            {"box": [round(float(v), 2) for v in box], "score": round(float(score), 4),
             "class_id": int(cls), "label": spec.label(int(cls))}
            | ({"track_id": int(tid) if tid >= 0 else None} if tracked else {})
            | ({"attributes": {head: [label, confidence] for head, (label, confidence)
                               in result.attributes[tid].items()}}
               if tid in result.attributes else {})
            for box, score, cls, tid in zip(d.xyxy, d.score, d.class_id, d.track_id.tolist(),
                                            strict=True)
        ],
    }
    if frame.model is not None:
        record["model"] = frame.model
    if frame.gap_s is not None:
        record["gap_s"] = round(frame.gap_s, 3)
    if result.predicted:
        record["predicted"] = True
    if frame.skipped:
        record["skipped"] = frame.skipped
    if result.skipped_run is not None and not every_line:
        record[quiet.KEY] = quiet.run_record(result.skipped_run)
    if result.analytics is not None and (result.analytics["lines"] or
                                         result.analytics["zones"]):
        record["analytics"] = result.analytics
    return record


def detection_line(result: Result, spec: ModelSpec, every_line: bool = False) -> str | None:
    """``detection_record`` as one compact JSON line, without its newline; None for a
    result folded into a later one's line (unless ``every_line``)."""
    if result.folded and not every_line:
        return None
    return json.dumps(detection_record(result, spec, every_line), separators=(",", ":"))


class AtomicLines(ClosingSink):
    """A file of JSON lines written under a temporary name, renamed into place on commit
    (discarded on error): a run's outputs are whole or absent."""

    wants_images = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self._atomic = AtomicPath(path)
        self._file = self._atomic.partial.open("w", encoding="utf-8")
        self.lines = 0

    def _line(self, text: str) -> None:
        self._file.write(text + "\n")
        self.lines += 1

    def close(self, commit: bool = True) -> None:
        if self._file.closed:
            return
        self._file.close()
        if commit:
            self._atomic.commit()
        else:
            self._atomic.discard()


class JsonlSink(AtomicLines):
    """``detections.jsonl``: one line per frame (``detection_line``), a quiet stretch of
    skipped frames one line unless ``every_line``."""

    def __init__(self, path: Path, spec: ModelSpec, every_line: bool = False) -> None:
        super().__init__(path)
        self.spec, self.every_line = spec, every_line

    def write(self, result: Result) -> None:
        line = detection_line(result, self.spec, self.every_line)
        if line is not None:
            self._line(line)
