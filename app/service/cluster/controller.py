"""Cluster: the service's streams spread over Ray workers, behind the same ``StreamHost`` as
one process, so the API and the dashboard are one for both.

The controller lives in the API process. It keeps which worker owns which stream (each stream
exactly once: ``StreamBooks``) and the config each stream was added with, and places a new
stream on the least loaded worker with room, rendezvous hashing choosing among equals
(``placement.py``). The workers are started and called by ``WorkerPool``, watched and replaced
by the ``Supervisor`` (``supervision.py``), which moves a lost worker's streams.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from app.errors import UnknownStream, WorkersFixed, WorkerUnavailable
from app.outputs.event_outputs import check_event_outputs
from app.service.cluster.merge import merged_stats
from app.service.cluster.metrics import ClusterCollector, ClusterView
from app.service.cluster.placement import place
from app.service.cluster.supervision import Supervisor
from app.service.cluster.workers import StreamBooks, WorkerPool, WorkerState
from app.service.config import AnalyticsUpdate, ServiceConfig, StreamConfig
from app.service.event_feed import EventFeed
from app.service.host import ResultSubscription, WithoutCandidates
from app.service.remembered import RememberedStreams
from app.service.retention import Housekeeper
from app.service.schemas import Stats, Stream, Worker
from app.service.store import EventQuery, ServiceStore
from app.service.streams import admit
from pipelines.errors import ConfigError
from pipelines.events.media import MediaStore
from pipelines.sources.url import redact

log = logging.getLogger(__name__)


class RemoteResults:
    """A stream's results read from the worker that owns it."""

    def __init__(self, actor: Any, key: str, stream_id: str) -> None:
        self._actor, self._key, self._stream = actor, key, stream_id

    async def next(self, timeout_s: float) -> tuple[str, int] | None:
        try:
            item = await self._actor.next_results.remote(self._key, timeout_s)
        except Exception:  # the worker is gone: the stream goes on elsewhere, this feed ends
            return None
        return None if item is None else (item[0], item[1])

    async def close(self) -> None:
        try:
            await self._actor.unsubscribe_results.remote(self._key, self._stream)
        except Exception:
            pass


