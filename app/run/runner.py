"""A pipeline run over files and cameras: progress, Prometheus, signals.

``run_files`` (called by ``app.run.request`` with the run a user asked for) opens everything
before the first frame (a file, a camera's first connection, the model: bad input fails
fast, exit 2), runs, and commits the outputs (``app.run.outputs``: a failed run leaves none
behind). A camera (``rtsp://``) runs with the live rules and reconnects until Ctrl-C or
SIGTERM, which drain; a file they stop before its end is named in ``summary.json``
(``"interrupted"``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from app.outputs.config import EventsConfig
from app.run.outputs import OutputFolder, RunOutputs
from app.run.sources import Location, open_record, open_sources, start_records, stream_ids
from models.spec import ModelSpec
from pipelines.build import build_pipeline
from pipelines.cuda import parse_device
from pipelines.errors import ConfigError
from pipelines.events.ring import RecordingSource
from pipelines.gpu_metrics import GpuSampler, gpu_sampler_for
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.sources.media import picture_size

log = logging.getLogger(__name__)


def run_files(paths: Sequence[Location], model_path: Path, spec: ModelSpec, out: Path,
              options: PipelineOptions, *, annotate: bool = False,
              metrics_port: int | None = None, live: bool = False,
              on_progress: Callable[[int, int | None], None] | None = None,
              events: EventsConfig | None = None,
              records: dict[str, Location] | None = None, heatmap: bool = False,
              shadow: tuple[Path, ModelSpec, float] | None = None,
              every_line: bool = False) -> tuple[PipelineMetrics, Pipeline, RunOutputs]:
    """``events``: where the tracked streams' events go besides OUT/events.jsonl, and
    their snapshots and clips (default: the file only); ``records``: a stream's recorded
    input (role record: its clips, never decoded), by stream id; ``heatmap``: a PNG of where
    each tracked stream's objects were; ``shadow``: a candidate model (file, card, share of
    the frames) compared with the run's; ``every_line``: a line in detections.jsonl for
    every skipped frame, not one for each quiet stretch (``pipelines.sinks.quiet``)."""
    ids = stream_ids(paths)
    metrics = PipelineMetrics(CollectorRegistry())
    parse_device(options.device)  # a known device string, or DeviceError naming them
    folder = OutputFolder(out, spec, ids, model_path)
    with ExitStack() as stack:
        try:
            sources = open_sources(paths, ids, stack, metrics, live=live)
            info = {sid: (s.fps, s.frame_count) for sid, s in sources.items()}
            for sid, source in sources.items():  # files and cameras (connected): sizes known
                if options.analytics is not None and (size := picture_size(source)):
                    options.analytics.check_inside(size, sid)
            if heatmap:
                folder.heatmaps = ({sid: Path(p) for sid, p in zip(ids, paths, strict=True)
                                    if Path(str(p)).is_file()},
                                   {sid: picture_size(s) for sid, s in sources.items()})
            gpu = _observe(stack, metrics, options, metrics_port)
            folder.open_sinks(info, annotate, options.analytics, every_line)
            if shadow is not None:
                folder.open_shadow(*shadow)
            rings = {} if options.analytics is None or not options.analytics.active else \
                folder.open_events(events or EventsConfig(snapshots=False), metrics, options,
                                   info)
            recorders = {sid: open_record(where, sid, stack, live=live)
                         for sid, where in (records or {}).items() if sid in rings}
            for sid, ring in rings.items():  # the stream's own packets, or its record input's
                if sid not in recorders:
                    sources[sid] = RecordingSource(sources[sid], ring)
            pipeline = build_pipeline(paths, ids, model_path, spec, folder.sinks, metrics,
                                      options, open_source=lambda _, sid: sources[sid])
            start_records(pipeline, recorders, rings, stack)
            counts = [count for _, count in info.values()]
            total = None if None in counts else sum(c for c in counts if c is not None)
            stopped_by = asyncio.run(_run(pipeline, _progress(metrics, total, on_progress),
                                          gpu))
            unfinished = [] if stopped_by is None else _unfinished(metrics, info)
            return metrics, pipeline, folder.commit(metrics, pipeline, stopped_by, unfinished,
                                                    gpu)
        except BaseException:
            folder.discard()
            raise


def _observe(stack: ExitStack, metrics: PipelineMetrics, options: PipelineOptions,
             metrics_port: int | None) -> GpuSampler | None:
    """Prometheus on ``metrics_port`` while the run lasts, and the GPU's gauges (NVML) on a
    CUDA device; closed with ``stack``."""
    if metrics_port is not None:
        stack.callback(_serve_metrics(metrics.registry, metrics_port).shutdown)
    gpu = gpu_sampler_for(options.device, metrics.registry)
    if gpu is not None:
        stack.enter_context(gpu)
    return gpu


def _serve_metrics(registry: CollectorRegistry, port: int) -> Any:
    try:
        server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as e:
        raise ConfigError(f"--metrics-port {port}: cannot listen ({e.strerror})") from e
    log.info("Prometheus metrics on http://127.0.0.1:%d/metrics", port)
    return server


def _progress(metrics: PipelineMetrics, total: int | None,
              on_progress: Callable[[int, int | None], None] | None) -> Callable[[], None] | None:
    if on_progress is None:
        return None

    def report() -> None:
        done = sum(sum(counts.values()) for counts in metrics.outcomes.values())
        on_progress(done, total)

    return report


async def _run(pipeline: Pipeline, tick: Callable[[], None] | None,
               gpu: GpuSampler | None = None) -> str | None:
    """Run to the end; Ctrl-C (or SIGTERM) drains the frames already read, a second one stops
    at once. The name of the signal that stopped it, or None."""
    loop = asyncio.get_running_loop()
    stopped_by: str | None = None

    def on_signal(name: str) -> None:
        nonlocal stopped_by
        if stopped_by is not None:  # a second signal: stop now
            loop.create_task(pipeline.stop(drain=False))
            return
        stopped_by = name
        log.warning("interrupted (%s): finishing the frames already read (Ctrl-C again to "
                    "abort)", name)
        loop.create_task(pipeline.stop(drain=True))

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    ticker = loop.create_task(_tick(tick)) if tick else None
    sampling = loop.create_task(gpu.poll()) if gpu is not None else None
    try:
        await pipeline.run()
    finally:
        if sampling is not None:
            sampling.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if ticker is not None and tick is not None:
            ticker.cancel()
            tick()
    return stopped_by


def _unfinished(metrics: PipelineMetrics,
                info: dict[str, tuple[float, int | None]]) -> list[tuple[str, int, int]]:
    """The files that had frames left when the run was stopped (cameras have no end)."""
    left = []
    for sid, (_, declared) in info.items():
        counted = sum(metrics.outcomes[sid].values())
        if declared is not None and counted < declared:
            left.append((sid, counted, declared))
    return left


async def _tick(tick: Callable[[], None]) -> None:
    while True:
        tick()
        await asyncio.sleep(0.25)


