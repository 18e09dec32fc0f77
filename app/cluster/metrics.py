"""``/metrics`` of a cluster: one scrape target for every worker's series.

At each scrape the API process pulls each live worker's metric families through its actor
(``WorkerEngine.metric_families``, at most ``PULL_TIMEOUT_S``) and serves them as one
family per name, each sample labelled with its ``worker``. Why a pull through the actors
rather than Prometheus federation or Ray's own metrics export: the workers need no port of
their own (nothing more to secure, and the one token guards everything), the series keep
vidpipe's names, and a scrape sees exactly the workers the controller owns streams on.
The controller adds its own: ``vidpipe_frames_total{outcome="dropped_failover"}`` per stream
(worker ``controller``), ``vidpipe_workers{state}`` and ``vidpipe_stream_moves_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from app.cluster.controller import Cluster

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 2.0


class ClusterCollector:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        cluster = self.cluster
        families: dict[str, Metric] = {}
        ray = cluster._ray
        # copies: the event loop changes these while a scrape runs on its thread
        workers = list(cluster.pool.values())
        carried = {sid: dict(counts) for sid, counts in list(cluster.carried.items())}
        owned = set(cluster.owners)
        alive = [w for w in workers if w.alive]
        if ray is not None and alive:
            refs = [w.actor.metric_families.remote() for w in alive]
            ray.wait(refs, num_returns=len(refs), timeout=PULL_TIMEOUT_S)  # all at once
            for worker, ref in zip(alive, refs, strict=True):
                try:
                    pulled = ray.get(ref, timeout=0)
                except Exception as e:  # a worker going away: its series are missing once
                    log.debug("metrics of %s not pulled: %s", worker.id, e)
                    continue
                for name, kind, documentation, samples in pulled:
                    family = families.setdefault(name, Metric(name, documentation, kind))
                    for sample, labels, value in samples:
                        family.add_sample(sample, labels | {"worker": worker.id}, value)
        frames = families.setdefault("vidpipe_frames", Metric(
            "vidpipe_frames", "Frames by final outcome", "counter"))
        for sid, counts in carried.items():
            if counts.get("dropped_failover") and sid in owned:
                frames.add_sample("vidpipe_frames_total",
                                  {"stream": sid, "outcome": "dropped_failover",
                                   "worker": "controller"}, counts["dropped_failover"])
        gauge = Metric("vidpipe_workers", "Workers of the cluster by state", "gauge")
        for state, alive_flag in (("alive", True), ("lost", False)):
            gauge.add_sample("vidpipe_workers", {"state": state},
                             sum(1 for w in workers if w.alive == alive_flag))
        moves = Metric("vidpipe_stream_moves", "Streams started again on another worker "
                       "(a worker lost or joined)", "counter")
        moves.add_sample("vidpipe_stream_moves_total", {}, cluster.moves)
        yield from families.values()
        yield gauge
        yield moves

    def describe(self) -> list[Any]:
        return []  # collected at each scrape: nothing to check at registration
