"""RecordInput: a camera's recorded input (its main stream, role ``record``) kept in its
stream's packet ring for clips, and never decoded, on a thread of its own.

Clips are cut by the times of the detected input's timeline (events carry its pts), so the
recorded packets are placed on it: at each (re)connection the first key frame shows where the
detected input's timeline is at that moment (``now``), and the packets after it follow by
their own pts (the ring's rules for loops and reconnects). Until the detected input has its
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
                    at = self.now(time.monotonic()) if packet.is_keyframe else None
                    if at is None:
                        continue  # a clip starts on a key frame placed on the timeline
                    self.ring.align(at)
                    placed = True
                self.ring.append(packet)
                self.packets += 1
        except Exception as e:  # the stream goes on without clips of this input
            log.error("%s: its recorded input stopped: %s", self.source.stream_id, e)

    def close(self) -> None:
        """Stop reading (the source's close is thread-safe) and wait for the thread."""
        self.source.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
