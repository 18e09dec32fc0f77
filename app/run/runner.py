"""A pipeline run over files and cameras: outputs, progress, Prometheus, signals.

``run_files`` (called by ``app.run.request`` with the run a user asked for) opens everything
before the first frame (a file, a camera's first connection, the model: bad
input fails fast, exit 2), writes outputs atomically (a failed run leaves none behind), and
returns the run's summary. A camera (``rtsp://``) runs with the live rules and reconnects
until Ctrl-C or SIGTERM, which drain; a file they stop before its end is named in
``summary.json`` (``"interrupted"``), and hidden ``.partial`` files a killed run left are
removed when the next run starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from app.outputs.config import EventsConfig
from app.run.events import RunEvents
from app.run.summary import summarise
from models.spec import ModelSpec
from pipelines.build import build_pipeline
from pipelines.cuda import parse_device
from pipelines.errors import ConfigError
from pipelines.events.ring import RecordingSource
from pipelines.gpu_metrics import GpuSampler, gpu_sampler_for
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.jsonl import JsonlSink
from pipelines.sinks.stage import Sink
from pipelines.sinks.video import AnnotatedVideoSink
from pipelines.sources.file import FileSource
from pipelines.sources.paced import PacedFileSource
from pipelines.sources.rtsp import RtspSource

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOutputs:
    detections: Path
    summary: Path
    annotated: list[Path]
    # files a signal stopped before their end: (stream, frames counted, frames declared)
    unfinished: list[tuple[str, int, int]] = field(default_factory=list)
    events: Path | None = None  # events.jsonl, where the streams have analytics


Location = str | Path  # a video file, or a camera's rtsp:// URL


def is_url(location: Location) -> bool:
    return "://" in str(location)


def _base_id(location: Location) -> str:
    """A file's stem; a camera URL's last path segment, else its host (never its password)."""
    if not is_url(location):
        return Path(location).stem
    rest = str(location).split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    host, _, path = rest.rpartition("@")[2].partition("/")
    name = path.rstrip("/").rpartition("/")[2] or host.partition(":")[0]
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)


def stream_ids(locations: Sequence[Location]) -> list[str]:
    """One id per source from its file name or camera path, made unique (clip, clip-2, ...)."""
    ids: list[str] = []
    for location in locations:
        base = _base_id(location) or "stream"
        candidate, n = base, 1
        while candidate in ids:
            n += 1
            candidate = f"{base}-{n}"
        ids.append(candidate)
    return ids


def open_sources(locations: Sequence[Location], ids: Sequence[str], stack: ExitStack,
                 metrics: PipelineMetrics, *, live: bool = False) -> dict[str, Any]:
    """Each source opened once, for the whole run (closed by ``stack``, if the pipeline has
    not closed it already): a file (played as a camera with ``live``), or a camera, connected
    once now. SourceError for a bad file or a camera that cannot be reached."""
    sources: dict[str, Any] = {}
    for location, sid in zip(locations, ids, strict=True):
        if is_url(location):
            on_state, on_reconnect = _camera_callbacks(metrics, sid)
            camera = stack.enter_context(RtspSource(str(location), sid, on_state=on_state,
                                                    on_reconnect=on_reconnect))
            camera.connect()
            sources[sid] = camera
        else:
            kind = PacedFileSource if live else FileSource
            sources[sid] = stack.enter_context(kind(Path(location), sid))
        log.info("%s", sources[sid].describe())
    return sources


def _camera_callbacks(metrics: PipelineMetrics, sid: str,
                      ) -> tuple[Callable[[str], None], Callable[[], None]]:
    """What a camera reports, into ``vidpipe_stream_up`` and the reconnect counter."""
    def on_state(state: str) -> None:
        metrics.set_stream_up(sid, state == "up")

    def on_reconnect() -> None:
        metrics.count_reconnect(sid)

    return on_state, on_reconnect


def run_files(paths: Sequence[Location], model_path: Path, spec: ModelSpec, out: Path,
              options: PipelineOptions, *, annotate: bool = False,
              metrics_port: int | None = None, live: bool = False,
              on_progress: Callable[[int, int | None], None] | None = None,
              events: EventsConfig | None = None,
              ) -> tuple[PipelineMetrics, Pipeline, RunOutputs]:
    """``events``: where the tracked streams' events go besides OUT/events.jsonl, and
    their snapshots and clips (default: the file only)."""
    ids = stream_ids(paths)
    registry = CollectorRegistry()
    metrics = PipelineMetrics(registry)
    parse_device(options.device)  # a known device string, or DeviceError naming them
    created_out = not out.exists()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create the folder ({e.strerror})") from e
    _remove_stale_partials(out)
    sinks: list[Sink] = []
    run_events: RunEvents | None = None
    committed = False
    with ExitStack() as stack:
        try:
            sources = open_sources(paths, ids, stack, metrics, live=live)
            info = {sid: (s.fps, s.frame_count) for sid, s in sources.items()}
            if metrics_port is not None:
                stack.callback(_serve_metrics(registry, metrics_port).shutdown)
            gpu = gpu_sampler_for(options.device, registry)
            if gpu is not None:
                stack.enter_context(gpu)
            sinks.extend(_open_sinks(out, spec, ids, info, annotate))
            if options.analytics is not None and options.analytics.active:
                run_events = _open_events(out, spec, events or EventsConfig(snapshots=False),
                                          metrics, options, info)
                sinks.append(run_events.sink)
                for sid in ids:
                    if (ring := run_events.ring(sid)) is not None:
                        sources[sid] = RecordingSource(sources[sid], ring)
            pipeline = build_pipeline(paths, ids, model_path, spec, sinks, metrics, options,
                                      open_source=lambda _, sid: sources[sid])
            counts = [count for _, count in info.values()]
            total = None if None in counts else sum(c for c in counts if c is not None)
            stopped_by = asyncio.run(_run(pipeline, _progress(metrics, total, on_progress),
                                          gpu))
            unfinished = [] if stopped_by is None else _unfinished(metrics, info)
            outputs = _commit(sinks, out, metrics, pipeline, ids, stopped_by, unfinished,
                              run_events, gpu)
            committed = True
            return metrics, pipeline, outputs
        finally:
            if not committed:
                for sink in sinks:
                    sink.close(commit=False)
                if run_events is not None:
                    run_events.close(commit=False)
                if created_out and out.is_dir() and not any(out.iterdir()):
                    out.rmdir()


def _serve_metrics(registry: CollectorRegistry, port: int) -> Any:
    try:
        server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as e:
        raise ConfigError(f"--metrics-port {port}: cannot listen ({e.strerror})") from e
    log.info("Prometheus metrics on http://127.0.0.1:%d/metrics", port)
    return server


def _open_events(out: Path, spec: ModelSpec, config: EventsConfig, metrics: PipelineMetrics,
                 options: PipelineOptions,
                 info: dict[str, tuple[float, int | None]]) -> RunEvents:
    assert options.analytics is not None and options.analytics.track is not None
    lost_s = options.analytics.track.lost_frames / 30.0  # the tracker's frames are at 30 fps
    return RunEvents(out, spec, config, metrics, fps_of=lambda sid: info[sid][0] or 30.0,
                     end_s_of=lambda sid: lost_s)


def _open_sinks(out: Path, spec: ModelSpec, ids: list[str],
                info: dict[str, tuple[float, int | None]], annotate: bool) -> list[Sink]:
    sinks: list[Sink] = [JsonlSink(out / "detections.jsonl", spec)]
    if annotate:
        def path_for(sid: str) -> Path:
            return out / ("annotated.mp4" if len(ids) == 1 else f"annotated-{sid}.mp4")

        sinks.append(AnnotatedVideoSink(path_for, lambda sid: info[sid][0], spec))
    return sinks


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


def _remove_stale_partials(out: Path) -> None:
    """Remove the hidden ``.NAME.partial`` files a killed run left in ``out``: beside an
    older run's finished files they would look like part of it."""
    if not out.is_dir():
        return
    for stale in out.glob(".*.partial"):
        log.warning("removed %s, left by a run that was killed before it finished", stale)
        stale.unlink(missing_ok=True)


