"""DecodeSlots: how many of a process's decoder threads decode at once.

Every stream has a decoder thread of its own (a live camera's reads block), but only as many
of them decode at once as the process has cores; the others wait their turn on a lock, not
on the interpreter, and are served in the order they came. Without the limit, 32 cameras'
threads that each wanted the interpreter between their decodes left the event loop, which
hands every frame from stage to stage, 0.03-0.1 of a core: the detector took 39 frames a
second of the 190 its model gives alone, with half a core idle (docs/BENCHMARKS.md, "Where
the cameras stop"). Reading a packet, and a live source's wait for it, happen outside a slot.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from types import TracebackType


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class DecodeSlots:
    """``count`` decodes at once, process-wide; ``with slots:`` holds one. Strictly first
    come, first served: a slot given back passes straight to the longest waiter, so a
    decoder that catches up (reading packet after packet without a wait) cannot take it
    again ahead of the others (``threading.Semaphore`` lets it, and starved cameras fell
    behind theirs: measured)."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"decode slots must be >= 1, got {count}")
        self.count = count
        self._free = count
        self._lock = threading.Lock()
        self._waiting: deque[threading.Lock] = deque()  # each waiter's turn, held until given

    def __enter__(self) -> DecodeSlots:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return self
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        turn.acquire()  # released by the thread that hands its slot on
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()  # the slot passes on, never free between
            else:
                self._free += 1


DECODE_SLOTS = DecodeSlots(usable_cores())  # every DecodeStage's, unless given its own
