"""``vidpipe bench --service``: the service with N file streams played as 30 fps cameras.

Each stream count runs in a fresh process (``python -m app.bench.service N MODEL CLIP S``), so
the resident memory it reports belongs to that count alone: the service starts, adds N streams
of the clip (looped, paced, newest frame first), warms up, and measures for S seconds the
processed fps of each stream, capture-to-result p50/p99, the drops by cause, the batch sizes
and the RSS. ``--against REV`` runs each count on another commit as well (a ``git worktree``
of it, this measuring file run with that tree's modules), alternating which runs first, so
drift of a busy machine falls on both.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipelines.errors import ConfigError
from pipelines.metrics import PipelineMetrics

try:
    from app.service.config import ServiceConfig, StreamConfig
    from app.service.service import Service
except ModuleNotFoundError:  # a worktree of code from before app/ was split by face (b64560b)
    from app.config import ServiceConfig, StreamConfig  # type: ignore[no-redef]
    from app.service import Service  # type: ignore[no-redef,attr-defined]

WARM_UP_S = 3.0
KEY_FRAME_SPREAD_S = 2.0  # the camera clip's key frame interval: streams start spread over it


def rss_mb() -> float:
    """This process's resident memory (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(streams: int, model: str, clip: Path, seconds: float,
                  detect_fps: float | None = None) -> dict[str, Any]:
    """One stream count, in this process (``detect_fps``: each stream's)."""
    clip = clip.resolve()
    keys: dict[str, Any] = {}
    results = tempfile.TemporaryDirectory(prefix="vidpipe-bench-results-")
    if "results_dir" in ServiceConfig.model_fields:  # older code in a worktree has none
        keys["results_dir"] = Path(results.name)  # written as the service would, then gone
    service = Service(ServiceConfig(media_roots=[clip.parent], model=model, **keys),
                      PipelineMetrics())
    metrics = service.metrics
    ids = [f"cam{k}" for k in range(streams)]
    await service.start()  # not ``async with``: the same file runs in a worktree of older code
    try:
        for sid in ids:  # started apart, so that their key frames are too, as cameras' are
            rate = {} if detect_fps is None else {"detect_fps": detect_fps}
            await service.add_stream(StreamConfig.model_validate(
                {"url": str(clip), "id": sid, **rate}))
            await asyncio.sleep(KEY_FRAME_SPREAD_S / streams)
        await asyncio.sleep(WARM_UP_S)
        row = await _window(metrics, ids, seconds)
    finally:
        await service.aclose()
        results.cleanup()
    return {"streams": streams, "model": model, "detect_fps": detect_fps, **row}


async def _window(metrics: PipelineMetrics, ids: list[str], seconds: float) -> dict[str, Any]:
    """Throughput, latency, drops and batch sizes of ``ids`` over the next ``seconds``."""
    start = {sid: dict(metrics.outcomes[sid]) for sid in ids}
    batches = dict(metrics.batch_sizes)
    began = time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - began
    fps = {sid: (metrics.outcomes[sid]["processed"] - start[sid].get("processed", 0))
           / wall for sid in ids}
    drops = {sid: {o: n - start[sid].get(o, 0) for o, n in metrics.outcomes[sid].items()
                   if o != "processed" and n > start[sid].get(o, 0)} for sid in ids}
    latency = [metrics.latency[sid].quantiles((0.5, 0.99), wall) for sid in ids]
    loads = sum(getattr(metrics, "model_loads", {}).values())  # older code: not counted
    return {
        "seconds": round(wall, 1),
        "fps_total": round(sum(fps.values()), 1), "fps_per_stream_min": round(min(fps.values()), 1),
        "fps_per_stream_max": round(max(fps.values()), 1),
        "p50_ms": round(1e3 * max(p50 for p50, _ in latency), 1),
        "p99_ms": round(1e3 * max(p99 for _, p99 in latency), 1),
        "drops_per_s": round(sum(sum(d.values()) for d in drops.values()) / wall, 1),
        "drops": {cause: sum(d.get(cause, 0) for d in drops.values())
                  for cause in sorted({c for d in drops.values() for c in d})},
        "batch_sizes": {str(k): v - batches.get(k, 0) for k, v in
                        sorted(metrics.batch_sizes.items()) if v > batches.get(k, 0)},
        "model_loads": loads, "rss_mb": round(rss_mb(), 1),
    }


def run(counts: list[int], model: str, clip: Path, seconds: float,
        against: tuple[str, Path] | None = None,
        detect_fps: float | None = None) -> list[dict[str, Any]]:
    """Every count in a fresh process, one after the other; with ``against`` (a label and a
    source tree of other code), each count on that code too, the order alternating."""
    rows = []
    for k, streams in enumerate(counts):
        codes: list[tuple[str, Path | None]] = [("this", None)]
        if against is not None:
            codes.append(against)
            if k % 2:
                codes.reverse()
        for label, tree in codes:
            row = _measure_in_process(streams, model, clip, seconds, tree, detect_fps)
            rows.append(row | {"code": label})
    return rows


def _measure_in_process(streams: int, model: str, clip: Path, seconds: float,
                        tree: Path | None, detect_fps: float | None = None) -> dict[str, Any]:
    args = [str(streams), model, str(clip.resolve()), str(seconds),
            "" if detect_fps is None else str(detect_fps)]
    try:
        return run_in_tree(Path(__file__), args, tree, seconds + 120)
    except RuntimeError as e:
        raise RuntimeError(f"the {streams}-stream run failed: {e}") from None


def run_in_tree(script: Path, args: list[str], tree: Path | None,
                timeout_s: float) -> dict[str, Any]:
    """Run a measuring ``script`` in a fresh process, with this code's modules or, given a
    ``tree``, that tree's modules first (-P: not the script's own folder); its last line of
    output is a JSON object."""
    modules = tree or Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-P", str(script.resolve()), *args],
                          capture_output=True, text=True, timeout=timeout_s, check=False,
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(modules)})
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-500:])
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


@contextmanager
def worktree(rev: str) -> Iterator[tuple[str, Path]]:
    """A detached ``git worktree`` of ``rev`` for the time of the block, and its short name."""
    short = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True,
                           text=True, check=False)
    if short.returncode != 0:
        raise ConfigError(f"--against {rev}: not a commit of this repository")
    with tempfile.TemporaryDirectory(prefix="vidpipe-against-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev],
                       check=True, capture_output=True)
        try:
            yield short.stdout.strip(), tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                           check=False, capture_output=True)


if __name__ == "__main__":
    count, name, path, duration, rate = sys.argv[1:6]
    try:  # as `vidpipe serve` holds its memory (older code may not)
        from app.malloc import limit_malloc_arenas
        limit_malloc_arenas()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(measure(int(count), name, Path(path), float(duration),
                                         float(rate) if rate else None))))
