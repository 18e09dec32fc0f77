"""FrameSelection: which of a stream's decoded frames go to the model, in the order they come,
chosen on the stream's decoder thread.

The picker (``--detect-every``, ``--detect-fps``) offers some; motion gating (``MotionGate``)
may skip an offered one (``skipped = "idle"``); the frames not offered, and the skipped
ones, are held and ride with a later frame: a frame for the model carries those held since
the last one; skipped frames go on as a *run*, the last skipped frame carrying the frames
held before it, once the run spans ``SKIP_RUN_S`` of the stream's time or just before the
next frame for the model. So a quiet camera's frames leave the decoder thread once a second,
not one by one, each still a result of its own further on (its line, its count). Held
frames keep their pictures only where a sink draws on them (``rider_images``, frame by
frame: ``sinks.pictures``): a slow
detection rate holds metadata, not pictures.
"""

from __future__ import annotations

from pipelines.decode.motion import MotionGate
from pipelines.decode.picker import DetectionPicker
from pipelines.frame import Frame
from pipelines.sinks.pictures import KeepsPicture

SKIP_RUN_S = 1.0  # the longest a run of skipped frames waits on its decoder thread


class FrameSelection:
    """``waits_for_news`` (a file's stream, gated): a frame the gate would skip while frames
    sent to the model have results still to come waits undecided (``waiting``), and the
    frames after it with it, until the decoder thread has them all in (``resume``): what
    is chosen does not depend on how far the decoder ran ahead. A camera's decoder never
    waits: it chooses with what it knows."""

    def __init__(self, picker: DetectionPicker, gate: MotionGate | None,
                 rider_images: KeepsPicture, *, waits_for_news: bool = False) -> None:
        self.picker, self.gate, self.rider_images = picker, gate, rider_images
        self.waits_for_news = waits_for_news and gate is not None
        self._held: list[Frame] = []
        self._undecided: list[tuple[Frame, float | None]] = []  # the first offered already
        self._unsettled = False  # a frame went to the model since the last ``resume``

    @property
    def holding(self) -> bool:
        return bool(self._held or self._undecided)

    @property
    def waiting(self) -> bool:
        """Frames wait for the results of those sent to the model (``resume``)."""
        return bool(self._undecided)

    @property
    def held(self) -> int:
        """Frames received that it holds back (none of them handed on yet)."""
        return len(self._held) + len(self._undecided)

    def resume(self, step: float) -> list[Frame]:
        """The waiting frames chosen, now that every frame handed on has its result."""
        self._unsettled = False
        (first, _), *rest = self._undecided
        self._undecided = []
        chosen = self._rule(first, step)
        assert chosen is not None, "with every result in, the gate decides"
        for frame, motion in rest:
            chosen += self.select(frame, motion, step)
        return chosen

    @property
    def _open(self) -> bool:
        """Whether the last frame held keeps its picture, undecided: it may yet go to the
        model (``release``); a skipped one was decided as it was held."""
        return bool(self._held) and not self._held[-1].skipped

    def select(self, frame: Frame, motion: float | None, step: float) -> list[Frame]:
        """The frames to hand on now, in order (none while ``frame`` is held or waits): a
        run of skipped frames, and ``frame`` carrying the frames held for it (``motion``: its
        motion, noted for the gate; ``step``: the stream's frame interval)."""
        if not self.picker.thins and self.gate is None:
            return [frame]
        if self._undecided:
            self._undecided.append((frame, motion))
            return []
        assert frame.pts is not None, "a frame on the stream's timeline has a pts"
        if self.gate is not None:
            self.gate.note(motion)
        if not self.picker.take(frame.pts, step):
            self._hold(frame)
            return []
        chosen = self._rule(frame, step)
        if chosen is None:
            self._undecided.append((frame, motion))
            return []
        return chosen

    def _rule(self, frame: Frame, step: float) -> list[Frame] | None:
        """The gate's say on a frame the picker offered (None: it waits for news)."""
        assert frame.pts is not None
        if self.gate is not None:
            taken = self.gate.take(frame.pts, step, news=not self._unsettled)
            if taken is None:
                return None
            if not taken:
                frame.skipped = "idle"
                self._hold(frame)
                first = self._held[0].pts
                assert first is not None
                return [self._run()] if frame.pts - first >= SKIP_RUN_S - step / 2 else []
        run = [self._run()] if any(f.skipped for f in self._held) else []
        if self._open:
            self._held[-1] = self._rider(self._held[-1])
        frame.riders, self._held = self._held, []
        self._unsettled = self.waits_for_news
        return [*run, frame]

    def release(self, step: float) -> list[Frame]:
        """At the end: the waiting frames chosen with what is known, then the last frame
        held, carrying the others."""
        chosen = self.resume(step) if self._undecided else []
        if not self._held:
            return chosen
        last = self._held.pop()
        last.riders, self._held = self._held, []
        return [*chosen, last]

    def _hold(self, frame: Frame) -> None:
        """Hold ``frame``: only the last frame held keeps its picture (``release`` may hand
        it to the model), unless riders keep theirs; a skipped one never needs it. Whether a
        rider keeps its picture is asked once a frame (``rider_images`` keeps a cadence)."""
        if self._open:
            self._held[-1] = self._rider(self._held[-1])
        self._held.append(self._rider(frame) if frame.skipped else frame)

    def _run(self) -> Frame:
        """The last skipped frame held, carrying the frames held before it; the frames held
        after it stay for the next."""
        last = max(i for i, f in enumerate(self._held) if f.skipped)
        carrier = self._held[last]
        carrier.riders = self._held[:last]  # each asked already, as a later one came
        self._held = self._held[last + 1:]
        return carrier

    def _rider(self, frame: Frame) -> Frame:
        if (frame.image is None and frame.load is None) or self.rider_images(frame):
            return frame
        return frame.without_image()
