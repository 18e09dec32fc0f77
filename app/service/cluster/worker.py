"""A worker: the service (streams, shared detectors, sinks, events) in a Ray actor of its own
process, for the streams the controller gives it.

``WorkerHost`` is a plain class; the controller makes it an actor (``ray.remote``) so that
nothing here imports Ray. Its methods run on the actor's event loop, where the service's
streams run too. ``heartbeat`` is what the controller learns every beat: the worker's
process, its streams as the API shows them with their frame counts (what a failover
accounts for), and the service's feed events (stream changes, tracked streams' events)
since the last beat.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry

from app.malloc import limit_malloc_arenas
from app.service.analytics_try import try_analytics
from app.service.config import AnalyticsUpdate, ServiceConfig, StreamConfig
from app.service.service import Service
from app.service.stats import stats
from app.service.streams import heatmap_png
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.broadcast import Subscription

BACKLOG = 2000  # feed events a worker keeps for the controller between two beats


class WorkerHost:
    def __init__(self, config_json: str, worker_id: str) -> None:
        limit_malloc_arenas()  # a process of its own: see app/malloc.py
        self.config = ServiceConfig.model_validate_json(config_json)
        self.worker_id = worker_id
        self.service = Service(self.config, PipelineMetrics(CollectorRegistry()), worker_id)
        self._feed: deque[tuple[int, dict[str, Any]]] = deque(maxlen=BACKLOG)
        self._seq = itertools.count(1)
        self._subscriptions: dict[str, Subscription] = {}
        self._ids = itertools.count(1)
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> dict[str, Any]:
        await self.service.start()
        queue = self.service.feed.subscribe(maxsize=BACKLOG)
        self._pump = asyncio.create_task(self._keep(queue))
        return {"pid": os.getpid(), "node": socket.gethostname()}

    async def _keep(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            event = await queue.get()
            self._feed.append((next(self._seq), event))

    async def add_stream(self, body: dict[str, Any]) -> dict[str, Any]:
        cfg = StreamConfig.model_validate(body)
        if cfg.id is not None and cfg.id not in self.service.streams:
            self.service.metrics.restart_counts(cfg.id)  # it may have been here before
        return (await self.service.add_stream(cfg)).shown()

    async def remove_stream(self, stream_id: str) -> dict[str, Any] | None:
        """Drain and remove it; its final counts (None: not here)."""
        if stream_id not in self.service.streams:
            return None
        return await self.service.remove_stream(stream_id)

    async def set_analytics(self, stream_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.service.set_analytics(stream_id,
                                          AnalyticsUpdate.model_validate(body)).shown()

    async def try_analytics(self, stream_id: str, body: dict[str, Any],
                            frames: int) -> dict[str, Any]:
        return await asyncio.to_thread(try_analytics, self.service.stream(stream_id),
                                       AnalyticsUpdate.model_validate(body), frames)

    async def heatmap(self, stream_id: str) -> bytes | None:
        return await asyncio.to_thread(heatmap_png, self.service.stream(stream_id))

    async def heartbeat(self, after: int) -> dict[str, Any]:
        """The worker now, and the feed events after sequence number ``after``."""
        m = self.service.metrics
        streams = {}
        for sid, stream in self.service.streams.items():
            streams[sid] = stream.shown() | {"received": m.received[sid],
                                          "outcomes": dict(m.outcomes[sid]),
                                          "fps": round(m.latency[sid].values(5.0).size / 5, 2)}
        feed = [(n, e) for n, e in self._feed if n > after]
        return {"pid": os.getpid(), "node": socket.gethostname(), "time": time.time(),
                "streams": streams, "feed": feed, "ready": self.service.ready}

    async def stats(self, window_s: float) -> dict[str, Any]:
        return stats(self.service, window_s, self.worker_id).model_dump(mode="json")

    async def metric_families(self) -> list[tuple[str, str, str, list[Any]]]:
        """The worker's series: (name, type, help, [(sample name, labels, value)])."""
        return [(f.name, f.type, f.documentation,
                 [(s.name, dict(s.labels), s.value) for s in f.samples])
                for f in self.service.metrics.registry.collect()]

    async def snapshot(self, stream_id: str) -> bytes | None:
        stream = self.service.streams.get(stream_id)
        if stream is None:
            return None
        return await asyncio.to_thread(lambda: stream.outputs.snapshot.jpeg)

    async def subscribe_results(self, stream_id: str) -> str:
        key = f"{self.worker_id}-{next(self._ids)}"
        self._subscriptions[key] = self.service.stream(stream_id).outputs.live.subscribe()
        return key

    async def next_results(self, key: str, timeout_s: float) -> tuple[str, int] | None:
        subscription = self._subscriptions.get(key)
        return None if subscription is None else await subscription.next(timeout_s)

    async def unsubscribe_results(self, key: str, stream_id: str) -> None:
        subscription = self._subscriptions.pop(key, None)
        stream = self.service.streams.get(stream_id)
        if subscription is not None and stream is not None:
            stream.outputs.live.unsubscribe(subscription)

    async def event_media(self, event_id: str, kind: str) -> bytes | None:
        assert self.service.events is not None
        path = self.service.events.store.find(event_id, kind)
        return None if path is None else await asyncio.to_thread(path.read_bytes)

    async def close(self) -> None:
        """Drain every stream (their results, events and media), then stop."""
        if self._pump is not None:
            self._pump.cancel()
        await self.service.aclose()
