"""How a long-running vidpipe holds its memory: glibc's malloc arenas, limited.

glibc gives threads that allocate at once arenas of their own (up to 8 per core), and memory
freed in an arena other than the one it came from, or fragmented across many, is not given
back to the system. A service hands every frame from a decode thread to inference and sinks on
others: its resident memory then grows by the hour while Python's own heap stays flat
(measured: docs/OPERATIONS.md, "Soak"). Fewer arenas trade a little allocation contention
for memory that is reused; the service also gives the heap's free pages back every minute
(``give_back_memory``).
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas from now on (glibc only; call before threads start).
    ``MALLOC_ARENA_MAX`` in the environment wins: the user's choice stands. Says whether the
    limit was set."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, macOS): its allocator is its own
        return False
    done = bool(libc.mallopt(M_ARENA_MAX, arenas))
    log.debug("malloc arenas limited to %d: %s", arenas, done)
    return done


def give_back_memory() -> bool:
    """Return the free pages glibc holds in its heaps to the system (``malloc_trim(0)``):
    what removed streams, decoders and frames freed stays resident otherwise (150 add/remove
    cycles of a tracked camera: +254 MB without, +137 MB with a trim a minute;
    docs/OPERATIONS.md, "Memory over time"). False where the allocator is not glibc's."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.malloc_trim(0))
