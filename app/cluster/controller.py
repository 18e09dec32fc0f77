"""Cluster: the service's streams spread over Ray workers, for the same HTTP API.

The controller lives in the API process. It starts a local Ray cluster with ``workers``
workers, or joins the one at ``ray_address`` and starts one worker per GPU there (per
``cores_per_worker`` CPUs without GPUs). It keeps which worker owns which stream (each stream
exactly once) and the config each stream was added with, and places a new stream on the
least loaded worker with room, rendezvous hashing choosing among equals (``placement.py``).

Every ``heartbeat_s`` it asks each worker for its streams (their states and frame counts)
and the feed events since the last beat. A worker whose process died is known at once
(Ray fails the call); one that answers no beat for three in a row is hung, and is killed.
Either way its streams go to their next best live worker, started again from their config;
the frames it had received but not finished at its last beat are counted
``dropped_failover`` for their streams, so a stream's books still balance across the move
(what it received after that beat died with it, unknown and uncounted by anyone). A local
cluster then starts a worker in its place, which takes its share from the most loaded.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from app.cluster.merge import merged_stats
from app.cluster.metrics import ClusterCollector
from app.cluster.placement import joined, orphaned, place
from app.cluster.worker import WorkerEngine
from app.config import AnalyticsUpdate, ServiceConfig, StreamConfig
from app.events.outputs import check_webhooks
from app.face import ResultFeed
from app.feed import FeedReaders
from app.service import StreamExists, StreamLimit
from app.service_events import RECENT
from pipelines.errors import ConfigError
from pipelines.events.media import MediaStore

log = logging.getLogger(__name__)

MISSED_BEATS = 3  # a worker that answers none of this many beats in a row is hung
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0  # any other call to a worker: a hung one cannot hold the controller


class WorkerUnavailable(RuntimeError):
    """No worker could be started (an HTTP 503)."""


@dataclass(eq=False)
class WorkerState:
    id: str
    actor: Any
    pid: int | None = None
    node: str | None = None
    alive: bool = True
    failing: bool = False  # lost, killed, its failover under way
    joining: bool = True  # started; the streams it is to take not moved to it yet
    missed: int = 0
    seq: int = 0  # the last feed event taken from it
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)  # as at its last beat

    def public(self, owned: list[str]) -> dict[str, Any]:
        fps = sum(s.get("fps", 0.0) for s in self.streams.values())
        return {"id": self.id, "pid": self.pid, "node": self.node, "streams": owned,
                "fps": round(fps, 2), "alive": self.alive, "joining": self.joining}


class RemoteFeed:
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


class Cluster:
    def __init__(self, config: ServiceConfig, registry: CollectorRegistry) -> None:
        self.config = config
        self.registry = registry
        self.pool: dict[str, WorkerState] = {}  # every worker started, alive or lost
        self.owners: dict[str, str] = {}  # stream -> worker
        self.configs: dict[str, StreamConfig] = {}
        # what a stream's earlier owners counted (and dropped_failover), added to its owner's
        self.carried: dict[str, Counter[str]] = {}
        self.carried_received: Counter[str] = Counter()
        self.moves = 0
        self.ready = False
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.readers = FeedReaders()  # the API's event feed
        self._lock = asyncio.Lock()  # one change of ownership at a time
        self._names = itertools.count(1)
        self._ids = itertools.count(1)
        self._beats: asyncio.Task[None] | None = None
        self._local = config.ray_address is None
        self._ray: Any = None
        self._worker_options: dict[str, Any] = {}
        self._media = MediaStore(config.events.media_dir)
        registry.register(ClusterCollector(self))

    # ---- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("workers and ray_address need Ray: pip install "
                              "'vidpipe[ray]'") from None
        self._ray = ray
        await asyncio.to_thread(check_webhooks, self.config.events.webhooks,
                                self.config.allowed_networks, self.config.allow_idn_hosts)
        count = self._join_keeping_signals()
        for worker in await asyncio.gather(*(self._start_worker() for _ in range(count))):
            worker.joining = False  # nothing to take yet
        self._beats = asyncio.create_task(self._heartbeats(), name="cluster-heartbeats")
        for stream in self.config.streams:
            try:
                await self.add(stream)
            except (ValueError, RuntimeError, ConfigError) as e:
                log.error("stream %s from the config not started: %s", stream.id, e)
        self.ready = True

    def _join_keeping_signals(self) -> int:
        """``_join`` on the main thread, the process's SIGTERM and SIGINT handlers kept:
        Ray's own would end the process without the service's drain (on the event loop's
        thread, which is the main one: a few seconds, once, at start)."""
        kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._join()
        finally:
            for sig, handler in kept.items():
                if handler is not None and threading.current_thread() is \
                        threading.main_thread():
                    signal.signal(sig, handler)

    def _join(self) -> int:
        """Start or join the Ray cluster; how many workers to run and with what resources."""
        ray = self._ray
        quiet = {"include_dashboard": False, "log_to_driver": False,
                 "configure_logging": False}
        if self._local:
            count = self.config.workers or 1
            ray.init(**quiet)
            # on one machine the workers share its cores as processes do: Ray reserves
            # none for them, so a replacement always fits
            self._worker_options = {"num_cpus": 0}
            log.info("a local Ray cluster with %d worker(s)", count)
            return count
        ray.init(address=self.config.ray_address, **quiet)
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if gpus:
            self._worker_options = {"num_gpus": 1, "num_cpus": 1}
            count = self.config.workers or gpus
        else:
            self._worker_options = {"num_cpus": self.config.cores_per_worker}
            count = self.config.workers or max(1, cpus // self.config.cores_per_worker)
        log.info("joined the Ray cluster at %s (%d GPU, %d CPU): %d worker(s)",
                 self.config.ray_address, gpus, cpus, count)
        return count

    async def _start_worker(self) -> WorkerState:
        wid = f"worker-{next(self._names)}"
        settings = self.config.model_copy(update={"workers": None, "ray_address": None,
                                                  "streams": []})
        actor_class = self._ray.remote(WorkerEngine).options(
            name=f"vidpipe-{wid}-{os.getpid()}", max_restarts=0, max_concurrency=64,
            **self._worker_options)
        actor = actor_class.remote(settings.model_dump_json(), wid)
        try:
            info = await self._await(actor.start.remote(), START_TIMEOUT_S)
        except TimeoutError:
            self._ray.kill(actor, no_restart=True)
            raise WorkerUnavailable(f"no worker started within {START_TIMEOUT_S:.0f} s (the "
                                    "cluster has no room for one, or it is overloaded)") from None
        except BaseException:
            self._ray.kill(actor, no_restart=True)  # its reservation (a GPU) is freed
            raise
        state = WorkerState(wid, actor, info["pid"], info["node"])
        self.pool[wid] = state
        log.info("%s up: pid %s on %s", wid, state.pid, state.node)
        return state

    async def aclose(self) -> None:
        self.ready = False
        if self._beats is not None:
            self._beats.cancel()
            await asyncio.gather(self._beats, return_exceptions=True)
        alive = [w for w in self.pool.values() if w.alive]
        await asyncio.gather(*(self._await(w.actor.close.remote()) for w in alive),
                             return_exceptions=True)
        if self._ray is not None and self._ray.is_initialized():
            await asyncio.to_thread(self._ray.shutdown)
        log.info("drained %d stream(s) on %d worker(s)", len(self.owners), len(alive))

    # ---- calls -----------------------------------------------------------------------------
    async def _await(self, ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
        """A worker's answer within ``timeout_s`` (TimeoutError); its own exception as it
        was raised there (not Ray's wrapper, whose text holds the remote traceback)."""
        try:
            return await asyncio.wait_for(self._as_future(ref), timeout_s)
        except self._ray.exceptions.RayTaskError as e:
            cause = e.cause
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    @staticmethod
    async def _as_future(ref: Any) -> Any:
        return await ref

    def _alive(self) -> list[WorkerState]:
        return [w for w in self.pool.values() if w.alive]

    def _load(self) -> dict[str, int]:
        load = {w.id: 0 for w in self._alive()}
        for owner in self.owners.values():
            if owner in load:
                load[owner] += 1
        return load

    def _owner(self, stream_id: str) -> WorkerState:
        return self.pool[self.owners[stream_id]]

    # ---- streams ---------------------------------------------------------------------------
    def stream_ids(self) -> list[str]:
        return list(self.owners)

    def public(self, stream_id: str) -> dict[str, Any]:
        worker = self._owner(stream_id)
        shown = dict(worker.streams.get(stream_id) or {"id": stream_id, "state": "moving"})
        for key in ("received", "outcomes", "fps"):
            shown.pop(key, None)
        return shown | {"worker": worker.id}

    async def add(self, cfg: StreamConfig) -> dict[str, Any]:
        async with self._lock:
            if len(self.owners) >= self.config.max_streams:  # the service's, all workers'
                raise StreamLimit(f"the service runs {self.config.max_streams} streams, "
                                  "its limit")
            sid = cfg.id or self._next_id()
            if sid in self.owners:
                raise StreamExists(f"stream {sid!r} exists already")
            cfg = cfg.model_copy(update={"id": sid})
            worker = place(sid, self._load(), self.config.max_streams)
            if worker is None:
                raise WorkerUnavailable("no live worker to run the stream")
            await self._start_on(sid, cfg, worker)
            self.configs[sid] = cfg
        return self.public(sid)

    async def _start_on(self, sid: str, cfg: StreamConfig, wid: str) -> None:
        worker = self.pool[wid]
        shown = await self._await(worker.actor.add_stream.remote(cfg.model_dump(mode="json")))
        worker.streams[sid] = shown
        self.owners[sid] = wid
        self.readers.emit({"type": "stream", "stream": shown | {"worker": wid}})

    def _next_id(self) -> str:
        while (candidate := f"stream-{next(self._ids)}") in self.owners:
            pass
        return candidate

    async def remove(self, stream_id: str) -> None:
        async with self._lock:
            worker = self._owner(stream_id)
            await self._await(worker.actor.remove_stream.remote(stream_id))
            del self.owners[stream_id], self.configs[stream_id]
            self.carried.pop(stream_id, None)  # a stream added again later starts at zero
            self.carried_received.pop(stream_id, None)
            shown = worker.streams.pop(stream_id, {"id": stream_id})
        self.readers.emit({"type": "removed", "stream": shown | {"worker": worker.id}})

    async def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> dict[str, Any]:
        async with self._lock:
            worker = self._owner(stream_id)
            shown = await self._await(worker.actor.set_analytics.remote(
                stream_id, update.model_dump(mode="json")))
            worker.streams[stream_id] = shown
            old = self.configs[stream_id]  # a move starts it again with these
            self.configs[stream_id] = old.model_copy(update={
                "track": old.track or update.track or "bytetrack", "lines": update.lines,
                "zones": update.zones})
        return self.public(stream_id)

    def _carry(self, stream_id: str, counts: dict[str, Any] | None) -> None:
        if counts is None:
            return
        self.carried.setdefault(stream_id, Counter()).update(counts["outcomes"])
        self.carried_received[stream_id] += counts["received"]

    # ---- failures and new workers -----------------------------------------------------------
    async def _heartbeats(self) -> None:
        """A beat of every live worker each ``heartbeat_s``; a failover runs as a task of its
        own, so one that takes long never stops the beats."""
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            results = await asyncio.gather(*(self._beat(w) for w in self._alive()),
                                           return_exceptions=True)
            for error in results:
                if isinstance(error, Exception):
                    log.error("heartbeat: %s: %s", type(error).__name__, error)

    async def _beat(self, worker: WorkerState) -> None:
        ray = self._ray
        why = None
        try:
            beat = await self._await(worker.actor.heartbeat.remote(worker.seq),
                                     self.config.heartbeat_s)
        except ray.exceptions.ActorUnavailableError:  # a RayActorError that may come back
            worker.missed += 1
        except ray.exceptions.RayActorError:
            why = "its process died"
        except TimeoutError:
            worker.missed += 1
        else:
            self._took(worker, beat)
            return
        if why is None and worker.missed >= MISSED_BEATS:
            why = f"it answered no heartbeat for {MISSED_BEATS * self.config.heartbeat_s:.1f} s"
        if why is not None and worker.alive and not worker.failing:
            worker.failing = True
            # killed first, always: a worker that is only slow must never go on running the
            # streams that start elsewhere
            ray.kill(worker.actor, no_restart=True)
            asyncio.create_task(self._failover(worker, why), name=f"failover-{worker.id}")

    def _took(self, worker: WorkerState, beat: dict[str, Any]) -> None:
        worker.missed = 0
        worker.streams = {sid: s for sid, s in beat["streams"].items()
                          if self.owners.get(sid) == worker.id}
        for seq, event in beat["feed"]:
            worker.seq = seq
            self._relay(worker, event)

    def _relay(self, worker: WorkerState, event: dict[str, Any]) -> None:
        """A worker's feed event to the API's readers: a stream's change with its worker;
        a removal only when the stream is gone (not moved); events kept as recent."""
        if event["type"] in ("stream", "removed"):
            sid = event["stream"]["id"]
            if self.owners.get(sid) != worker.id:
                return  # an old owner's goodbye, or a stream that moved
            event = {"type": event["type"], "stream": event["stream"] | {"worker": worker.id}}
        elif event["type"] == "event":
            self._recent.append(event["event"])
        self.readers.emit(event)

    async def _failover(self, worker: WorkerState, why: str) -> None:
        async with self._lock:
            if not worker.alive:
                return
            worker.alive = False
            began = time.monotonic()
            lost = sorted(s for s, w in self.owners.items() if w == worker.id)
            log.warning("%s (pid %s) is lost: %s; moving its %d stream(s)", worker.id,
                        worker.pid, why, len(lost))
            for sid in lost:
                counts = worker.streams.get(sid) or {"received": 0, "outcomes": {}}
                unfinished = counts["received"] - sum(counts["outcomes"].values())
                self._carry(sid, counts)
                self.carried[sid]["dropped_failover"] += max(0, unfinished)
            moves = orphaned(self.owners, worker.id, self._load(), self.config.max_streams)
            for sid, target in moves.items():
                await self._restart_elsewhere(sid, target)
            log.info("%s's %d stream(s) moved in %.2f s", worker.id, len(lost),
                     time.monotonic() - began)
        if self._local:
            asyncio.create_task(self._replace(), name="cluster-replace")

    async def _restart_elsewhere(self, sid: str, target: str | None) -> None:
        if target is None:
            self._drop(sid, "no live worker has room for it")
            return
        try:
            await self._start_on(sid, self.configs[sid], target)
            self.moves += 1
        except Exception as e:
            self._drop(sid, f"it could not start on {target}: {e}")

    def _drop(self, sid: str, why: str) -> None:
        """A stream that could not be moved: gone, and said so (add it again to retry)."""
        log.error("stream %s stopped: %s", sid, why)
        self.owners.pop(sid, None)
        self.configs.pop(sid, None)
        self.carried.pop(sid, None)
        self.carried_received.pop(sid, None)
        self.readers.emit({"type": "removed", "stream": {"id": sid, "state": "failed",
                                                  "error": why}})

    async def _replace(self) -> None:
        """A new worker for the lost one; it takes its share of the streams."""
        try:
            worker = await self._start_worker()
        except Exception as e:
            log.error("no worker started in place of the lost one: %s", e)
            return
        await self._rebalance(worker)

    async def add_worker(self) -> dict[str, Any]:
        """One more local worker (``POST /api/workers``), and the streams it took."""
        if not self._local:
            raise ConfigError("workers join a Ray cluster by its own means (ray start); "
                              "restart the service to use them")
        worker = await self._start_worker()
        moved = await self._rebalance(worker)
        return worker.public(sorted(moved))

    async def _rebalance(self, worker: WorkerState) -> list[str]:
        async with self._lock:
            moves = joined(self.owners, worker.id, [w.id for w in self._alive()])
            for sid in moves:
                old = self._owner(sid)
                try:
                    final = await self._await(old.actor.remove_stream.remote(sid))
                except Exception as e:  # it may still run there: it stays, never twice
                    log.warning("stream %s stays on %s, which did not stop it (%s)", sid,
                                old.id, e)
                    continue
                self._carry(sid, final)
                old.streams.pop(sid, None)
                await self._restart_elsewhere(sid, worker.id)
            worker.joining = False
            if moves:
                log.info("%s joined: %d stream(s) moved to it", worker.id, len(moves))
            return sorted(moves)

    # ---- what the API shows ------------------------------------------------------------------
    async def snapshot(self, stream_id: str) -> bytes | None:
        actor = self._owner(stream_id).actor
        result: bytes | None = await self._await(actor.snapshot.remote(stream_id))
        return result

    async def results(self, stream_id: str) -> ResultFeed:
        actor = self._owner(stream_id).actor
        key = await self._await(actor.subscribe_results.remote(stream_id))
        return RemoteFeed(actor, key, stream_id)

    async def stats(self, window_s: float) -> dict[str, Any]:
        alive = self._alive()
        answers = await asyncio.gather(*(self._await(w.actor.stats.remote(window_s))
                                          for w in alive), return_exceptions=True)
        per_worker = {w.id: a for w, a in zip(alive, answers, strict=True)
                      if isinstance(a, dict)}
        return merged_stats(per_worker, self.owners, self.carried, self.carried_received,
                            window_s)

    async def metrics_text(self) -> bytes:
        return await asyncio.to_thread(generate_latest, self.registry)

    async def recent_events(self, limit: int, stream: str | None) -> list[dict[str, Any]]:
        events = [e for e in self._recent if stream is None or e["stream"] == stream]
        return events[::-1][:limit]

    async def event_media(self, event_id: str, kind: str) -> Path | bytes | None:
        found = self._media.find(event_id, kind)  # a worker on this machine wrote it here
        if found is not None:
            return found
        for worker in self._alive():
            try:
                data: bytes | None = await self._await(
                    worker.actor.event_media.remote(event_id, kind))
            except Exception as e:  # a worker going away: ask the others
                log.debug("%s: event media not read (%s)", worker.id, e)
                continue
            if data is not None:
                return data
        return None

    async def workers(self) -> list[dict[str, Any]]:
        return [w.public(sorted(s for s, o in self.owners.items() if o == w.id))
                for w in self.pool.values()]
