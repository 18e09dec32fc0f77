"""One measured run: the vidpipe pipeline over files, counted by a sink that keeps no output.

Figures are taken the same way for every variant: frames emitted, wall time from start to the
last result, process CPU time, per-frame capture-to-result latency, per-stage busy fractions.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.run.sources import stream_ids
from models.spec import ModelSpec
from pipelines.build import build_pipeline, open_file
from pipelines.frame import Result
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.sources.file import FileSource

CORES = os.cpu_count() or 1


@dataclass(slots=True)
class Measurement:
    variant: str
    frames: int
    wall_s: float
    cpu_s: float
    latencies_s: np.ndarray
    busy: dict[str, float] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)
    peak_rss_delta: int = 0  # bytes above the RSS before the run
    threads: dict[str, Any] | None = None  # the pipeline's ThreadPlan (None: the hand loop)
    runtime: dict[str, Any] | None = None  # the CPU runtime the pipeline took, and why

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_util(self) -> float:
        """Share of all cores the process used, 0..1."""
        return self.cpu_s / (self.wall_s * CORES) if self.wall_s > 0 else 0.0

    def latency_ms(self, q: float) -> float:
        if self.latencies_s.size == 0:
            return float("nan")
        return float(np.quantile(self.latencies_s, q) * 1000)


class LatencySink:
    """Keeps (time of result, capture-to-result latency) per frame, writes nothing."""

    wants_images = False

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    def write(self, result: Result) -> None:
        now = time.monotonic()
        self.samples.append((now, now - result.frame.captured_at))

    def close(self, commit: bool = True) -> None:
        pass


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler:
    """Peak resident memory while a block runs, sampled every 50 ms."""

    def __init__(self) -> None:
        self.baseline = rss_bytes()
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def measure_pipeline(variant: str, paths: Sequence[Path], model_path: Path, spec: ModelSpec,
                     options: PipelineOptions, *,
                     open_source: Callable[[Path, str], FileSource] = open_file,
                     sink: LatencySink | None = None) -> Measurement:
    metrics = PipelineMetrics()
    sink = sink or LatencySink()
    ids = stream_ids(paths)
    with RssSampler() as rss:
        pipeline = build_pipeline(paths, ids, model_path, spec, [sink], metrics, options,
                                  open_source=open_source)
        cpu0, t0 = time.process_time(), time.monotonic()
        asyncio.run(pipeline.run())
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    plan = pipeline.plan
    drops: dict[str, int] = {}
    for sid in ids:
        for outcome, count in metrics.outcomes[sid].items():
            if outcome != "processed":
                drops[outcome] = drops.get(outcome, 0) + count
    return Measurement(
        variant, len(sink.samples), wall, cpu, np.array([lat for _, lat in sink.samples]),
        {s.stage: s.busy for s in metrics.stage_summaries(wall)}, drops, rss.peak - rss.baseline,
        asdict(plan.threads) if plan is not None else None,
        plan.runtime.as_dict() if plan is not None and plan.runtime is not None else None,
    )
