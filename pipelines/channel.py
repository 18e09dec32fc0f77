"""Channel: the bounded, closable queue that links two stages.

A channel lives on the event loop (stages' worker threads never touch it). ``put`` either
waits for room (policy ``block``: files, every frame processed) or evicts the oldest item and
reports it as dropped (policy ``drop_oldest``: live streams, the latest frame wins). The end of
a stream is ``close()`` — never a sentinel item — and ``get`` on a closed, drained channel
raises ``ChannelClosed``. A channel fed by several producers (the fan-in before inference)
closes when the last of them has closed it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Generic, Literal, Protocol, TypeVar

from pipelines.errors import ChannelClosed

T = TypeVar("T")
T_in = TypeVar("T_in", contravariant=True)
DropPolicy = Literal["block", "drop_oldest"]
DROP_POLICIES: tuple[str, ...] = ("block", "drop_oldest")


class Input(Protocol[T]):
    """What a stage takes from: a Channel, or a shared detector's FairChannel."""

    async def get_batch(self, max_items: int, timeout_s: float) -> list[tuple[T, float]]: ...

    def drop(self, item: T, cause: str) -> None: ...


class Output(Protocol[T_in]):
    """What a stage puts into: a Channel, or one stream's inlet of a FairChannel."""

    async def put(self, item: T_in) -> None: ...

    async def put_many(self, items: Sequence[T_in]) -> None: ...

    def close(self) -> None: ...


def evict_oldest(queue: deque[tuple[T, float]], item: T,
                 carry: Callable[[T, T], T | None] | None) -> T | None:
    """The oldest of a full queue taken out to make room for ``item``; returns what is left
    of it to drop (None: nothing), ``carry`` handing on what it can with the next in order
    (the next queued, or ``item``)."""
    evicted = queue.popleft()[0]
    after = queue[0][0] if queue else item
    return evicted if carry is None else carry(evicted, after)


class Waiters:
    """Tasks waiting for a queue to change. Every waiter re-checks its own condition after a
    wake-up; one event per waiter keeps wake-ups synchronous (``notify`` needs no running
    task) and cancellation lossless."""

    def __init__(self) -> None:
        self._events: set[asyncio.Event] = set()

    async def wait(self) -> None:
        event = asyncio.Event()
        self._events.add(event)
        try:
            await event.wait()
        finally:
            self._events.discard(event)

    async def wait_until(self, deadline: float) -> bool:
        """Wait for a change until the monotonic ``deadline``; False when it passed first."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining):
                await self.wait()
        except TimeoutError:
            return False
        return True

    def notify(self) -> None:
        for event in self._events:
            event.set()


class Channel(Generic[T]):
    """A bounded FIFO with a drop policy, per-cause drop counters and no sentinels.

    ``on_drop(item, cause)`` is called for every item the channel itself discards, so the
    owner can account for it (the pipeline counts it against the item's stream).
    ``carry(evicted, next)`` may hand what ``drop_oldest`` evicts on with the item after it
    (the next queued, or the one put), and returns what is left to drop (None: nothing); the
    pipeline's carries the frames the model was never to see (``wiring.carry_skipped``).
    """

    def __init__(self, name: str, capacity: int, policy: DropPolicy = "block", *,
                 producers: int = 1,
                 on_drop: Callable[[T, str], None] | None = None,
                 carry: Callable[[T, T], T | None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"channel {name!r}: capacity must be >= 1, got {capacity}")
        if policy not in DROP_POLICIES:
            raise ValueError(
                f"channel {name!r}: policy must be one of {DROP_POLICIES}, got {policy!r}")
        if producers < 1:
            raise ValueError(f"channel {name!r}: producers must be >= 1, got {producers}")
        self.name = name
        self.capacity = capacity
        self.policy: DropPolicy = policy
        self.drops: Counter[str] = Counter()
        self._on_drop = on_drop
        self._carry = carry
        self._items: deque[tuple[T, float]] = deque()
        self._open_producers = producers
        self._readers = Waiters()  # consumers waiting for an item (or the end)
        self._writers = Waiters()  # producers waiting for room

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._open_producers == 0

    def fill(self) -> float:
        """How full it is, 0..1."""
        return len(self._items) / self.capacity

    async def put(self, item: T) -> None:
        """Add an item; under ``block`` wait for room, under ``drop_oldest`` evict to make it."""
        await self.put_many((item,))

    async def put_many(self, items: Sequence[T]) -> None:
        """Add a call's items in order, as ``put`` each, but wake the consumer once for them
        all (or before waiting for room, for those already in), not once an item."""
        unannounced = False
        for item in items:
            if self.policy == "block" and self._full():
                if unannounced:  # the consumer that makes room has to hear of them
                    self._readers.notify()
                    unannounced = False
                while self._full():
                    await self._writers.wait()
            if self.closed:
                raise ChannelClosed(f"put on closed channel {self.name!r}")
            if len(self._items) >= self.capacity:  # drop_oldest
                left = evict_oldest(self._items, item, self._carry)
                if left is not None:
                    self.drop(left, "dropped_full")
            self._items.append((item, time.monotonic()))
            unannounced = True
        if unannounced:
            self._readers.notify()

    def _full(self) -> bool:
        return len(self._items) >= self.capacity and not self.closed

    async def get(self) -> T:
        """The oldest item; waits for one. Raises ChannelClosed once closed and drained."""
        item, _ = await self.get_timed()
        return item

    async def get_timed(self) -> tuple[T, float]:
        """The oldest item and the seconds it waited in the channel."""
        while not self._items and not self.closed:
            await self._readers.wait()
        return self._pop()

    async def get_batch(self, max_items: int, timeout_s: float) -> list[tuple[T, float]]:
        """Up to ``max_items`` items: wait for the first, then at most ``timeout_s`` for the rest.

        Returns fewer when the channel closes or the timeout passes; raises ChannelClosed only
        when there is nothing left at all.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        batch = [await self.get_timed()]
        deadline = time.monotonic() + timeout_s
        while len(batch) < max_items:
            if self._items:
                batch.append(self._pop())
                continue
            if self.closed or not await self._readers.wait_until(deadline):
                break
        return batch

    def close(self) -> None:
        """One producer is done. The channel closes when all of them are; idempotent after."""
        if self._open_producers > 0:
            self._open_producers -= 1
        if self.closed:
            self._notify()

    def abort(self) -> list[T]:
        """Close at once for every producer and hand back what was still queued."""
        self._open_producers = 0
        leftovers = [item for item, _ in self._items]
        self._items.clear()
        self._notify()
        return leftovers

    def drop(self, item: T, cause: str) -> None:
        """Count an item as dropped for ``cause`` and tell the owner."""
        self.drops[cause] += 1
        if self._on_drop is not None:
            self._on_drop(item, cause)

    def _pop(self) -> tuple[T, float]:
        if not self._items:
            raise ChannelClosed(f"channel {self.name!r} is closed and drained")
        item, put_at = self._items.popleft()
        self._writers.notify()
        return item, time.monotonic() - put_at

    def _notify(self) -> None:
        """Everyone waiting: the channel ended."""
        self._readers.notify()
        self._writers.notify()
