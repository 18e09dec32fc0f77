"""LatestFrameSink: the newest annotated frame of a stream as a JPEG, for the dashboard.

The sink only keeps the newest result (at most one every ``interval_s``); the JPEG is drawn
and encoded when someone reads it, once per kept result. Encoding every stream's frame as it
passed made the sink thread the shared detector's bottleneck with many streams, most of it on
JPEGs nobody looked at: a stream nobody watches costs nothing.
"""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np

from models.spec import ModelSpec
from pipelines.frame import Result, host_array
from pipelines.sinks.stage import ClosingSink
from pipelines.sinks.video import draw_detections


class LatestFrameSink(ClosingSink):
    wants_images = True

    def __init__(self, spec: ModelSpec, *, interval_s: float = 0.5, quality: int = 80) -> None:
        self.spec = spec
        self.interval_s = interval_s
        self.picture_every_s = interval_s  # the pictures it draws on (sinks.pictures)
        self.quality = quality
        self._latest: Result | None = None  # kept, not yet encoded
        self._jpeg: bytes | None = None
        self._shown: Result | None = None  # the result the JPEG was drawn from
        self._kept_at = float("-inf")
        self._lock = threading.Lock()

    @property
    def jpeg(self) -> bytes | None:
        """The newest kept frame with its boxes drawn, as a JPEG (None before the first);
        encoded here, on the reader's thread, the first time it is read."""
        with self._lock:
            latest, self._latest = self._latest, None
            if latest is not None:
                self._jpeg, self._shown = self._encode(latest), latest
            return self._jpeg

    @property
    def picture(self) -> np.ndarray | None:
        """The newest kept frame's picture as it is, RGB on the host (None before the
        first)."""
        with self._lock:
            latest = self._latest if self._latest is not None else self._shown
        if latest is None or latest.frame.image is None:
            return None
        return host_array(latest.frame.image)

    def write(self, result: Result) -> None:
        now = time.monotonic()
        if now - self._kept_at < self.interval_s or result.frame.image is None:
            return
        if result.frame.scaled:
            raise ValueError(f"LatestFrameSink needs full pictures, got one decoded at "
                             f"{result.frame.image_size} of {result.frame.size}")
        with self._lock:
            self._latest = result
        self._kept_at = now

    def _encode(self, result: Result) -> bytes | None:
        assert result.frame.image is not None
        rgb = draw_detections(host_array(result.frame.image), result.detections, self.spec,
                              result.attributes)
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        return data.tobytes() if ok else self._jpeg

    def close(self, commit: bool = True) -> None:
        pass  # the last picture stays readable after the stream stops
