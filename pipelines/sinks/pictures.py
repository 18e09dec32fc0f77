"""Which frames keep their full picture past the model: those a sink will draw on, no more.

A service stream's sinks draw on few of its frames: the snapshot a dashboard shows wants one
every ``snapshot_interval_s``, the result lines and the feed none. A 720p picture is 2.8 MB;
kept on every frame held for a slow detection rate, one 720p30 camera at ``detect_fps: 0.2``
held 1.24 GB (325 MB now: docs/BENCHMARKS.md). ``picture_interval`` reads what a stream's
sinks want — every picture (``wants_images``: annotated video, event snapshots), one each
``picture_every_s`` (the snapshot), or none — and a ``PictureKeeper`` per stream answers,
frame by frame, on the thread that holds the frame. The rest give their pixels back once
prepared for the model (``release``), or as they are held for later (``--detect-fps``,
motion gating): a slow detection rate holds metadata, not a picture per frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipelines.frame import Frame
from pipelines.sinks.stage import Sink

KeepsPicture = Callable[[Frame], bool]


def keep_all(frame: Frame) -> bool:
    return True


def keep_none(frame: Frame) -> bool:
    return False


def picture_interval(sinks: Sequence[Sink], unseen: bool) -> float | None:
    """How often ``sinks`` draw on a frame's picture — of the frames the model saw, or with
    ``unseen`` of those it did not (held, skipped: an object's snapshot is never one) —:
    0.0 on every frame's, s > 0 on one every s seconds, None on none."""
    wanted = [float(getattr(s, "picture_every_s", 0.0)) for s in sinks if s.wants_images
              and (not unseen or getattr(s, "pictures_of_unseen", True))]
    return min(wanted) if wanted else None


class Cadence:
    """Which frames keep their picture: one each ``spacing`` x ``every_s`` seconds of
    capture time (0.0: all; None: none). Called from more than one thread, a race keeps one
    picture more, never fewer."""

    def __init__(self, every_s: float | None, spacing: float = 0.5) -> None:
        if every_s is not None and every_s < 0:
            raise ValueError(f"a picture interval is >= 0 s, got {every_s}")
        self.every_s, self.spacing = every_s, spacing
        self._last = float("-inf")  # the capture time of the last frame kept

    def __call__(self, frame: Frame) -> bool:
        if self.every_s is None:
            return False
        if self.every_s == 0.0:
            return True
        if frame.captured_at - self._last >= self.every_s * self.spacing:
            self._last = frame.captured_at
            return True
        return False


class PictureKeeper:
    """One stream's frames that keep their picture past the model (``seen``: on the thread
    that prepares them, one each half interval, so that a sink taking one each interval
    always finds a fresh one) and while held for later (``unseen``: on its decoder thread,
    one each interval: held frames reach the sinks all at once, with the frame that carries
    them, and a snapshot takes the first), from what its ``sinks`` draw on; ``every_frame``:
    all of them (classifiers crop them)."""

    def __init__(self, sinks: Sequence[Sink], every_frame: bool = False) -> None:
        self.seen = Cadence(0.0 if every_frame else picture_interval(sinks, unseen=False))
        self.unseen = Cadence(0.0 if every_frame else picture_interval(sinks, unseen=True),
                              spacing=1.0)


def release(frame: Frame) -> None:
    """``frame`` without its pixels from now on (its size kept: boxes are in its pixels)."""
    if frame.image is None and frame.load is None:
        return
    if frame.source_size is None and frame.image is not None:
        frame.source_size = frame.image_size
    frame.image = frame.ready = frame.load = None
