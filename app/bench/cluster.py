"""``vidpipe bench --service N --workers W``: the service in one process against the same
streams on W Ray workers, side by side.

Each run is a fresh process (``python -m app.bench.cluster ...``), the two kinds alternating
over the repetitions. A cluster run starts a local Ray cluster and its workers, adds N file
streams played as 30 fps cameras, warms up, and counts each stream's processed frames over
S seconds through the controller (``Cluster.stats``). Memory is the resident memory of the
whole process tree: the API process, the workers and Ray's own (GCS, raylet, agents).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from app.bench.service import KEY_FRAME_SPREAD_S, WARM_UP_S, run_in_tree
from app.bench.service import measure as measure_one_process
from app.service.config import ServiceConfig, StreamConfig
from app.service.schemas import Stats


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and every process below it (Linux /proc), in MB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields["PPid"]), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total / 1024


async def measure_cluster(streams: int, model: str, clip: Path, seconds: float,
                          workers: int) -> dict[str, Any]:
    from app.service.cluster.controller import Cluster

    clip = clip.resolve()
    results = tempfile.TemporaryDirectory(prefix="vidpipe-bench-results-")
    config = ServiceConfig(media_roots=[clip.parent], model=model, workers=workers,
                           results_dir=Path(results.name))
    cluster = Cluster(config, CollectorRegistry())
    ids = [f"cam{k}" for k in range(streams)]
    await cluster.start()
    try:
        for sid in ids:
            await cluster.add(StreamConfig(url=str(clip), id=sid))
            await asyncio.sleep(KEY_FRAME_SPREAD_S / streams)
        await asyncio.sleep(WARM_UP_S + 2 * config.heartbeat_s)
        first = await cluster.stats(60.0)
        began = time.monotonic()
        await asyncio.sleep(seconds)
        last = await cluster.stats(60.0)
        wall = time.monotonic() - began
        memory = tree_rss_mb(os.getpid())
        placed = {w.id: len(w.streams) for w in await cluster.workers()}
    finally:
        await cluster.aclose()
        results.cleanup()

    def processed(figures: Stats) -> dict[str, int]:
        return {s.id: s.outcomes.get("processed", 0) for s in figures.streams}

    before, after = processed(first), processed(last)
    fps = {sid: (after[sid] - before[sid]) / wall for sid in ids}
    return {"streams": streams, "workers": workers, "model": model, "seconds": round(wall, 1),
            "fps_total": round(sum(fps.values()), 1),
            "fps_per_stream_min": round(min(fps.values()), 1),
            "fps_per_stream_max": round(max(fps.values()), 1),
            "rss_mb": round(memory, 1), "placed": placed}


def compare(streams: int, workers: int, model: str, clip: Path, seconds: float,
            reps: int) -> list[dict[str, Any]]:
    """One process and ``workers`` workers, alternating, ``reps`` times each."""
    rows = []
    for rep in range(reps):
        kinds = ["one process", f"{workers} workers"]
        if rep % 2:
            kinds.reverse()
        for kind in kinds:
            args = [str(streams), model, str(clip.resolve()), str(seconds),
                    "0" if kind == "one process" else str(workers)]
            row = run_in_tree(Path(__file__), args, None, seconds + 300)
            rows.append(row | {"kind": kind, "rep": rep})
    return rows


async def _main(streams: int, model: str, clip: Path, seconds: float, workers: int,
                ) -> dict[str, Any]:
    if workers == 0:
        row = await measure_one_process(streams, model, clip, seconds)
        return row | {"workers": 0, "rss_mb": round(tree_rss_mb(os.getpid()), 1)}
    return await measure_cluster(streams, model, clip, seconds, workers)


if __name__ == "__main__":
    count, name, path, duration, n = sys.argv[1:6]
    print(json.dumps(asyncio.run(_main(int(count), name, Path(path), float(duration),
                                       int(n)))))
