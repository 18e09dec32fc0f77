"""What the HTTP API asks of the service, in one place: ``Engine`` (the protocol), and
``LocalEngine``, the service of one process. ``app/cluster/controller.py`` answers the same
questions for streams spread over Ray workers, so the API and the dashboard are one whether
the service runs in one process or many.

A stream that does not exist is ``KeyError`` (404); what the engine refuses keeps the
service's own exceptions (``StreamLimit`` 429, ``StreamExists`` 409, ``TrackerFixed`` 409,
``SourceRejected``/``VidpipeError`` 400).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import generate_latest

from app.config import AnalyticsUpdate, StreamConfig
from app.feed import FeedReaders
from app.service import Service
from app.stats import stats
from pipelines.errors import ConfigError


class ResultFeed(Protocol):
    """One reader's results: ``next`` as ``Subscription.next``; ``close`` when it leaves."""

    async def next(self, timeout_s: float) -> tuple[str, int] | None: ...

    async def close(self) -> None: ...


class Engine(Protocol):
    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def stream_ids(self) -> list[str]: ...

    def public(self, stream_id: str) -> dict[str, Any]: ...

    async def add(self, cfg: StreamConfig) -> dict[str, Any]: ...

    async def remove(self, stream_id: str) -> None: ...

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> dict[str, Any]: ...

    async def snapshot(self, stream_id: str) -> bytes | None: ...

    async def results(self, stream_id: str) -> ResultFeed: ...

    async def stats(self, window_s: float) -> dict[str, Any]: ...

    async def metrics_text(self) -> bytes: ...

    async def recent_events(self, limit: int, stream: str | None) -> list[dict[str, Any]]: ...

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None: ...

    async def workers(self) -> list[dict[str, Any]]: ...

    async def add_worker(self) -> dict[str, Any]: ...

    @property
    def readers(self) -> FeedReaders: ...


class LocalFeed:
    def __init__(self, service: Service, stream_id: str) -> None:
        self._live = service.streams[stream_id].outputs.live
        self._subscription = self._live.subscribe()

    async def next(self, timeout_s: float) -> tuple[str, int] | None:
        return await self._subscription.next(timeout_s)

    async def close(self) -> None:
        self._live.unsubscribe(self._subscription)


class LocalEngine:
    """The service in this process (``app/service.py``)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def ready(self) -> bool:
        return self.service.ready

    async def start(self) -> None:
        await self.service.start()

    async def aclose(self) -> None:
        await self.service.aclose()

    def stream_ids(self) -> list[str]:
        return list(self.service.streams)

    def public(self, stream_id: str) -> dict[str, Any]:
        return self.service.streams[stream_id].public() | {"worker": "local"}

    async def add(self, cfg: StreamConfig) -> dict[str, Any]:
        return (await self.service.add_stream(cfg)).public()

    async def remove(self, stream_id: str) -> None:
        if stream_id not in self.service.streams:
            raise KeyError(stream_id)
        await self.service.remove_stream(stream_id)

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> dict[str, Any]:
        if stream_id not in self.service.streams:
            raise KeyError(stream_id)
        return self.service.set_analytics(stream_id, update).public()

    async def snapshot(self, stream_id: str) -> bytes | None:
        snapshot = self.service.streams[stream_id].outputs.snapshot
        return await asyncio.to_thread(lambda: snapshot.jpeg)  # drawn and encoded when read

    async def results(self, stream_id: str) -> ResultFeed:
        return LocalFeed(self.service, stream_id)

    async def stats(self, window_s: float) -> dict[str, Any]:
        return stats(self.service, window_s)

    async def metrics_text(self) -> bytes:
        return generate_latest(self.service.metrics.registry)

    async def recent_events(self, limit: int, stream: str | None) -> list[dict[str, Any]]:
        assert self.service.events is not None
        return self.service.events.recent.latest(limit, stream)

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None:
        assert self.service.events is not None
        return self.service.events.store.find(event_id, kind)

    async def workers(self) -> list[dict[str, Any]]:
        """One process: itself, as the one worker."""
        figures = stats(self.service, 5.0)
        return [{"id": "local", "pid": os.getpid(), "node": socket.gethostname(),
                 "streams": sorted(self.service.streams), "alive": True,
                 "fps": round(sum(s["fps"] for s in figures["streams"]), 2)}]

    async def add_worker(self) -> dict[str, Any]:
        raise ConfigError("this service runs in one process: start it with --workers N "
                          "(or --ray-address) to add workers")

    @property
    def readers(self) -> FeedReaders:
        return self.service.readers
