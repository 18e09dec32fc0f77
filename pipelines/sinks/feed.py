"""LatestFrameSink: the newest annotated frame of a stream as a JPEG, for the dashboard.

Encoding every frame would cost more than the detector on a small machine, so a new JPEG is
made at most every ``interval_s``; readers get the last one made.
"""

from __future__ import annotations

import threading
import time

import cv2

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.stage import ClosingSink
from pipelines.sinks.video import draw_detections


class LatestFrameSink(ClosingSink):
    wants_images = True

    def __init__(self, spec: ModelSpec, *, interval_s: float = 0.5, quality: int = 80) -> None:
        self.spec = spec
        self.interval_s = interval_s
        self.quality = quality
        self._jpeg: bytes | None = None
        self._made_at = float("-inf")
        self._lock = threading.Lock()

    @property
    def jpeg(self) -> bytes | None:
        with self._lock:
            return self._jpeg

    def write(self, result: Result) -> None:
        now = time.monotonic()
        if now - self._made_at < self.interval_s or result.frame.image is None:
            return
        if result.frame.scaled:
            raise ValueError(f"LatestFrameSink needs full pictures, got one decoded at "
                             f"{result.frame.image_size} of {result.frame.size}")
        rgb = draw_detections(result.frame.image.numpy(), result.detections, self.spec)
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if ok:
            with self._lock:
                self._jpeg = data.tobytes()
            self._made_at = now

    def close(self, commit: bool = True) -> None:
        pass  # the last picture stays readable after the stream stops