async def _tick(tick: Callable[[], None]) -> None:
    while True:
        tick()
        await asyncio.sleep(0.25)


def _commit(sinks: list[Sink], out: Path, metrics: PipelineMetrics, pipeline: Pipeline,
            ids: list[str], stopped_by: str | None, unfinished: list[tuple[str, int, int]],
            run_events: RunEvents | None, gpu: GpuSampler | None = None) -> RunOutputs:
    for sink in sinks:
        if run_events is None or sink is not run_events.sink:
            sink.close(commit=True)
    if run_events is not None:
        run_events.close(commit=True)
    annotated = [p for s in sinks if isinstance(s, AnnotatedVideoSink) for p in s.paths]
    events = run_events.path if run_events is not None else None
    summary = out / "summary.json"
    atomic = AtomicPath(summary)
    report = summarise(metrics, pipeline, ids)
    if gpu is not None:
        report["gpu"] = gpu.summary()  # NVML, sampled every 0.5 s while it ran
    report["interrupted"] = {"by": stopped_by, "unfinished": {
        sid: {"frames": counted, "declared": declared} for sid, counted, declared in unfinished
    }} if unfinished else False
    atomic.partial.write_text(json.dumps(report, indent=2))
    atomic.commit()
    return RunOutputs(out / "detections.jsonl", summary, annotated, unfinished, events)
