"""ResultBroadcast: a stream's results for live readers (the service's results feed).

``write`` runs on the sink's thread and never waits for a reader: with no reader it does
nothing; otherwise it formats the line once and hands it to the event loop, where each
subscription keeps at most ``backlog`` lines. A reader that falls behind loses its oldest
lines, and the next one it reads says how many (``lost``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.jsonl import detection_line
from pipelines.sinks.stage import ClosingSink

BACKLOG = 256  # lines a reader may fall behind before it loses the oldest


@dataclass(eq=False)
class Subscription:
    """One reader's queue of lines; ``next()`` waits for one (None: the stream has ended)."""

    backlog: int
    lines: deque[str] = field(default_factory=deque)
    lost: int = 0  # lines dropped since the last read
    closed: bool = False
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, line: str) -> None:
        if len(self.lines) >= self.backlog:
            self.lines.popleft()
            self.lost += 1
        self.lines.append(line)
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next(self, timeout_s: float) -> tuple[str, int] | None:
        """The next line and how many were lost before it; ``("", 0)`` after ``timeout_s``
        with nothing new; None once closed and read out."""
        if not self.lines and not self.closed:
            try:
                await asyncio.wait_for(self._ready.wait(), timeout_s)
            except TimeoutError:
                return "", 0
        self._ready.clear()
        if not self.lines:
            return None
        lost, self.lost = self.lost, 0
        line = self.lines.popleft()
        if self.lines or self.closed:
            self._ready.set()
        return line, lost


class ResultBroadcast(ClosingSink):
    """Made on the event loop that its subscribers read on."""

    wants_images = False

    def __init__(self, spec: ModelSpec, *, backlog: int = BACKLOG,
                 every_line: bool = False) -> None:
        self.spec, self.every_line = spec, every_line
        self.backlog = backlog
        self._loop = asyncio.get_running_loop()
        self._subscriptions: set[Subscription] = set()
        self.closed = False

    def subscribe(self) -> Subscription:
        subscription = Subscription(self.backlog)
        if self.closed:
            subscription.close()
        else:
            self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    @property
    def readers(self) -> int:
        return len(self._subscriptions)

    def write(self, result: Result) -> None:
        self.write_all([result])

    def write_all(self, results: Sequence[Result]) -> None:
        """The call's lines to the readers, handed to their loop at once (one wake-up)."""
        if not self._subscriptions:  # read without a lock: a reader that just came may miss one
            return
        lines = [detection_line(r, self.spec, self.every_line) for r in results]
        kept = [line for line in lines if line is not None]
        if kept:
            self._loop.call_soon_threadsafe(self._publish, kept)

    def _publish(self, lines: list[str]) -> None:
        for subscription in self._subscriptions:
            for line in lines:
                subscription.put(line)

    def close(self, commit: bool = True) -> None:
        """The stream has ended: readers get what is queued, then the end. The end goes
        through the loop's queue too, from any thread, so it follows every line the sink
        thread handed over before it."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._end)

    def _end(self) -> None:
        self.closed = True
        for subscription in self._subscriptions:
            subscription.close()
        self._subscriptions.clear()
