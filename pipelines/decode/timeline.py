"""StreamTimeline: the pts a stream's results carry — never null, never going back, and
continued across a camera's reconnects by the time it was away.

A camera's pts starts again (at 0, or null on the first frame) on every connection, and a
file played in a loop repeats its own: read as they come, a 12 s outage would be invisible
and pts arithmetic would break. The decode stage, which sees every frame of its stream in
order and knows the connection (``epoch``) each came on, places each frame here: within a
connection at its own pts, shifted so that the stream's clock goes on; a frame without pts,
or one that would go back, one frame interval after the last; and the first frame of a new
connection after the last by the time between their captures, which is a *gap*, counted.
"""

from __future__ import annotations


class StreamTimeline:
    def __init__(self, fps: float) -> None:
        self.step = 1.0 / (fps if fps and fps > 0 else 30.0)
        self.offset = 0.0  # the source's pts -> this timeline
        self._epoch: int | None = None
        # (the last pts given, its frame's capture in monotonic s): one value, as other
        # threads read it (now())
        self._anchor: tuple[float, float] | None = None
        self._rebase = False  # a connection began without pts: its first pts sets the offset

    def at(self, pts: float | None, epoch: int, captured_at: float) -> tuple[float, float | None]:
        """The stream pts of the next frame (its source's ``pts`` on connection ``epoch``,
        captured at ``captured_at``), and the gap before it in seconds where it is the first
        frame of a new connection (None otherwise)."""
        gap = None
        anchor = self._anchor
        if anchor is None or epoch != self._epoch:
            if anchor is None:
                now = 0.0 if pts is None else pts
            else:
                last, captured = anchor
                away = max(captured_at - captured, self.step)
                now = last + away
                gap = away - self.step
            self._epoch = epoch
            self._rebase = pts is None
            if pts is not None:
                self.offset = now - pts
        else:
            last = anchor[0]
            if pts is None:
                now = last + self.step
            elif self._rebase or pts + self.offset <= last:
                now = last + self.step
                self.offset = now - pts
                self._rebase = False
            else:
                now = pts + self.offset
        self._anchor = (now, captured_at)
        return now, gap

    def now(self, monotonic: float) -> float | None:
        """Where the timeline is at the ``monotonic`` moment: its last frame's pts moved by
        the time from that frame's capture to the moment (back, for a moment before it);
        None before its first frame. Read from other threads (a camera's recorded input is
        placed on it, ``pipelines.events.record``): the pts and its capture read as one."""
        anchor = self._anchor
        if anchor is None:
            return None
        last, captured = anchor
        return last + (monotonic - captured)
