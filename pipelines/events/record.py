"""RecordInput: a camera's recorded input (its main stream, role ``record``) kept in its
stream's packet ring for clips, and never decoded, on a thread of its own.

Clips are cut by the times of the detected input's timeline (events carry its pts), so the
recorded packets are placed on it: at each (re)connection the first key frame shows where the
detected input's timeline was when the camera sent it (the source's ``arrival_time``; the
moment it was read where the source cannot tell), and the packets after it follow by their
own pts (the ring's rules for loops and reconnects). Until the detected input has its
first frame, nothing is kept. The two inputs of one camera share its clock, so they stay
together; two inputs drifting apart would need a periodic realignment (not needed by any
camera tested: unmeasured on real cameras).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pipelines.events.ring import PacketRing

log = logging.getLogger(__name__)


class RecordInput:
    """``source``: a packet source (a camera, a file played as one); ``now(monotonic)``: the
    detected input's timeline at that moment, None before its first frame."""

    def __init__(self, source: Any, ring: PacketRing,
                 now: Callable[[float], float | None]) -> None:
        self.source, self.ring, self.now = source, ring, now
        self.packets = 0  # kept in the ring
        self._thread = threading.Thread(target=self._run, name=f"record-{source.stream_id}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        epoch = None
        placed = False
        try:
            for packet in self.source.packets():
                if packet is None:  # a looped file's pass ended: nothing to keep
                    continue
                if self.source.epoch != epoch:
                    epoch, placed = self.source.epoch, False
                    self.ring.new_segment(self.source.video)
                if not placed:
                    at = self._placed_at(packet) if packet.is_keyframe else None
                    if at is None:
                        continue  # a clip starts on a key frame placed on the timeline
                    self.ring.align(at)
                    placed = True
                self.ring.append(packet)
                self.packets += 1
        except Exception as e:  # the stream goes on without clips of this input
            log.error("%s: its recorded input stopped: %s", self.source.stream_id, e)

    def _placed_at(self, packet: Any) -> float | None:
        """Where the key frame ``packet`` shows on the detected input's timeline: at the
        moment its camera sent it, not the moment this thread read it — on a busy machine
        the read comes late by the thread's wait for a core (a clip 0.11 s off, on CI's
        slow machine)."""
        pts = None if packet.pts is None or packet.time_base is None else \
            float(packet.pts * packet.time_base)
        sent = self.source.arrival_time(pts)
        return self.now(time.monotonic() if sent is None else sent)

    def close(self) -> None:
        """Stop reading (the source's close is thread-safe) and wait for the thread."""
        self.source.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
