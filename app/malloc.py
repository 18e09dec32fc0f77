"""How a long-running vidpipe holds its memory: glibc's malloc arenas, limited.

glibc gives threads that allocate at once arenas of their own (up to 8 per core), and memory
freed in an arena other than the one it came from, or fragmented across many, is not given
back to the system. A service hands every frame from a decode thread to inference and sinks on
others: its resident memory then grows by the hour while Python's own heap stays flat
(measured: docs/OPERATIONS.md, "Soak"). Fewer arenas trade a little allocation contention
for memory that is reused.
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
