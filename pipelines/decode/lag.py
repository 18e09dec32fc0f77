"""LagWatch: whether a live stream's decoding has fallen more than ``max_lag_s`` behind its
camera, packet by packet: then the packets up to the next key frame are skipped (the
decode stage counts them as ``dropped_stale``).

How far behind is read from the newest picture the stream has reached (the highest pts
since the last key frame), not from each packet's own: a B-frame comes after the later
picture it refers to, and is that much older when it arrives — the encoder's reordering, not
a backlog. Read per packet, three B-frames at 5 fps (600 ms) put every camera that uses them
"behind" and cost it 3 of every 5 frames (measured).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import av

log = logging.getLogger(__name__)


class LagWatch:
    def __init__(self, stream_id: str, max_lag_s: float | None,
                 arrival_time: Callable[[float], float | None]) -> None:
        """``max_lag_s``: None never skips (a file); ``arrival_time(pts)``: when the camera
        sent the picture at ``pts`` (the source's clock)."""
        if max_lag_s is not None and max_lag_s <= 0:
            raise ValueError(f"max lag must be > 0 s, got {max_lag_s}")
        self.stream_id, self.max_lag_s, self._arrival_time = stream_id, max_lag_s, arrival_time
        self._newest: float | None = None
        self._skipping = False
        self._said = False

    def behind(self, packet: av.Packet | None, now: float) -> bool:
        """Whether to skip ``packet``: the stream is waiting for a key frame, or it is more
        than ``max_lag_s`` behind its camera (and this is not a key frame)."""
        if self.max_lag_s is None:
            return False
        keyframe = packet is None or getattr(packet, "is_keyframe", True)
        pts, time_base = getattr(packet, "pts", None), getattr(packet, "time_base", None)
        if pts is not None and time_base is not None:
            at = float(pts * time_base)
            self._newest = at if keyframe or self._newest is None else max(self._newest, at)
        if keyframe:
            self._skipping = False
            return False
        if self._skipping:
            return True
        if self._newest is None:
            return False
        arrived = self._arrival_time(self._newest)
        if arrived is None or now - arrived <= self.max_lag_s:
            return False
        self._skipping = True
        (log.info if not self._said else log.debug)(
            "%s: decoding is %.0f ms behind the camera (more than %.0f ms): skipping to the "
            "next key frame, the frames skipped counted as dropped_stale", self.stream_id,
            1000 * (now - arrived), 1000 * self.max_lag_s)
        self._said = True
        return True
