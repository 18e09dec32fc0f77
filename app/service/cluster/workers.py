"""The workers of a cluster and what the controller knows of them: ``WorkerPool`` starts them
(a local Ray cluster, or one joined at ``ray_address``) and calls them with a timeout;
``WorkerState`` is one as at its last heartbeat; ``StreamBooks`` says which worker owns each
stream, with the config it was added with and what its earlier owners counted."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from app.errors import WorkerUnavailable
from app.service.cluster.worker import WorkerHost
from app.service.config import ServiceConfig, StreamConfig
from app.service.schemas import Worker

log = logging.getLogger(__name__)

MISSED_BEATS = 3  # a worker that answers none of this many beats in a row is hung
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0  # any other call to a worker: a hung one cannot hold the controller


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
    seq: int = 0  # the last feed message taken from it
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)  # as at its last beat

    def view(self, owned: list[str]) -> Worker:
        fps = sum(s.get("fps", 0.0) for s in self.streams.values())
        return Worker(id=self.id, pid=self.pid, node=self.node, streams=owned,
                      fps=round(fps, 2), alive=self.alive, joining=self.joining)


@dataclass(eq=False)
class StreamBooks:
    """Which worker owns each stream (each exactly once), the config it was added with, and
    what its earlier owners counted (``dropped_failover`` among it), added to its owner's."""

    owners: dict[str, str] = field(default_factory=dict)
    configs: dict[str, StreamConfig] = field(default_factory=dict)
    carried: dict[str, Counter[str]] = field(default_factory=dict)
    carried_received: Counter[str] = field(default_factory=Counter)
    moves: int = 0  # streams started again on another worker

    def carry(self, stream_id: str, counts: dict[str, Any] | None) -> None:
        if counts is None:
            return
        self.carried.setdefault(stream_id, Counter()).update(counts["outcomes"])
        self.carried_received[stream_id] += counts["received"]

    def forget(self, stream_id: str) -> None:
        """A stream that is gone: a stream added again later starts at zero."""
        self.owners.pop(stream_id, None)
        self.configs.pop(stream_id, None)
        self.carried.pop(stream_id, None)
        self.carried_received.pop(stream_id, None)


class WorkerPool:
    """The worker actors, started on the cluster this process starts or joins."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.states: dict[str, WorkerState] = {}  # every worker started, alive or lost
        self.local = config.ray_address is None
        self.ray: Any = None
        self._options: dict[str, Any] = {}
        self._names = itertools.count(1)

    def join(self, ray: Any) -> int:
        """Start or join the Ray cluster, the process's SIGTERM and SIGINT handlers kept
        (Ray's own would end the process without the service's drain); how many workers to
        start."""
        self.ray = ray
        kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._join()
        finally:
            for sig, handler in kept.items():
                if handler is not None and threading.current_thread() is \
                        threading.main_thread():
                    signal.signal(sig, handler)

    def _join(self) -> int:
        ray = self.ray
        quiet = {"include_dashboard": False, "log_to_driver": False,
                 "configure_logging": False}
        if self.local:
            count = self.config.workers or 1
            ray.init(**quiet)
            # on one machine the workers share its cores as processes do: Ray reserves
            # none for them, so a replacement always fits
            self._options = {"num_cpus": 0}
            log.info("a local Ray cluster with %d worker(s)", count)
            return count
        ray.init(address=self.config.ray_address, **quiet)
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if gpus:
            self._options = {"num_gpus": 1, "num_cpus": 1}
            count = self.config.workers or gpus
        else:
            self._options = {"num_cpus": self.config.cores_per_worker}
            count = self.config.workers or max(1, cpus // self.config.cores_per_worker)
        log.info("joined the Ray cluster at %s (%d GPU, %d CPU): %d worker(s)",
                 self.config.ray_address, gpus, cpus, count)
        return count

    async def start(self) -> WorkerState:
        """One more worker, up; WorkerUnavailable when none starts in time."""
        wid = f"worker-{next(self._names)}"
        settings = self.config.model_copy(update={"workers": None, "ray_address": None,
                                                  "streams": []})
        actor_class = self.ray.remote(WorkerHost).options(
            name=f"vidpipe-{wid}-{os.getpid()}", max_restarts=0, max_concurrency=64,
            **self._options)
        actor = actor_class.remote(settings.model_dump_json(), wid)
        try:
            info = await self.call(actor.start.remote(), START_TIMEOUT_S)
        except TimeoutError:
            self.ray.kill(actor, no_restart=True)
            raise WorkerUnavailable(f"no worker started within {START_TIMEOUT_S:.0f} s (the "
                                    "cluster has no room for one, or it is overloaded)") from None
        except BaseException:
            self.ray.kill(actor, no_restart=True)  # its reservation (a GPU) is freed
            raise
        state = WorkerState(wid, actor, info["pid"], info["node"])
        self.states[wid] = state
        log.info("%s up: pid %s on %s", wid, state.pid, state.node)
        return state

    async def call(self, ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
        """A worker's answer within ``timeout_s`` (TimeoutError); its own exception as it
        was raised there (not Ray's wrapper, whose text holds the remote traceback)."""
        try:
            return await asyncio.wait_for(_awaited(ref), timeout_s)
        except self.ray.exceptions.RayTaskError as e:
            cause = e.cause
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def alive(self) -> list[WorkerState]:
        return [w for w in self.states.values() if w.alive]

    def load(self, owners: dict[str, str]) -> dict[str, int]:
        """The streams each live worker owns."""
        load = {w.id: 0 for w in self.alive()}
        for owner in owners.values():
            if owner in load:
                load[owner] += 1
        return load


async def _awaited(ref: Any) -> Any:
    return await ref
