"""JsonlSink: one JSON line per frame — stream, frame index, pts, and its detections.

``detection_line`` is the one line format: ``vidpipe run``'s file, the service's per-stream
files and its results feed all write it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.stage import ClosingSink


def detection_record(result: Result, spec: ModelSpec) -> dict[str, Any]:
    """A frame's result as JSON-ready data: stream, frame, pts, detections."""
    d = result.detections
    frame = result.frame
    return {
        "stream": frame.stream_id,
        "frame": frame.index,
        "pts": None if frame.pts is None else round(frame.pts, 6),
        "detections": [
            {"box": [round(float(v), 2) for v in box], "score": round(float(score), 4),
             "class_id": int(cls), "label": spec.label(int(cls))}
            for box, score, cls in zip(d.xyxy, d.score, d.class_id, strict=True)
        ],
    }


def detection_line(result: Result, spec: ModelSpec) -> str:
    """``detection_record`` as one compact JSON line, without its newline."""
    return json.dumps(detection_record(result, spec), separators=(",", ":"))


class JsonlSink(ClosingSink):
    """One run's file: written under a temporary name, renamed into place on commit."""

    wants_images = False

    def __init__(self, path: Path, spec: ModelSpec) -> None:
        self.path = path
        self.spec = spec
        self._atomic = AtomicPath(path)
        self._file = self._atomic.partial.open("w", encoding="utf-8")
        self.lines = 0

    def write(self, result: Result) -> None:
        self._file.write(detection_line(result, self.spec) + "\n")
        self.lines += 1

    def close(self, commit: bool = True) -> None:
        if self._file.closed:
            return
        self._file.close()
        if commit:
            self._atomic.commit()
        else:
            self._atomic.discard()
