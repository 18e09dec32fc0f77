"""The one builder: options, sources and a model -> a Pipeline, on any device.

Topology: one decode and one preprocess stage per stream, a shared channel where all streams
meet, one inference stage that batches across streams, one postprocess stage and one sink
stage. The stages are the same on every device; ``pipelines.backends`` chooses what they
run on from the device string.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.analytics.stage import AnalyticsStage
from pipelines.analytics.stream import StreamAnalytics
from pipelines.backends import StageBackends, open_backends
from pipelines.channel import Channel, DropPolicy
from pipelines.cuda import parse_device
from pipelines.decode.pyav import ScaleTo
from pipelines.decode.stage import DecodeStage, PacketSource
from pipelines.frame import Batch, Frame, Result
from pipelines.infer.stage import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.postprocess.stage import PostprocessStage
from pipelines.preprocess.stage import PreprocessStage
from pipelines.sinks.stage import Sink, SinkStage
from pipelines.sources.file import FileSource
from pipelines.stage import Stage

log = logging.getLogger(__name__)


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
        metrics.frame_outcome(frame.stream_id, cause, 1 + len(frame.riders))


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
    opened: list[Any] = []
    try:
        sources = []
        for location, sid in zip(locations, stream_ids, strict=True):
            sources.append(open_source(location, sid))
            opened.append(sources[-1])
        backends = open_backends(model_path, spec, sources, metrics, options,
                                 decoder_scale(spec, sinks, options))
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise
    assert backends.plan.batch_size is not None  # fitted by open_backends
    return wire_pipeline(sources, backends, spec, sinks, metrics, options,
                         backends.plan.batch_size)


def decoder_scale(spec: ModelSpec, sinks: Sequence[Sink],
                  options: PipelineOptions) -> ScaleTo | None:
    """The size CPU decoders shrink pictures to: the model's letterbox, with the card's filter
    (the reference's pixels), unless a sink draws on the full pictures (annotated video, the
    live feed) or ``options`` turn it off. ``ffmpeg_resize`` shrinks with FFmpeg's scaler
    instead, which changes the model's input: only on request, and said in the log."""
    if not options.decode_scaled or any(s.wants_images for s in sinks):
        return None
    if not options.ffmpeg_resize:
        return ScaleTo.for_input(spec.input)
    log.warning("resizing in FFmpeg's scaler (--ffmpeg-resize): faster, but its %s filter is "
                "not OpenCV's, so the model sees other pixels than its card's preprocessing "
                "gives; `vidpipe model check MODEL --video CLIP --ffmpeg-resize` measures what "
                "it changes", spec.input.interpolation)
    return ScaleTo.for_input(spec.input, "ffmpeg")


def counted_channel(metrics: PipelineMetrics, name: str, capacity: int,
                    policy: DropPolicy = "block", producers: int = 1) -> Channel[Any]:
    """A channel whose drops count against their streams, its depth exported as ``name``."""
    channel: Channel[Any] = Channel(name, capacity, policy, producers=producers,
                                    on_drop=lambda item, cause: account_drop(metrics, item,
                                                                             cause))
    metrics.register_channel(name, channel.capacity, channel.__len__)
    return channel


def wire_pipeline(sources: Sequence[PacketSource], backends: StageBackends, spec: ModelSpec,
                  sinks: Sequence[Sink], metrics: PipelineMetrics, options: PipelineOptions,
                  batch_size: int) -> Pipeline:
    """Stages and channels around already opened parts (tests pass fakes here)."""
    def channel(name: str, policy: DropPolicy = "block", producers: int = 1) -> Channel[Any]:
        if options.name:
            name = f"{options.name}/{name}"
        channels.append(counted_channel(metrics, name, options.capacity, policy, producers))
        return channels[-1]

    channels: list[Channel[Any]] = []
    stages: list[Stage[Any, Any]] = []
    keep_images = any(s.wants_images for s in sinks)
    analytics = options.analytics if options.analytics and options.analytics.active else None
    detect_every = analytics.detect_every if analytics else 1
    # Live sources only: the newest prepared frame wins at inference too, so a detector slower
    # than the camera works on the latest picture instead of one that queued behind it.
    live = all(source.live for source in sources)
    prepared = channel("prepared", "drop_oldest" if live else "block", producers=len(sources))
    for source in sources:
        policy = options.policy or ("drop_oldest" if source.live else "block")
        # Named by stream where one pipeline serves several; a named pipeline is one stream's.
        decoded = channel("decoded" if options.name else f"decoded/{source.stream_id}", policy)
        stages.append(DecodeStage(source, backends.decoder_for, decoded, metrics,
                                  frame_limit=options.frame_limit,
                                  max_lag_s=options.max_lag_ms / 1000.0,
                                  detect_every=detect_every, rider_images=keep_images))
        stages.append(PreprocessStage(source.stream_id, backends.preprocessor_for(), decoded,
                                      prepared, metrics))
    inferred = channel("inferred")
    results = channel("results")
    stages.append(InferStage(backends.runtime, prepared, inferred, metrics,
                             batch_size=batch_size, batch_timeout_ms=options.batch_timeout_ms,
                             max_age_s=options.max_age_s,
                             workers=backends.plan.threads.infer_workers,
                             queued=0 if live else 1, input_tap=options.input_tap))
    if analytics is None:
        stages.append(PostprocessStage(backends.postprocessor, inferred, results, metrics,
                                       keep_images=keep_images))
    else:
        decoded_boxes = channel("detected")
        stages.append(PostprocessStage(backends.postprocessor, inferred, decoded_boxes,
                                       metrics, keep_images=keep_images))
        per_stream = {s.stream_id: StreamAnalytics(s.stream_id, analytics, spec,
                                                   float(getattr(s, "fps", 0.0) or 30.0),
                                                   metrics) for s in sources}
        stages.append(AnalyticsStage(per_stream, decoded_boxes, results, metrics,
                                     keep_images=keep_images))
    stages.append(SinkStage(sinks, spec, results, metrics))
    return Pipeline(stages, channels, metrics, [s.stream_id for s in sources],
                    plan=backends.plan)
