"""``GET /api/stats`` of a cluster: every worker's figures as one service's.

Streams and detectors are listed with their worker; a stream's counts add what its earlier
owners counted (and ``dropped_failover``) to its owner's. A stage's figures join those of
every worker that runs it: threads and items add up, busy is the mean over workers, and each
latency quantile is the highest of any worker's (the slowest worker's tail is the service's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


def _stages(per_worker: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for figures in per_worker.values():
        for stage in figures["stages"]:
            by_name.setdefault(stage["stage"], []).append(stage)
    joined = []
    for name, rows in by_name.items():
        def worst(key: str, q: str, rows: list[dict[str, Any]] = rows) -> float | None:
            values = [r[key][q] for r in rows if r[key][q] is not None]
            return max(values) if values else None

        joined.append({"stage": name, "threads": sum(r["threads"] for r in rows),
                       "items": sum(r["items"] for r in rows),
                       "busy": round(sum(r["busy"] for r in rows) / len(rows), 4),
                       "work_ms": {q: worst("work_ms", q) for q in ("p50", "p95", "p99")},
                       "wait_ms": {q: worst("wait_ms", q) for q in ("p50", "p95", "p99")}})
    return joined


def merged_stats(per_worker: Mapping[str, dict[str, Any]], owners: Mapping[str, str],
                 carried: Mapping[str, Counter[str]], carried_received: Mapping[str, int],
                 window_s: float) -> dict[str, Any]:
    streams, channels, detectors, gpus = [], [], [], []
    batches: Counter[str] = Counter()
    for worker, figures in per_worker.items():
        for stream in figures["streams"]:
            sid = stream["id"]
            if owners.get(sid) != worker:
                continue
            outcomes = Counter(stream["outcomes"]) + carried.get(sid, Counter())
            streams.append(stream | {"worker": worker, "outcomes": dict(outcomes),
                                     "received": stream["received"]
                                     + carried_received.get(sid, 0)})
        channels += [c | {"worker": worker} for c in figures["channels"]]
        detectors += [d | {"worker": worker} for d in figures["detectors"]]
        gpus += [g | {"worker": worker} for g in figures.get("gpus") or []]
        batches.update({k: int(v) for k, v in figures["batch_sizes"].items()})
    drops: Counter[str] = Counter()
    for stream in streams:
        drops.update({k: v for k, v in stream["outcomes"].items() if k != "processed"})
    merged = {"window_s": window_s, "stages": _stages(per_worker), "channels": channels,
              "streams": streams, "drops": dict(drops),
              "batch_sizes": {k: batches[k] for k in sorted(batches, key=int)},
              "detectors": detectors}
    if gpus:
        merged["gpus"] = gpus
    return merged
