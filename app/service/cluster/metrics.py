"""``/metrics`` of a cluster: one scrape target for every worker's series.

At each scrape the API process pulls each live worker's metric families through its actor
(``WorkerHost.metric_families``, at most ``PULL_TIMEOUT_S``) and serves them as one
family per name, each sample labelled with its ``worker``. Why a pull through the actors
rather than Prometheus federation or Ray's own metrics export: the workers need no port of
their own (nothing more to secure, and the one token guards everything), the series keep
vidpipe's names, and a scrape sees exactly the workers the controller owns streams on.
The controller adds its own: ``vidpipe_frames_total{outcome="dropped_failover"}`` per stream
(worker ``controller``), ``vidpipe_workers{state}`` and ``vidpipe_stream_moves_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a scrape reads of the cluster, copied when it starts (the event loop changes the
    cluster while a scrape runs on its own thread)."""

    ray: Any  # the ray module, None before the cluster started
    alive: list[tuple[str, Any]]  # (worker id, actor)
    lost: int  # workers lost
    dropped_failover: dict[str, int]  # per stream still owned
    moves: int  # streams started again elsewhere


class ClusterCollector:
    def __init__(self, view: Callable[[], ClusterView]) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        families = _pulled(view)
        frames = families.setdefault("vidpipe_frames", Metric(
            "vidpipe_frames", "Frames by final outcome", "counter"))
        for sid, dropped in view.dropped_failover.items():
            if dropped:
                frames.add_sample("vidpipe_frames_total",
                                  {"stream": sid, "outcome": "dropped_failover",
                                   "worker": "controller"}, dropped)
        gauge = Metric("vidpipe_workers", "Workers of the cluster by state", "gauge")
        gauge.add_sample("vidpipe_workers", {"state": "alive"}, len(view.alive))
        gauge.add_sample("vidpipe_workers", {"state": "lost"}, view.lost)
        moves = Metric("vidpipe_stream_moves", "Streams started again on another worker "
                       "(a worker lost or joined)", "counter")
        moves.add_sample("vidpipe_stream_moves_total", {}, view.moves)
        yield from families.values()
        yield gauge
        yield moves

    def describe(self) -> list[Any]:
        return []  # collected at each scrape: nothing to check at registration


def _pulled(view: ClusterView) -> dict[str, Metric]:
    """Every live worker's families, pulled at once, each sample labelled ``worker``."""
    families: dict[str, Metric] = {}
    if view.ray is None or not view.alive:
        return families
    refs = [actor.metric_families.remote() for _, actor in view.alive]
    view.ray.wait(refs, num_returns=len(refs), timeout=PULL_TIMEOUT_S)  # all at once
    for (worker, _), ref in zip(view.alive, refs, strict=True):
        try:
            pulled = view.ray.get(ref, timeout=0)
        except Exception as e:  # a worker going away: its series are missing once
            log.debug("metrics of %s not pulled: %s", worker, e)
            continue
        for name, kind, documentation, samples in pulled:
            family = families.setdefault(name, Metric(name, documentation, kind))
            for sample, labels, value in samples:
                family.add_sample(sample, labels | {"worker": worker}, value)
    return families
