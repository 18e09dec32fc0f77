"""ArrivalClock: when a live camera's frame was captured, on this host's clock, from its
timestamps.

A frame read off a socket may have waited there: the camera keeps sending whether or not it
is read, so a reader that falls behind reads old frames, and the moment of reading would hide
how old. The least-delayed read seen so far (the smallest ``read time - pts``) stands for the
camera's clock; a frame read later than that waited on the way, and its arrival is taken as
``pts + that offset``. Camera and host clocks drift apart (crystals differ by tens of ppm):
the offset is let grow by ``drift`` seconds per second, so a camera whose clock runs slow
does not look further behind for ever.
"""

from __future__ import annotations

DRIFT = 1e-3  # seconds per second the camera's clock may lose against the host's


class ArrivalClock:
    def __init__(self, drift: float = DRIFT) -> None:
        if drift < 0:
            raise ValueError(f"drift must be >= 0, got {drift}")
        self.drift = drift
        self._offset: float | None = None
        self._seen_at = 0.0

    def reset(self) -> None:
        """A new connection: its timestamps start afresh."""
        self._offset = None

    def observe(self, pts: float | None, now: float) -> None:
        """A packet with presentation time ``pts`` (seconds) was read at ``now``."""
        if pts is None:
            return
        offset = now - pts
        if self._offset is not None:
            offset = min(offset, self._offset + self.drift * (now - self._seen_at))
        self._offset, self._seen_at = offset, now

    def arrival(self, pts: float | None) -> float | None:
        """The host time the frame at ``pts`` left the camera, or None before any packet."""
        if pts is None or self._offset is None:
            return None
        return pts + self._offset
