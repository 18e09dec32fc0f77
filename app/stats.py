"""The figures ``GET /api/stats`` and the dashboard show, over a recent window."""

from __future__ import annotations

import math
from typing import Any

from app.service import Service

QUANTILES = (0.5, 0.95, 0.99)


def _ms(values: tuple[float, ...] | list[float], scale: float = 1.0) -> dict[str, float | None]:
    return {k: (None if math.isnan(v) else round(v * scale, 3))
            for k, v in zip(("p50", "p95", "p99"), values, strict=True)}


def stats(service: Service, window_s: float = 60.0) -> dict[str, Any]:
    m = service.metrics
    stages = [
        {"stage": s.stage, "threads": s.instances, "items": s.items, "busy": round(s.busy, 4),
         "work_ms": _ms(s.work_ms), "wait_ms": _ms(s.wait_ms)}
        for s in m.stage_summaries(window_s=window_s)
    ]
    channels = [{"name": name, "depth": int(depth()), "capacity": capacity}
                for name, (depth, capacity) in m.channel_depths.items()]
    streams = []
    for rt in service.streams.values():
        recent = m.latency[rt.id].values(window_s=5.0)
        streams.append(rt.public() | {
            "fps": round(recent.size / 5.0, 2),
            "latency_ms": _ms(m.latency[rt.id].quantiles(QUANTILES, window_s), 1000.0),
            "outcomes": dict(m.outcomes[rt.id]), "received": m.received[rt.id],
        })
    drops: dict[str, int] = {}
    for rt in service.streams.values():
        for outcome, count in m.outcomes[rt.id].items():
            if outcome != "processed":
                drops[outcome] = drops.get(outcome, 0) + count
    figures = {"window_s": window_s, "stages": stages, "channels": channels,
               "streams": streams, "drops": drops,
               "batch_sizes": {str(k): v for k, v in sorted(m.batch_sizes.items())},
               "detectors": [d.describe() for d in service.detectors.values()]}
    if service.gpu is not None:  # NVML, read now
        reading = service.gpu.read()
        figures["gpus"] = [{"gpu": service.gpu.gpu_index,
                            "utilization": round(reading.utilization, 3),
                            "decoder_utilization": round(reading.decoder_utilization, 3),
                            "memory_used_bytes": reading.memory_used_bytes}]
    return figures