class Cluster(WithoutCandidates):
    def __init__(self, config: ServiceConfig, registry: CollectorRegistry) -> None:
        self.config = config
        self.registry = registry
        self.books = StreamBooks()
        self.pool = WorkerPool(config)
        self.ready = False
        self.store = ServiceStore.for_state_dir(config.state_dir)  # streams, events index
        self.remembered = RememberedStreams(self.store)
        # the index kept as long as the events' media (the workers keep the files)
        self.housekeeper = Housekeeper(None, (0.0, 0.0), None, self.store,
                                       config.events.retain_hours)
        self.feed = EventFeed()  # the API's event feed
        self._lock = asyncio.Lock()  # one change of ownership at a time
        self._ids = itertools.count(1)
        self.supervisor = Supervisor(self.pool, self.books, self._lock,
                                     restart=self._start_on, relay=self._relay, drop=self._drop)
        self._media = MediaStore(config.events.media_dir)
        registry.register(ClusterCollector(self._view))

    # ---- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("workers and ray_address need Ray: pip install "
                              "'vidpipe[ray]'") from None
        await asyncio.to_thread(check_event_outputs, self.config.events,
                                self.config.allowed_networks, self.config.allow_idn_hosts)
        count = self.pool.join(ray)
        for worker in await asyncio.gather(*(self.pool.start() for _ in range(count))):
            worker.joining = False  # nothing to take yet
        self.supervisor.start()
        self.housekeeper.start()
        for stream in self.config.streams:
            try:
                await self._add(stream)
            except (ValueError, RuntimeError, ConfigError) as e:
                log.error("stream %s from the config not started: %s", stream.id, e)
        await self._restore()
        self.ready = True

    async def _restore(self) -> None:
        """The streams remembered from before (``app.service.remembered``)."""
        plan = await asyncio.to_thread(self.remembered.restore, list(self.books.owners))
        for stream_id, update in plan.changes:
            try:
                await self.set_analytics(stream_id, update)
            except (ValueError, RuntimeError, ConfigError) as e:
                log.error("stream %s: its remembered lines and zones not applied: %s",
                          stream_id, e)
        for cfg in plan.additions:
            try:
                await self.add(cfg)
            except (ValueError, RuntimeError, ConfigError) as e:
                self.remembered.not_restored(cfg, str(e))

    async def aclose(self) -> None:
        self.ready = False
        await self.supervisor.aclose()
        await self.housekeeper.aclose()
        alive = self.pool.alive()
        await asyncio.gather(*(self.pool.call(w.actor.close.remote()) for w in alive),
                             return_exceptions=True)
        ray = self.pool.ray
        if ray is not None and ray.is_initialized():
            await asyncio.to_thread(ray.shutdown)
        self.store.close()
        log.info("drained %d stream(s) on %d worker(s)", len(self.books.owners), len(alive))

    def _owner(self, stream_id: str) -> WorkerState:
        owner = self.books.owners.get(stream_id)
        if owner is None:
            raise UnknownStream(f"no stream {stream_id!r}")
        return self.pool.states[owner]

    # ---- streams ---------------------------------------------------------------------------
    def stream_ids(self) -> list[str]:
        return list(self.books.owners)

    def stream(self, stream_id: str) -> Stream:
        worker = self._owner(stream_id)
        shown = worker.streams.get(stream_id)
        if shown is None:  # placed, and not yet in its worker's heartbeat: as configured
            cfg = self.books.configs.get(stream_id)
            return Stream(id=stream_id, url=redact(cfg.url) if cfg else "", state="moving",
                          model=cfg.model if cfg else None, worker=worker.id)
        figures = ("received", "outcomes", "fps")
        return Stream.model_validate({k: v for k, v in shown.items() if k not in figures}
                                     | {"worker": worker.id})

    async def add(self, cfg: StreamConfig, *, force: bool = False) -> Stream:
        """``force`` changes nothing: the cluster places streams by its own rule."""
        stream = await self._add(cfg)
        self.remembered.added(self.books.configs[stream.id])
        return stream

    async def _add(self, cfg: StreamConfig) -> Stream:
        async with self._lock:
            books = self.books
            sid = admit(cfg.id, books.owners, self.config.max_streams, self._ids)
            cfg = cfg.model_copy(update={"id": sid})
            worker = place(sid, self.pool.load(books.owners), self.config.max_streams)
            if worker is None:
                raise WorkerUnavailable("no live worker to run the stream")
            await self._start_on(sid, cfg, worker)
            books.configs[sid] = cfg
        return self.stream(sid)

    async def _start_on(self, sid: str, cfg: StreamConfig, wid: str) -> None:
        worker = self.pool.states[wid]
        shown = await self.pool.call(worker.actor.add_stream.remote(
            cfg.model_dump(mode="json", exclude_unset=True)))
        worker.streams[sid] = shown
        self.books.owners[sid] = wid
        self.feed.emit({"type": "stream", "stream": shown | {"worker": wid}})

    async def remove(self, stream_id: str) -> None:
        async with self._lock:
            worker = self._owner(stream_id)
            await self.pool.call(worker.actor.remove_stream.remote(stream_id))
            self.books.forget(stream_id)
            self.remembered.removed(stream_id)
            shown = worker.streams.pop(stream_id, {"id": stream_id})
        self.feed.emit({"type": "removed", "stream": shown | {"worker": worker.id}})

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> Stream:
        async with self._lock:
            worker = self._owner(stream_id)
            shown = await self.pool.call(worker.actor.set_analytics.remote(
                stream_id, update.model_dump(mode="json", exclude_unset=True)))
            worker.streams[stream_id] = shown
            # a move starts it again with these, and so does the next start
            self.books.configs[stream_id] = update.applied_to(self.books.configs[stream_id])
            self.remembered.changed(self.books.configs[stream_id])
        return self.stream(stream_id)

    async def try_analytics(self, stream_id: str, update: AnalyticsUpdate,
                            frames: int) -> dict[str, Any]:
        worker = self._owner(stream_id)  # its results are on its worker's disk
        return dict(await self.pool.call(worker.actor.try_analytics.remote(
            stream_id, update.model_dump(mode="json", exclude_unset=True), frames)))

    async def heatmap(self, stream_id: str) -> bytes | None:
        png = await self.pool.call(self._owner(stream_id).actor.heatmap.remote(stream_id))
        return None if png is None else bytes(png)

    def _relay(self, worker: WorkerState, message: dict[str, Any]) -> None:
        """A worker's feed message to the API's readers: a stream's change with its worker;
        a removal only when the stream is gone (not moved); events kept as recent."""
        if message["type"] in ("stream", "removed"):
            sid = message["stream"]["id"]
            if self.books.owners.get(sid) != worker.id:
                return  # an old owner's goodbye, or a stream that moved
            message = {"type": message["type"],
                       "stream": message["stream"] | {"worker": worker.id}}
        elif message["type"] == "event":
            self.store.add_event(message["event"])
        self.feed.emit(message)

    def _drop(self, sid: str, why: str) -> None:
        """A stream that could not be moved: gone, and said so (add it again to retry)."""
        log.error("stream %s stopped: %s", sid, why)
        self.books.forget(sid)
        self.feed.emit({"type": "removed", "stream": {"id": sid, "state": "failed",
                                                      "error": why}})

    async def add_worker(self) -> Worker:
        """One more local worker (``POST /api/workers``), and the streams it took."""
        if not self.pool.local:
            raise WorkersFixed("workers join a Ray cluster by its own means (ray start); "
                               "restart the service to use them")
        worker = await self.pool.start()
        moved = await self.supervisor.rebalance(worker)
        return worker.view(sorted(moved))

    # ---- what the API shows ------------------------------------------------------------------
    async def snapshot(self, stream_id: str) -> bytes | None:
        actor = self._owner(stream_id).actor
        result: bytes | None = await self.pool.call(actor.snapshot.remote(stream_id))
        return result

    async def results(self, stream_id: str) -> ResultSubscription:
        actor = self._owner(stream_id).actor
        key = await self.pool.call(actor.subscribe_results.remote(stream_id))
        return RemoteResults(actor, key, stream_id)

    async def stats(self, window_s: float) -> Stats:
        alive = self.pool.alive()
        answers = await asyncio.gather(*(self.pool.call(w.actor.stats.remote(window_s))
                                          for w in alive), return_exceptions=True)
        per_worker = {w.id: a for w, a in zip(alive, answers, strict=True)
                      if isinstance(a, dict)}
        books = self.books
        return Stats.model_validate(merged_stats(per_worker, books.owners, books.carried,
                                                 books.carried_received, window_s))

    async def metrics_text(self) -> bytes:
        return await asyncio.to_thread(generate_latest, self.registry)

    def _view(self) -> ClusterView:
        """What ``/metrics`` reads of the cluster: copies, taken on the scrape's thread."""
        books, states = self.books, list(self.pool.states.values())
        owned = set(books.owners)
        return ClusterView(
            ray=self.pool.ray, alive=[(w.id, w.actor) for w in states if w.alive],
            lost=sum(1 for w in states if not w.alive),
            dropped_failover={sid: counts.get("dropped_failover", 0)
                              for sid, counts in list(books.carried.items()) if sid in owned},
            moves=books.moves)

    async def recent_events(self, query: EventQuery) -> list[tuple[float, int, dict[str, Any]]]:
        return await asyncio.to_thread(self.store.events, query)

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None:
        found = self._media.find(event_id, kind)  # a worker on this machine wrote it here
        if found is not None:
            return found
        for worker in self.pool.alive():
            try:
                data: bytes | None = await self.pool.call(
                    worker.actor.event_media.remote(event_id, kind))
            except Exception as e:  # a worker going away: ask the others
                log.debug("%s: event media not read (%s)", worker.id, e)
                continue
            if data is not None:
                return data
        return None

    async def workers(self) -> list[Worker]:
        owners = self.books.owners
        return [w.view(sorted(s for s, o in owners.items() if o == w.id))
                for w in self.pool.states.values()]
