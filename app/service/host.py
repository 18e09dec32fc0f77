"""What the HTTP API asks of the service, in one place: ``StreamHost`` (the protocol), and
``LocalHost``, the service of one process. ``app.service.cluster`` answers the same
questions for streams spread over Ray workers, so the API and the dashboard are one whether
the service runs in one process or many.

A stream that does not exist is ``UnknownStream`` (404); what a host refuses is an error of
``app.errors`` (``app.service.api`` maps each to its status).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest

from app.errors import CandidateConflict, WorkersFixed
from app.service import candidates
from app.service.analytics_try import try_analytics
from app.service.candidates import CandidateRequest
from app.service.config import AnalyticsUpdate, ServiceConfig, StreamConfig
from app.service.event_feed import EventFeed
from app.service.remembered import RememberedStreams
from app.service.schemas import Stats, Stream, Worker
from app.service.service import Service
from app.service.stats import stats
from app.service.store import EventQuery, ServiceStore
from app.service.streams import heatmap_png
from models.errors import VidpipeError
from pipelines.metrics import PipelineMetrics

log = logging.getLogger(__name__)

LOCAL = "local"  # the one worker of a service in one process


class ResultSubscription(Protocol):
    """One reader's results of one stream: ``next`` as ``Subscription.next`` (a line and how
    many this reader lost before it; None once the stream has ended); ``close`` when the
    reader leaves."""

    async def next(self, timeout_s: float) -> tuple[str, int] | None: ...

    async def close(self) -> None: ...


class StreamHost(Protocol):
    @property
    def ready(self) -> bool: ...

    @property
    def feed(self) -> EventFeed: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def stream_ids(self) -> list[str]: ...

    def stream(self, stream_id: str) -> Stream: ...

    async def add(self, cfg: StreamConfig, *, force: bool = False) -> Stream: ...

    async def remove(self, stream_id: str) -> None: ...

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> Stream: ...

    async def try_analytics(self, stream_id: str, update: AnalyticsUpdate,
                            frames: int) -> dict[str, Any]: ...

    async def snapshot(self, stream_id: str) -> bytes | None: ...

    async def heatmap(self, stream_id: str) -> bytes | None: ...

    async def results(self, stream_id: str) -> ResultSubscription: ...

    async def stats(self, window_s: float) -> Stats: ...

    async def metrics_text(self) -> bytes: ...

    async def recent_events(self, query: EventQuery) -> list[tuple[float, int, dict[str, Any]]]:
        ...

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None: ...

    async def workers(self) -> list[Worker]: ...

    async def add_worker(self) -> Worker: ...

    async def start_candidate(self, detector_id: str,
                              body: CandidateRequest) -> dict[str, Any]: ...

    async def candidate(self, detector_id: str) -> dict[str, Any]: ...

    async def discard_candidate(self, detector_id: str) -> None: ...

    async def promote_candidate(self, detector_id: str) -> dict[str, Any]: ...


class WithoutCandidates:
    """A host whose detectors take no candidate (the streams on Ray workers: not built)."""

    WHY = ("candidate models run beside a one-process service's detectors; on Ray workers "
           "they are not built yet")

    async def start_candidate(self, detector_id: str, body: CandidateRequest) -> dict[str, Any]:
        raise CandidateConflict(self.WHY)

    async def candidate(self, detector_id: str) -> dict[str, Any]:
        raise CandidateConflict(self.WHY)

    async def discard_candidate(self, detector_id: str) -> None:
        raise CandidateConflict(self.WHY)

    async def promote_candidate(self, detector_id: str) -> dict[str, Any]:
        raise CandidateConflict(self.WHY)


class LocalResults:
    def __init__(self, service: Service, stream_id: str) -> None:
        self._live = service.stream(stream_id).outputs.live
        self._subscription = self._live.subscribe()

    async def next(self, timeout_s: float) -> tuple[str, int] | None:
        return await self._subscription.next(timeout_s)

    async def close(self) -> None:
        self._live.unsubscribe(self._subscription)


class LocalHost:
    """The service in this process (``app.service.service``), and the streams it remembers
    across restarts (``app.service.remembered``)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.remembered = RememberedStreams(service.store)
        self._restored = False

    @property
    def ready(self) -> bool:
        return self.service.ready and self._restored

    @property
    def feed(self) -> EventFeed:
        return self.service.feed

    async def start(self) -> None:
        await self.service.start()
        plan = await asyncio.to_thread(self.remembered.restore, list(self.service.streams))
        for stream_id, update in plan.changes:
            try:
                self.service.set_analytics(stream_id, update)
            except VidpipeError as e:
                log.error("stream %s: its remembered lines and zones not applied: %s",
                          stream_id, e)
        for cfg in plan.additions:
            try:
                await self.service.add_stream(cfg)
            except (VidpipeError, ValueError) as e:
                self.remembered.not_restored(cfg, str(e))
        if plan.additions or plan.changes:
            log.info("restored %d stream(s) and the changes of %d from %s",
                     len(plan.additions), len(plan.changes), self.service.store.path)
        self._restored = True

    async def aclose(self) -> None:
        await self.service.aclose()
        self.service.store.close()

    def stream_ids(self) -> list[str]:
        return list(self.service.streams)

    def stream(self, stream_id: str) -> Stream:
        return self.service.stream(stream_id).view(LOCAL)

    async def add(self, cfg: StreamConfig, *, force: bool = False) -> Stream:
        stream = await self.service.add_stream(cfg, check_headroom=not force)
        assert stream.config is not None
        self.remembered.added(stream.config)
        return stream.view(LOCAL)

    async def remove(self, stream_id: str) -> None:
        await self.service.remove_stream(stream_id)
        self.remembered.removed(stream_id)

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> Stream:
        stream = self.service.set_analytics(stream_id, update)
        if stream.config is not None:
            self.remembered.changed(stream.config)
        return stream.view(LOCAL)

    async def try_analytics(self, stream_id: str, update: AnalyticsUpdate,
                            frames: int) -> dict[str, Any]:
        stream = self.service.stream(stream_id)
        return await asyncio.to_thread(try_analytics, stream, update, frames)

    async def snapshot(self, stream_id: str) -> bytes | None:
        snapshot = self.service.stream(stream_id).outputs.snapshot
        return await asyncio.to_thread(lambda: snapshot.jpeg)  # drawn and encoded when read

    async def heatmap(self, stream_id: str) -> bytes | None:
        return await asyncio.to_thread(heatmap_png, self.service.stream(stream_id))

    async def results(self, stream_id: str) -> ResultSubscription:
        return LocalResults(self.service, stream_id)

    async def stats(self, window_s: float) -> Stats:
        return stats(self.service, window_s, LOCAL)

    async def metrics_text(self) -> bytes:
        return generate_latest(self.service.metrics.registry)

    async def recent_events(self, query: EventQuery) -> list[tuple[float, int, dict[str, Any]]]:
        return await asyncio.to_thread(self.service.store.events, query)

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None:
        assert self.service.events is not None
        return self.service.events.store.find(event_id, kind)

    async def workers(self) -> list[Worker]:
        """One process: itself, as the one worker."""
        figures = stats(self.service, 5.0)
        return [Worker(id=LOCAL, pid=os.getpid(), node=socket.gethostname(),
                       streams=sorted(self.service.streams), alive=True,
                       fps=round(sum(s.fps for s in figures.streams), 2))]

    async def add_worker(self) -> Worker:
        raise WorkersFixed("this service runs in one process: start it with --workers N "
                           "(or --ray-address) to add workers")

    async def start_candidate(self, detector_id: str, body: CandidateRequest) -> dict[str, Any]:
        return await candidates.start(self.service, detector_id, body)

    async def candidate(self, detector_id: str) -> dict[str, Any]:
        return candidates.report(self.service, detector_id)

    async def discard_candidate(self, detector_id: str) -> None:
        await candidates.discard(self.service, detector_id)

    async def promote_candidate(self, detector_id: str) -> dict[str, Any]:
        return await candidates.promote(self.service, detector_id)


def open_host(config: ServiceConfig, registry: CollectorRegistry) -> StreamHost:
    """The service of this process, or, with ``workers`` or ``ray_address``, its streams
    spread over Ray workers (``app.service.cluster``, which imports Ray when it starts)."""
    if config.workers or config.ray_address:
        from app.service.cluster.controller import Cluster

        return Cluster(config, registry)
    store = ServiceStore.for_state_dir(config.state_dir)
    return LocalHost(Service(config, PipelineMetrics(registry), store=store))
