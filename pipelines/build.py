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

from models.errors import ModelError
from models.runtime.base import Backend
from models.runtime.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.channel import Channel, DropPolicy
from pipelines.cuda import parse_device
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
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
from pipelines.threads import (
    StageCosts,
    ThreadPlan,
    measure_feed_ms,
    measure_infer_ms,
    plan_threads,
)

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
    # decode straight to the model's letterbox size when no sink needs the full picture
    decode_scaled: bool = True
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


def choose_threads(options: PipelineOptions, cores: int | None = None,
                   costs: StageCosts | None = None) -> ThreadPlan:
    """How many threads ONNX Runtime and each FFmpeg decoder get: given ones, else from the
    measured stage costs (see ``pipelines.threads``)."""
    return plan_threads(costs, cores or os.cpu_count() or 1,
                        infer_threads=options.infer_threads,
                        decode_threads=options.decode_threads)


def measure_costs(model_path: Path, spec: ModelSpec, sources: Sequence[Any], *,
                  scaled: bool = True) -> StageCosts:
    """Inference per frame on one thread, and decode (``scaled``: to the model's size) +
    preprocess per frame summed over the sources (None if any is live: a camera cannot be
    read ahead)."""
    infer_ms = measure_infer_ms(model_path, spec.input.image_shape, spec.input.dtype)
    feed: float | None = 0.0
    for source in sources:
        path = getattr(source, "path", None)
        cost = (None if source.live or path is None
                else measure_feed_ms(path, spec.input, scaled=scaled))
        feed = None if cost is None or feed is None else feed + cost
    return StageCosts(infer_ms, feed, max(1, len(sources)))


def probe_costs(model_path: Path, spec: ModelSpec, sources: Sequence[Any], *,
                scaled: bool = True) -> StageCosts | None:
    """``measure_costs``, or None when the probe cannot run the model (a model that does not
    match its card fails right after, in ``check_compatible``, with the message that says so)."""
    try:
        return measure_costs(model_path, spec, sources, scaled=scaled)
    except ModelError:
        raise
    except Exception as e:  # ONNX Runtime raises its own untyped errors for a bad feed
        log.warning("could not measure stage costs (%s); threads from the core count",
                    str(e).splitlines()[0][:160])
        return None


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
    opened: list[Any] = []
    try:
        sources = []
        for location, sid in zip(locations, stream_ids, strict=True):
            sources.append(open_source(location, sid))
            opened.append(sources[-1])
        scale = decoder_scale(spec, sinks, options)
        cores = os.cpu_count() or 1
        costs = (probe_costs(model_path, spec, sources, scaled=scale is not None)
                 if options.infer_threads is None and cores > 1 else None)
        plan = choose_threads(options, cores, costs)
        log.info("threads: inference %d x %d at once, decode %d per stream (%s)", plan.infer,
                 plan.infer_workers, plan.decode, plan.reason)
        if scale is not None:
            log.info("decoding straight to the model's letterbox size (input %dx%d): no sink "
                     "needs the full pictures", *scale.input_size)
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
    pipeline = wire_pipeline(sources,
                             lambda s: PyAVDecoder(s.video, threads=plan.decode, scale=scale),
                             backend, input_info.name, spec, sinks, metrics, options, batch_size,
                             infer_workers=plan.infer_workers)
    pipeline.threads = plan
    return pipeline


def decoder_scale(spec: ModelSpec, sinks: Sequence[Sink],
                  options: PipelineOptions) -> ScaleTo | None:
    """The size CPU decoders shrink pictures to: the model's letterbox, unless a sink draws on
    the full pictures (annotated video, the live feed) or ``options`` turn it off."""
    if not options.decode_scaled or any(s.wants_images for s in sinks):
        return None
    return ScaleTo.for_input(spec.input)


def wire_pipeline(sources: Sequence[PacketSource], decoder_for: Callable[[Any], PictureDecoder],
                  backend: Backend, input_name: str, spec: ModelSpec, sinks: Sequence[Sink],
                  metrics: PipelineMetrics, options: PipelineOptions,
                  batch_size: int, *, infer_workers: int = 1) -> Pipeline:
    """Stages and channels around already opened parts (tests pass fakes here);
    ``infer_workers`` batches are inferred at once."""
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
    # Live sources only: the newest prepared frame wins at inference too, so a detector slower
    # than the camera works on the latest picture instead of one that queued behind it.
    live = all(source.live for source in sources)
    prepared = channel("prepared", "drop_oldest" if live else "block", producers=len(sources))
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
                             max_age_s=options.max_age_s, workers=infer_workers,
                             queued=0 if live else 1))
    keep_images = any(s.wants_images for s in sinks)
    stages.append(PostprocessStage(spec, inferred, results, metrics, keep_images=keep_images))
    stages.append(SinkStage(sinks, spec, results, metrics))
    return Pipeline(stages, channels, metrics, [s.stream_id for s in sources])
