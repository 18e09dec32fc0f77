"""The workers of a cluster watched by heartbeats and replaced (``Supervisor``), their streams
moved when one is lost or one joins. ``Cluster`` (``controller.py``) is the API's face over
them; ``workers.py`` starts and calls them.

Every ``heartbeat_s`` each worker is asked for its streams (their states and frame counts)
and the feed messages since the last beat. A worker whose process died is known at once
(Ray fails the call); one that answers no beat for three in a row is hung, and is killed
first, so that no stream ever runs twice. Either way its streams go to their next best live
worker, started again from their config; the frames it had received but not finished at its
last beat are counted ``dropped_failover`` for their streams, so a stream's books still
balance across the move (what it received after that beat died with it, unknown and
uncounted by anyone). A local cluster then starts a worker in its place, which takes its
share from the most loaded. The tasks this starts are kept, and cancelled on close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from app.service.cluster.placement import joined, orphaned
from app.service.cluster.workers import MISSED_BEATS, StreamBooks, WorkerPool, WorkerState
from app.service.config import StreamConfig

log = logging.getLogger(__name__)

Restart = Callable[[str, StreamConfig, str], Any]  # (stream, its config, worker): awaitable
Relay = Callable[[WorkerState, dict[str, Any]], None]
Drop = Callable[[str, str], None]  # a stream that could not be moved, and why


class Supervisor:
    """The heartbeats, failovers, replacements and rebalances of a ``pool``: ``restart``
    starts a stream on a worker, ``relay`` hands on a worker's feed message, ``drop`` ends
    a stream that could not be moved; ``lock`` is the cluster's, one change of ownership at a
    time."""

    def __init__(self, pool: WorkerPool, books: StreamBooks, lock: asyncio.Lock, *,
                 restart: Restart, relay: Relay, drop: Drop) -> None:
        self.pool = pool
        self.books = books
        self.lock = lock
        self._restart, self._relay, self._drop = restart, relay, drop
        self._tasks: set[asyncio.Task[Any]] = set()
        self.heartbeat_s = pool.config.heartbeat_s

    def start(self) -> None:
        self._spawn(self._heartbeats(), "cluster-heartbeats")

    async def aclose(self) -> None:
        """Cancel every task this started (beats, failovers, replacements) and wait them."""
        tasks, self._tasks = set(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _heartbeats(self) -> None:
        """A beat of every live worker each ``heartbeat_s``; a failover runs as a task of its
        own, so one that takes long never stops the beats."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            results = await asyncio.gather(*(self._beat(w) for w in self.pool.alive()),
                                           return_exceptions=True)
            for error in results:
                if isinstance(error, Exception):
                    log.error("heartbeat: %s: %s", type(error).__name__, error)

    async def _beat(self, worker: WorkerState) -> None:
        ray = self.pool.ray
        why = None
        try:
            beat = await self.pool.call(worker.actor.heartbeat.remote(worker.seq),
                                           self.heartbeat_s)
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
            why = f"it answered no heartbeat for {MISSED_BEATS * self.heartbeat_s:.1f} s"
        if why is not None and worker.alive and not worker.failing:
            worker.failing = True
            # killed first, always: a worker that is only slow must never go on running the
            # streams that start elsewhere
            ray.kill(worker.actor, no_restart=True)
            self._spawn(self._failover(worker, why), f"failover-{worker.id}")

    def _took(self, worker: WorkerState, beat: dict[str, Any]) -> None:
        worker.missed = 0
        worker.streams = {sid: s for sid, s in beat["streams"].items()
                          if self.books.owners.get(sid) == worker.id}
        for seq, message in beat["feed"]:
            worker.seq = seq
            self._relay(worker, message)

    async def _failover(self, worker: WorkerState, why: str) -> None:
        async with self.lock:
            if not worker.alive:
                return
            worker.alive = False
            began = time.monotonic()
            books = self.books
            lost = sorted(s for s, w in books.owners.items() if w == worker.id)
            log.warning("%s (pid %s) is lost: %s; moving its %d stream(s)", worker.id,
                        worker.pid, why, len(lost))
            for sid in lost:
                counts = worker.streams.get(sid) or {"received": 0, "outcomes": {}}
                unfinished = counts["received"] - sum(counts["outcomes"].values())
                books.carry(sid, counts)
                books.carried[sid]["dropped_failover"] += max(0, unfinished)
            moves = orphaned(books.owners, worker.id, self.pool.load(books.owners),
                             self.pool.config.max_streams)
            for sid, target in moves.items():
                await self.restart_elsewhere(sid, target)
            log.info("%s's %d stream(s) moved in %.2f s", worker.id, len(lost),
                     time.monotonic() - began)
        if self.pool.local:
            self._spawn(self._replace(), "cluster-replace")

    async def restart_elsewhere(self, sid: str, target: str | None) -> None:
        if target is None:
            self._drop(sid, "no live worker has room for it")
            return
        try:
            await self._restart(sid, self.books.configs[sid], target)
            self.books.moves += 1
        except Exception as e:
            self._drop(sid, f"it could not start on {target}: {e}")

    async def _replace(self) -> None:
        """A new worker for the lost one; it takes its share of the streams."""
        try:
            worker = await self.pool.start()
        except Exception as e:
            log.error("no worker started in place of the lost one: %s", e)
            return
        await self.rebalance(worker)

    async def rebalance(self, worker: WorkerState) -> list[str]:
        """The share of the streams a new ``worker`` takes from the busiest."""
        async with self.lock:
            books = self.books
            moves = joined(books.owners, worker.id, [w.id for w in self.pool.alive()])
            for sid in moves:
                old = self.pool.states[books.owners[sid]]
                try:
                    final = await self.pool.call(old.actor.remove_stream.remote(sid))
                except Exception as e:  # it may still run there: it stays, never twice
                    log.warning("stream %s stays on %s, which did not stop it (%s)", sid,
                                old.id, e)
                    continue
                books.carry(sid, final)
                old.streams.pop(sid, None)
                await self.restart_elsewhere(sid, worker.id)
            worker.joining = False
            if moves:
                log.info("%s joined: %d stream(s) moved to it", worker.id, len(moves))
            return sorted(moves)
