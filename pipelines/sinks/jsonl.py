"""JsonlSink: one JSON line per frame — stream, frame index, pts, and its detections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.stage import ClosingSink


class JsonlSink(ClosingSink):
    wants_images = False

    def __init__(self, path: Path, spec: ModelSpec) -> None:
        self.path = path
        self.spec = spec
        self._atomic = AtomicPath(path)
        self._file = self._atomic.partial.open("w", encoding="utf-8")
        self.lines = 0

    def write(self, result: Result) -> None:
        self._file.write(json.dumps(self.record(result), separators=(",", ":")) + "\n")
        self.lines += 1

    def record(self, result: Result) -> dict[str, Any]:
        d = result.detections
        frame = result.frame
        return {
            "stream": frame.stream_id,
            "frame": frame.index,
            "pts": None if frame.pts is None else round(frame.pts, 6),
            "detections": [
                {"box": [round(float(v), 2) for v in box], "score": round(float(score), 4),
                 "class_id": int(cls), "label": self.spec.label(int(cls))}
                for box, score, cls in zip(d.xyxy, d.score, d.class_id, strict=True)
            ],
        }

    def close(self, commit: bool = True) -> None:
        if self._file.closed:
            return
        self._file.close()
        if commit:
            self._atomic.commit()
        else:
            self._atomic.discard()
