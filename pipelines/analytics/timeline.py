"""Timeline: a stream's frame times on a clock that never goes back.

A file played in a loop, a camera reconnected, or a stream without timestamps restarts or
repeats its pts; a tracker, an object's lifecycle or a zone's dwell read time as always
advancing. A pts that does not move on is placed one frame interval after the last, and the
later ones are shifted by as much.
"""

from __future__ import annotations


class Timeline:
    def __init__(self, fps: float) -> None:
        self._step = 1.0 / (fps or 30.0)
        self.last: float | None = None  # the last time given
        self.offset = 0.0  # stream pts -> this clock

    def at(self, pts: float | None) -> float:
        """The time of the next frame, whose pts is ``pts`` (None: unknown)."""
        if self.last is None:
            now = 0.0 if pts is None else pts
        elif pts is None or pts + self.offset <= self.last:
            now = self.last + self._step
            if pts is not None:
                self.offset = now - pts
        else:
            now = pts + self.offset
        self.last = now
        return now
