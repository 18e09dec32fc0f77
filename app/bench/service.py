"""``vidpipe bench --service``: the service with N file streams played as 30 fps cameras.

Each stream count runs in a fresh process (``python -m app.bench.service N MODEL CLIP S``), so
the resident memory it reports belongs to that count alone: the service starts, adds N streams
of the clip (looped, paced, newest frame first), warms up, and measures for S seconds the
processed fps of each stream, capture-to-result p50/p99, the drops by cause, the batch sizes
and the RSS. To compare with another commit, run the same command in a ``git worktree`` of it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.config import ServiceConfig, StreamConfig
from app.service import Service
from pipelines.metrics import PipelineMetrics

WARM_UP_S = 3.0


def rss_mb() -> float:
    """This process's resident memory (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(streams: int, model: str, clip: Path, seconds: float) -> dict[str, Any]:
    """One stream count, in this process."""
    clip = clip.resolve()
    service = Service(ServiceConfig(media_roots=[clip.parent], model=model), PipelineMetrics())
    metrics = service.metrics
    ids = [f"cam{k}" for k in range(streams)]
    await service.start()  # not ``async with``: the same file runs in a worktree of older code
    try:
        for sid in ids:
            await service.add_stream(StreamConfig(url=str(clip), id=sid))
        await asyncio.sleep(WARM_UP_S)
        start = {sid: dict(metrics.outcomes[sid]) for sid in ids}
        batches = dict(metrics.batch_sizes)
        began = time.monotonic()
        await asyncio.sleep(seconds)
        wall = time.monotonic() - began
        fps = {sid: (metrics.outcomes[sid]["processed"] - start[sid].get("processed", 0))
               / wall for sid in ids}
        drops = {sid: {o: n - start[sid].get(o, 0) for o, n in metrics.outcomes[sid].items()
                       if o != "processed" and n > start[sid].get(o, 0)} for sid in ids}
        latency = [metrics.latency[sid].quantiles((0.5, 0.99)) for sid in ids]
        loads = sum(getattr(metrics, "model_loads", {}).values())  # older code: not counted
        memory = rss_mb()
    finally:
        await service.aclose()
    return {
        "streams": streams, "model": model, "seconds": round(wall, 1),
        "fps_total": round(sum(fps.values()), 1), "fps_per_stream_min": round(min(fps.values()), 1),
        "fps_per_stream_max": round(max(fps.values()), 1),
        "p50_ms": round(1e3 * max(p50 for p50, _ in latency), 1),
        "p99_ms": round(1e3 * max(p99 for _, p99 in latency), 1),
        "drops_per_s": round(sum(sum(d.values()) for d in drops.values()) / wall, 1),
        "batch_sizes": {str(k): v - batches.get(k, 0) for k, v in
                        sorted(metrics.batch_sizes.items()) if v > batches.get(k, 0)},
        "model_loads": loads, "rss_mb": round(memory, 1),
    }


def run(counts: list[int], model: str, clip: Path, seconds: float) -> list[dict[str, Any]]:
    """Every count in a fresh process, one after the other."""
    rows = []
    for streams in counts:
        done = subprocess.run([sys.executable, "-m", "app.bench.service", str(streams), model,
                               str(clip), str(seconds)], capture_output=True, text=True,
                              timeout=seconds + 120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the {streams}-stream run failed: {done.stderr[-500:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


if __name__ == "__main__":
    count, name, path, duration = sys.argv[1:5]
    print(json.dumps(asyncio.run(measure(int(count), name, Path(path), float(duration)))))
