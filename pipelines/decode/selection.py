"""FrameSelection: which of a stream's decoded frames go to the model, in the order they come.

The picker (``--detect-every``, ``--detect-fps``) offers some; motion gating (``MotionGate``)
may skip an offered one (``skipped = "idle"``); the frames not offered are held and ride with
the next frame handed on. Riders and skipped frames keep their pictures only where a sink
draws on them (``rider_images``).
"""

from __future__ import annotations

from pipelines.decode.motion import MotionGate
from pipelines.decode.picker import DetectionPicker
from pipelines.frame import Frame


class FrameSelection:
    def __init__(self, picker: DetectionPicker, gate: MotionGate | None,
                 rider_images: bool) -> None:
        self.picker, self.gate, self.rider_images = picker, gate, rider_images
        self._held: list[Frame] = []

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def select(self, frame: Frame, motion: float | None, step: float) -> Frame | None:
        """``frame`` to hand on, carrying the frames held for it; None when it is held (its
        ``motion`` noted for the gate; ``step``: the stream's frame interval)."""
        if not self.picker.thins and self.gate is None:
            return frame
        assert frame.pts is not None, "a frame on the stream's timeline has a pts"
        if self.gate is not None:
            self.gate.note(motion)
        if not self.picker.take(frame.pts, step):
            self._held.append(frame)
            return None
        if self.gate is not None and not self.gate.take(frame.pts, step):
            frame = self._rider(frame)
            frame.skipped = "idle"
        frame.riders = [self._rider(f) for f in self._held]
        self._held = []
        return frame

    def release(self) -> Frame | None:
        """At the end: the last frame held, carrying the others (None: none held)."""
        if not self._held:
            return None
        last = self._held.pop()
        last.riders = [self._rider(f) for f in self._held]
        self._held = []
        return last

    def _rider(self, frame: Frame) -> Frame:
        return frame if self.rider_images else frame.without_image()
