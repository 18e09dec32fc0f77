"""FairChannel: the channel in front of a shared detector, one bounded queue per stream.

Streams attach and detach while the detector runs. Each has its own queue and drop policy, so
a live stream keeps its own newest frames (``drop_oldest`` evicts only that stream's oldest,
counted against it) and a blocked stream waits only for its own room. ``get_batch`` takes
round the streams in turn, one item from each non-empty queue, starting after the stream it
served last: with every stream saturated each gets an equal share of every batch, and a fast
stream cannot crowd out a slow one. Round-robin, not oldest-first: with ages, a stream whose
frames arrive late (a camera behind a slow link) would always lose to the others.

It also keeps, per stream, how many items were taken and how many of those are settled
(handed out as a result, or dropped after the take), so a detaching stream can wait until
nothing of it is left in flight.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from pipelines.channel import DropPolicy, Waiters, evict_oldest
from pipelines.errors import ChannelClosed

T = TypeVar("T")


class FairChannel(Generic[T]):
    """Per-stream queues of ``capacity`` items; ``key(item)`` names an item's stream, and
    ``on_drop(item, cause)`` hears of every item it drops. Closed (``close()``) when the
    detector ends: then ``get_batch`` raises ChannelClosed once every queue is empty."""

    def __init__(self, name: str, capacity: int, key: Callable[[T], str], *,
                 on_drop: Callable[[T, str], None] | None = None,
                 frames: Callable[[T], int] | None = None,
                 carry: Callable[[T, T], T | None] | None = None,
                 ends_with_streams: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"channel {name!r}: capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self._key = key
        self._on_drop = on_drop
        self._carry = carry  # as Channel's: what an eviction hands on with the newer item
        # frames an item stands for (a frame with riders: more than one); ``taken`` and
        # ``settled`` count frames, so that each result settles one
        self._frames = frames or (lambda item: 1)
        self._queues: dict[str, deque[tuple[T, float]]] = {}
        self._queued = 0  # items in all the queues
        self._policies: dict[str, DropPolicy] = {}
        self._capacities: dict[str, int] = {}
        self._open: set[str] = set()  # streams whose producer has not closed its inlet
        self._order: list[str] = []  # round-robin order of the attached streams
        self._turn = 0
        self.taken: Counter[str] = Counter()
        self.settled: Counter[str] = Counter()
        self._closed = False
        # a run's channel (its streams attached before it starts) ends with its last stream;
        # a shared detector's outlives its streams, until ``close``
        self._ends_with_streams = ends_with_streams
        self._readers = Waiters()  # the consumer, waiting for an item (or the end)
        self._writers = Waiters()  # producers waiting for room in their queue

    def __len__(self) -> int:
        return self._queued

    @property
    def closed(self) -> bool:
        return self._closed

    def fill(self) -> float:
        """How full its queues are together, 0..1."""
        return self._queued / max(1, sum(self._capacities.values()))

    @property
    def streams(self) -> list[str]:
        return list(self._order)

    def attach(self, stream: str, policy: DropPolicy,
               capacity: int | None = None) -> StreamInlet[T]:
        """A queue for ``stream`` of ``capacity`` items (default: the channel's); its producer
        puts into (and closes) the inlet returned."""
        if capacity is not None and capacity < 1:
            raise ValueError(f"stream {stream!r}: capacity must be >= 1, got {capacity}")
        if self._closed:
            raise ChannelClosed(f"channel {self.name!r} is closed")
        if stream in self._queues:
            raise ValueError(f"stream {stream!r} is attached to {self.name!r} already")
        self._queues[stream] = deque()
        self._policies[stream] = policy
        self._capacities[stream] = capacity or self.capacity
        self._open.add(stream)
        self._order.append(stream)
        return StreamInlet(self, stream)

    def policy(self, stream: str) -> DropPolicy:
        """``stream``'s drop policy."""
        return self._policies[stream]

    def in_flight(self, stream: str) -> int:
        """Frames of ``stream`` queued, or taken and not yet settled."""
        queued = sum(self._frames(item) for item, _ in self._queues.get(stream, ()))
        return queued + self.taken[stream] - self.settled[stream]

    def detach(self, stream: str) -> None:
        """Forget ``stream`` (its producer is done and nothing of it is in flight); whatever it
        still had queued is dropped as ``dropped_stopped``."""
        queue = self._queues.pop(stream, deque())
        self._queued -= len(queue)
        for item, _ in queue:
            self._drop(item, "dropped_stopped")
        self._policies.pop(stream, None)
        self._capacities.pop(stream, None)
        self._open.discard(stream)
        if stream in self._order:
            index = self._order.index(stream)
            self._order.remove(stream)
            if index < self._turn:
                self._turn -= 1
        for counts in (self.taken, self.settled):
            counts.pop(stream, None)
        self._notify()

    async def put(self, stream: str, item: T) -> None:
        await self.put_many(stream, (item,))

    async def put_many(self, stream: str, items: Sequence[T]) -> None:
        """``stream``'s items in order, as ``put`` each, the consumer woken once for them
        (or before waiting for room, for those already in)."""
        queue = self._queues.get(stream)
        if queue is None or stream not in self._open:
            raise ChannelClosed(f"put for stream {stream!r}, which is not attached to "
                                f"{self.name!r}")
        capacity = self._capacities[stream]
        unannounced = False
        for item in items:
            if self._policies[stream] == "block" and len(queue) >= capacity:
                if unannounced:
                    self._readers.notify()
                    unannounced = False
                while len(queue) >= capacity and stream in self._open:
                    await self._writers.wait()
            if len(queue) >= capacity:
                self._queued -= 1
                left = evict_oldest(queue, item, self._carry)
                if left is not None:
                    self._drop(left, "dropped_full")
            queue.append((item, time.monotonic()))
            self._queued += 1
            unannounced = True
        if unannounced:
            self._readers.notify()

    def close_stream(self, stream: str) -> None:
        """``stream``'s producer is done: no more puts; what it queued is still taken."""
        self._open.discard(stream)
        if self._ends_with_streams and not self._open:
            self._closed = True
        self._notify()

    async def get_batch(self, max_items: int, timeout_s: float) -> list[tuple[T, float]]:
        """Up to ``max_items`` items, round the streams: wait for the first, then at most
        ``timeout_s`` for the rest. ChannelClosed once closed and empty."""
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        while not len(self):
            if self._closed:
                raise ChannelClosed(f"channel {self.name!r} is closed and drained")
            await self._readers.wait()
        batch = self._take(max_items)
        deadline = time.monotonic() + timeout_s
        while len(batch) < max_items and not self._closed:
            if not await self._readers.wait_until(deadline):
                break
            batch.extend(self._take(max_items - len(batch)))
        return batch

    def drop(self, item: T, cause: str) -> None:
        """An item taken from here was dropped (stale at inference): settled, and counted."""
        self.settle(self._key(item), self._frames(item))
        self._drop(item, cause)

    def settle(self, stream: str, count: int = 1) -> None:
        """``count`` taken items of ``stream`` became results."""
        if stream in self._queues:
            self.settled[stream] += count

    def close(self) -> None:
        """No more streams: the consumer ends once the queues are empty."""
        self._closed = True
        self._open.clear()
        self._notify()

    def abort(self) -> list[T]:
        """Closed at once, and what was still queued handed back (a run's end)."""
        self.close()
        leftovers = [item for queue in self._queues.values() for item, _ in queue]
        for queue in self._queues.values():
            queue.clear()
        self._queued = 0
        return leftovers

    def _take(self, most: int) -> list[tuple[T, float]]:
        """Up to ``most`` items, one per non-empty stream in turn."""
        taken: list[tuple[T, float]] = []
        while len(taken) < most and self._order and len(self):
            stream = self._order[self._turn % len(self._order)]
            self._turn = (self._turn + 1) % len(self._order)
            queue = self._queues[stream]
            if queue:
                item, put_at = queue.popleft()
                self._queued -= 1
                self.taken[stream] += self._frames(item)
                taken.append((item, time.monotonic() - put_at))
        if taken:
            self._writers.notify()  # room in the queues a blocked producer waits on
        return taken

    def _drop(self, item: T, cause: str) -> None:
        if self._on_drop is not None:
            self._on_drop(item, cause)

    def _notify(self) -> None:
        """Everyone waiting: a stream or the channel changed."""
        self._readers.notify()
        self._writers.notify()


class StreamInlet(Generic[T]):
    """One stream's end of a FairChannel: what its decode stage puts into and closes."""

    def __init__(self, channel: FairChannel[T], stream: str) -> None:
        self.channel = channel
        self.stream = stream

    async def put(self, item: T) -> None:
        await self.channel.put(self.stream, item)

    async def put_many(self, items: Sequence[T]) -> None:
        await self.channel.put_many(self.stream, items)

    def close(self) -> None:
        self.channel.close_stream(self.stream)

