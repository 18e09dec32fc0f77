"""EventFeed: the messages of the API's event feed (``GET /api/events``: a stream changed or
was removed, a tracked stream's event) to each of its readers, a bounded queue each; a slow
reader loses its oldest messages, and the service never waits for one. The service of one
process and the cluster's controller both keep one."""

from __future__ import annotations

import asyncio
from typing import Any


class EventFeed:
    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[dict[str, Any]]] = set()

    def subscribe(self, maxsize: int = 100) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=maxsize)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._queues.discard(queue)

    def emit(self, message: dict[str, Any]) -> None:
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()  # a slow reader loses the oldest message, not the service
            queue.put_nowait(message)
