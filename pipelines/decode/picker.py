"""Which of a stream's frames the model sees: all of them, one in ``every`` (``--detect-every``),
or about ``fps`` a second (``--detect-fps``) chosen by the stream's timeline, so a camera whose
rate wanders still gets that rate. The frames between ride with the next one the model sees,
their boxes the tracker's (``pipelines/analytics/stream.py``)."""

from __future__ import annotations


class DetectionPicker:
    def __init__(self, every: int = 1, fps: float | None = None) -> None:
        if every < 1:
            raise ValueError(f"detect every must be >= 1 frames, got {every}")
        if fps is not None and fps <= 0:
            raise ValueError(f"detect fps must be > 0, got {fps}")
        if fps is not None and every > 1:
            raise ValueError("detect every N frames or detect fps: one of them, not both")
        self.every, self.fps = every, fps
        self._gap = every - 1  # frames since the last one for the model: the first is one
        self._last: float | None = None  # the pts of the last one for the model

    @property
    def thins(self) -> bool:
        """Whether some frames go without the model."""
        return self.every > 1 or self.fps is not None

    def take(self, pts: float, step: float) -> bool:
        """Whether the frame at ``pts`` (seconds, on the stream's timeline; ``step`` its
        frame interval) goes to the model. By rate: the first frame at least 1/fps after the
        last one taken, less half a frame, so 30 fps at 5 a second takes every sixth."""
        if self.fps is None:
            if self._gap < self.every - 1:
                self._gap += 1
                return False
            self._gap = 0
            return True
        if self._last is not None and pts - self._last < 1.0 / self.fps - step / 2:
            return False
        self._last = pts
        return True
