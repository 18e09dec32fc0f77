"""``vidpipe profile``: run briefly and name the bottleneck, with advice.

The ceiling of a pipeline is the rate of its slowest stage: 1 / (work time per frame of that
stage), each stage having its own thread. The efficiency is the rate reached over that ceiling.
Where the cores are all busy the stages also compete for them, and the report says so.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.bench.measure import CORES, LatencySink
from app.run.sources import Location, open_sources, stream_ids
from models.spec import ModelSpec
from pipelines.build import build_pipeline
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.threads import ThreadPlan


async def _run_for(pipeline: Pipeline, seconds: float,
                   occupancy: dict[str, list[float]]) -> None:
    async def sample() -> None:
        while True:
            for ch in pipeline.channels:
                occupancy[ch.name].append(ch.fill())
            await asyncio.sleep(0.05)

    async def stop_later() -> None:
        await asyncio.sleep(seconds)
        await pipeline.stop(drain=True)

    tasks = [asyncio.create_task(sample()), asyncio.create_task(stop_later())]
    try:
        await pipeline.run()
    finally:
        for task in tasks:
            task.cancel()


def profile(locations: Sequence[Location], model_path: Path, spec: ModelSpec,
            options: PipelineOptions, *, seconds: float) -> dict[str, Any]:
    """Run ``locations`` (files, or camera URLs: connected once first, as ``vidpipe run``
    does) for ``seconds`` and measure each stage against the slowest."""
    metrics = PipelineMetrics()
    sink = LatencySink()
    ids = stream_ids(locations)
    with ExitStack() as stack:
        sources = open_sources(locations, ids, stack, metrics)
        pipeline = build_pipeline(locations, ids, model_path, spec, [sink], metrics, options,
                                  open_source=lambda _, sid: sources[sid])
        occupancy: dict[str, list[float]] = defaultdict(list)
        cpu0, t0 = time.process_time(), time.monotonic()
        asyncio.run(_run_for(pipeline, seconds, occupancy))
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    frames = len(sink.samples)
    stages: list[dict[str, Any]] = []
    for s in metrics.stage_summaries(wall):
        per_frame = metrics.stage_work[s.stage].total / frames if frames else float("nan")
        stages.append({"stage": s.stage, "threads": s.threads, "busy": s.busy,
                       "ms_per_frame": per_frame * 1000,
                       "ceiling_fps": s.threads / per_frame if per_frame > 0 else float("inf")})
    slowest = min(stages, key=lambda s: s["ceiling_fps"])
    threads = pipeline.plan.threads if pipeline.plan is not None else None
    fps = frames / wall if wall > 0 else 0.0
    return {
        "frames": frames, "wall_s": wall, "fps": fps, "cpu_util": cpu / (wall * CORES),
        "stages": stages,
        "queue_occupancy": {k: sum(v) / len(v) for k, v in occupancy.items() if v},
        "bottleneck": slowest["stage"], "ceiling_fps": slowest["ceiling_fps"],
        "efficiency": fps / slowest["ceiling_fps"], "batch_size": options.batch_size,
        "threads": asdict(threads) if threads is not None else None,
        "advice": advice(stages, slowest, cpu / (wall * CORES), options, threads),
    }


def advice(stages: list[dict[str, Any]], slowest: dict[str, Any], cpu_util: float,
           options: PipelineOptions, threads: ThreadPlan | None = None) -> list[str]:
    """Concrete next steps, from the busy fractions and the bottleneck."""
    busy = {s["stage"]: s["busy"] for s in stages}
    summary = ", ".join(f"{k} {v:.0%}" for k, v in busy.items())
    tips = [f"{slowest['stage']} is the bottleneck ({summary} busy)."]
    name = slowest["stage"]
    if name == "infer":
        tips.append("Quantize the model to INT8 (vidpipe model optimize), prune it, or use a "
                    f"smaller input; with several streams raise --batch-size (now "
                    f"{options.batch_size}).")
    elif name == "decode":
        decoders = threads.decode if threads is not None else 1
        more = (f"give FFmpeg more threads (--decode-threads {decoders + 1}; now {decoders}), "
                if 0 < decoders < CORES else "")
        tips.append(f"Decode fewer pixels (a lower-resolution stream), {more}or decode on a "
                    "GPU (NVDEC).")
    elif name == "preprocess":
        tips.append("Preprocessing is resize + normalise: a model with a smaller input, or "
                    "preprocessing on a GPU (CV-CUDA), takes it off the CPU.")
    elif name in ("sink", "postprocess"):
        tips.append("Writing results is the limit: drop --annotate, or write fewer outputs.")
    if cpu_util > 0.9:
        tips.append(f"All {CORES} cores are busy ({cpu_util:.0%}): the stages compete for CPU, "
                    "so the ceiling assumes cores you do not have; fewer --infer-threads may "
                    "help a decode-heavy pipeline.")
    return tips
