"""The one place that turns options into concrete stages, channels and backends.

Topology, per DESIGN: one decode and one preprocess stage per stream, a shared channel where
all streams meet, one inference stage that batches across streams, one postprocess stage and
one sink stage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.runtime.base import Backend
from models.runtime.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.channel import Channel, DropPolicy
from pipelines.cuda import parse_device
from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.stage import DecodeStage, PacketSource, PictureDecoder
from pipelines.errors import ConfigError
from pipelines.frame import Batch, Frame, Result
from pipelines.infer import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.pipeline import Pipeline
from pipelines.postprocess.stage import PostprocessStage
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.preprocess.stage import PreprocessStage
from pipelines.sinks.stage import Sink, SinkStage
from pipelines.sources.file import FileSource
from pipelines.stage import Stage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    device: str = "cpu"
    batch_size: int = 4
    batch_timeout_ms: float = 10.0
    policy: DropPolicy | None = None  # None: block for files, drop_oldest for live sources
    capacity: int = 8  # items per channel
    infer_threads: int | None = None  # None: chosen from the cores (see choose_threads)
    decode_threads: int | None = None
    max_age_s: float | None = None  # live: drop frames older than this at inference
    frame_limit: int | None = None  # stop each stream after this many frames
    name: str = ""  # prefix of channel names, where several pipelines share one registry

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 64:
            raise ConfigError(f"batch size must be 1..64, got {self.batch_size}")
        if self.batch_timeout_ms < 0:
            raise ConfigError(f"batch timeout must be >= 0 ms, got {self.batch_timeout_ms}")
        if self.capacity < 1:
            raise ConfigError(f"channel capacity must be >= 1, got {self.capacity}")
        for name in ("infer_threads", "decode_threads"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class ThreadPlan:
    infer: int
    decode: int
    reason: str


def choose_threads(options: PipelineOptions, cores: int | None = None) -> ThreadPlan:
    """How many threads ONNX Runtime and each FFmpeg decoder get.

    Decode, preprocess and inference share the same cores. Each decoder gets one thread (one
    stream's decode is light next to a detector). ONNX Runtime gets every core: its threads do
    not spin (see OnnxRuntimeBackend), so they yield the cores to decoding between calls. On the
    2-core machine with the shipped model on the 720p demo clip this gave 35.6 fps against 30.4
    with one inference thread. A model fast enough to make decoding the bottleneck wants fewer
    inference threads: ``--infer-threads``.
    """
    cores = cores or os.cpu_count() or 1
    infer = options.infer_threads if options.infer_threads is not None else cores
    decode = options.decode_threads if options.decode_threads is not None else 1
    chosen = "given" if options.infer_threads is not None else f"{cores} cores, all to inference"
    return ThreadPlan(infer, decode, chosen)


def check_device(device: str) -> None:
    """A known device string, or DeviceError naming the allowed ones."""
    parse_device(device)


def account_drop(metrics: PipelineMetrics, item: Any, cause: str) -> None:
    """Count a dropped channel item against the stream of every frame it carries."""
    if isinstance(item, Batch):
        frames = item.frames
    elif isinstance(item, Result):
        frames = [item.frame]
    elif isinstance(item, Frame):
        frames = [item]
    else:
        raise TypeError(f"cannot account for a dropped {type(item).__name__}")
    for frame in frames:
        metrics.frame_outcome(frame.stream_id, cause)


def open_file(location: str | Path, stream_id: str) -> FileSource:
    return FileSource(Path(location), stream_id)


def build_pipeline(locations: Sequence[str | Path], stream_ids: Sequence[str], model_path: Path,
                   spec: ModelSpec, sinks: Sequence[Sink], metrics: PipelineMetrics,
                   options: PipelineOptions, *,
                   open_source: Callable[[Any, str], Any] = open_file) -> Pipeline:
    """A pipeline over the given sources (files by default; ``open_source`` opens anything with
    a PyAV video stream: a paced file, an RTSP camera). Sources and the model are opened here,
    so a bad file or a mismatched model fails before any stage starts; whatever was opened is
    closed on failure."""
    check_device(options.device)
    if parse_device(options.device).is_cuda:
        from pipelines.build_gpu import build_gpu_pipeline  # imports this module: keep lazy

        return build_gpu_pipeline(locations, stream_ids, model_path, spec, sinks, metrics,
                                  options, open_source=open_source)
    plan = choose_threads(options)
    log.info("threads: inference %d, decode %d per stream (%s)", plan.infer, plan.decode,
             plan.reason)
    opened: list[Any] = []
    try:
        sources = []
        for location, sid in zip(locations, stream_ids, strict=True):
            sources.append(open_source(location, sid))
            opened.append(sources[-1])
        backend = OnnxRuntimeBackend(model_path, threads=plan.infer)
        opened.append(backend)
        input_info = check_compatible(spec, backend.inputs, backend.outputs, model_path)
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise
    batch_size = options.batch_size
    if input_info.fixed_batch is not None and input_info.fixed_batch < batch_size:
        log.warning("%s takes batches of %d only; batch size lowered from %d", model_path.name,
                    input_info.fixed_batch, batch_size)
        batch_size = input_info.fixed_batch
    return wire_pipeline(sources, lambda s: PyAVDecoder(s.video, threads=plan.decode), backend,
                         input_info.name, spec, sinks, metrics, options, batch_size)


def wire_pipeline(sources: Sequence[PacketSource], decoder_for: Callable[[Any], PictureDecoder],
                  backend: Backend, input_name: str, spec: ModelSpec, sinks: Sequence[Sink],
                  metrics: PipelineMetrics, options: PipelineOptions,
                  batch_size: int) -> Pipeline:
    """Stages and channels around already opened parts (tests pass fakes here)."""
    def drop(item: Any, cause: str) -> None:
        account_drop(metrics, item, cause)

    def channel(name: str, policy: DropPolicy = "block", producers: int = 1) -> Channel[Any]:
        if options.name:
            name = f"{options.name}/{name}"
        ch: Channel[Any] = Channel(name, options.capacity, policy, producers=producers,
                                   on_drop=drop)
        metrics.register_channel(name, ch.capacity, ch.__len__)
        channels.append(ch)
        return ch

    channels: list[Channel[Any]] = []
    stages: list[Stage] = []
    prepared = channel("prepared", producers=len(sources))
    for source in sources:
        policy = options.policy or ("drop_oldest" if source.live else "block")
        # Named by stream where one pipeline serves several; a named pipeline is one stream's.
        decoded = channel("decoded" if options.name else f"decoded/{source.stream_id}", policy)
        stages.append(DecodeStage(source, decoder_for, decoded, metrics,
                                  frame_limit=options.frame_limit))
        stages.append(PreprocessStage(source.stream_id, OpenCVPreprocessor(spec.input), decoded,
                                      prepared, metrics))
    inferred = channel("inferred")
    results = channel("results")
    stages.append(InferStage(backend, input_name, prepared, inferred, metrics,
                             batch_size=batch_size, batch_timeout_ms=options.batch_timeout_ms,
                             max_age_s=options.max_age_s))
    keep_images = any(s.wants_images for s in sinks)
    stages.append(PostprocessStage(spec, inferred, results, metrics, keep_images=keep_images))
    stages.append(SinkStage(sinks, spec, results, metrics))
    return Pipeline(stages, channels, metrics, [s.stream_id for s in sources])
