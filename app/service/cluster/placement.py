"""Which worker owns which stream: the least loaded workers first, rendezvous (highest random
weight) hashing among them.

Every (stream, worker) pair gets a score from a hash of both. A new stream goes to the worker
with the highest score among the least loaded of those with room, so loads stay within one
stream of each other and the choice does not depend on the order workers are listed in. A
worker that joins takes its share (floor(streams / workers)) from the most loaded, each time
the stream that scores it highest: about 1/M of the streams move, all to it. A lost worker's
streams go, one by one, to the least loaded live workers, and only they move. Pure functions:
the controller keeps the state.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping


def score(stream: str, worker: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{stream}\x1f{worker}".encode(),
                                          digest_size=8).digest(), "big")


def ranked(stream: str, workers: Iterable[str]) -> list[str]:
    """``workers`` best first for ``stream``."""
    return sorted(workers, key=lambda w: score(stream, w), reverse=True)


def place(stream: str, load: Mapping[str, int], capacity: int) -> str | None:
    """The worker for ``stream``: among those with fewer than ``capacity`` streams
    (``load``: worker -> streams it owns), the least loaded, and of those the one hashing
    ranks first; None when all are full."""
    room = [w for w, n in load.items() if n < capacity]
    if not room:
        return None
    least = min(load[w] for w in room)
    return ranked(stream, [w for w in room if load[w] == least])[0]


def joined(owners: Mapping[str, str], worker: str, workers: Iterable[str]) -> dict[str, str]:
    """The moves when ``worker`` joins ``workers``: its share, floor(streams / workers),
    taken one at a time from the most loaded worker (the stream there that scores it
    highest); none moves between the others."""
    everyone = sorted({*workers, worker})
    share = len(owners) // len(everyone)
    load = Counter({w: 0 for w in everyone}) + Counter(owners.values())
    mine = dict(owners)
    moves: dict[str, str] = {}
    while load[worker] < share:
        busiest = max((w for w in everyone if w != worker), key=lambda w: (load[w], w))
        streams = [s for s, w in mine.items() if w == busiest]
        stream = max(streams, key=lambda s: score(s, worker))
        moves[stream] = mine[stream] = worker
        load[busiest] -= 1
        load[worker] += 1
    return moves


def orphaned(owners: Mapping[str, str], gone: str, load: Mapping[str, int],
             capacity: int) -> dict[str, str | None]:
    """Where the streams of ``gone`` go: each to the worker ``place`` picks among the live
    ones (None: no room anywhere); ``load`` is the live workers' streams before the move."""
    load = dict(load)
    moves: dict[str, str | None] = {}
    for stream in sorted(s for s, w in owners.items() if w == gone):
        worker = place(stream, load, capacity)
        moves[stream] = worker
        if worker is not None:
            load[worker] += 1
    return moves
