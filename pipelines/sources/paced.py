"""PacedFileSource: a file played as a live camera would deliver it, for live benchmarks.

Each frame counts as captured at its presentation time, in real time from the first read, and
its packet is handed over no earlier than that (a B-frame's packet follows the later frame it
depends on, as from a real encoder). With ``loop`` the file repeats, timestamps running on,
until ``duration_s`` has passed (for ever without one, until closed). The consumer never slows
the camera down: a pipeline that falls behind sees its latency grow, and a ``drop_oldest``
channel sheds the stale frames.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import av

from pipelines.sources.file import FileSource


class PacedFileSource(FileSource):
    live = True

    def __init__(self, path: str | Path, stream_id: str | None = None, *,
                 duration_s: float | None = None, loop: bool = False,
                 formats: str | None = None) -> None:
        super().__init__(path, stream_id, formats=formats)
        if duration_s is not None and duration_s <= 0:
            raise ValueError(f"duration must be > 0 s, got {duration_s}")
        self.duration_s = duration_s
        self.loop = loop
        self._t0: float | None = None

    @property
    def frame_count(self) -> int | None:
        return None  # a live stream declares nothing

    def arrival_time(self, pts: float | None) -> float | None:
        if pts is None or self._t0 is None:
            return None
        return self._t0 + pts

    def packets(self) -> Iterator[av.Packet]:
        self._t0 = time.monotonic()
        offset = 0  # in time-base units: how far the timestamps of this pass are shifted
        latest_due = 0.0
        while True:
            last_pts = 0
            for packet in super().packets():
                if packet.size == 0:  # the flush packet: only at the very end
                    continue
                last_pts = max(last_pts, (packet.pts or 0) + (packet.duration or 0))
                if packet.pts is not None:
                    packet.pts += offset
                    packet.dts = None if packet.dts is None else packet.dts + offset
                    latest_due = max(latest_due, float(packet.pts * self.time_base))
                if self._over():
                    break
                delay = self._t0 + latest_due - time.monotonic()
                if delay > 0 and self._closing.wait(delay):
                    return  # closed while waiting for the frame's moment
                yield packet
            if not self.loop or self._over():
                break
            offset += last_pts
            if self._closing.is_set():
                return
            # the pictures the decoder holds for reordering come out now: the next pass's
            # first key frame would otherwise drop them (two a pass, on the test clips)
            yield None  # type: ignore[misc]
            self._container.seek(0, stream=self.video)
        yield None  # type: ignore[misc]  # flush the decoder

    def _over(self) -> bool:
        """Past the asked duration (never, without one)."""
        if self.duration_s is None or self._t0 is None:
            return False
        return time.monotonic() - self._t0 >= self.duration_s

