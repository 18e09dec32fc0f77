"""A run's pipeline: options, sources and a model -> a Pipeline, on any device.

Topology: one decode stage per stream, a channel where all streams meet (a queue each:
``wiring.frames_channel``), then the detector's stages (``pipelines.wiring``, the same for
the service): one inference stage that batches across streams and prepares each call's
frames as it takes them, postprocessing, analytics where a stream has any, one sink stage.
The stages are the same on every device; ``pipelines.backends`` chooses what they run on
from the device string.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.analytics.stream import StreamAnalytics
from pipelines.backends import StageBackends, open_backends
from pipelines.channel import Channel
from pipelines.classify.model import Classifiers
from pipelines.cuda import parse_device
from pipelines.decode.pyav import ScaleTo
from pipelines.decode.stage import PacketSource
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.shared.fair import FairChannel
from pipelines.sinks.pictures import keep_all, keep_none
from pipelines.sinks.stage import Sink
from pipelines.sources.file import FileSource
from pipelines.stage import Stage
from pipelines.wiring import (
    counted_channel,
    decode_stage,
    detector_stages,
    frames_channel,
    settle,
)

log = logging.getLogger(__name__)


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
    parse_device(options.device)  # a known device string, or DeviceError naming them
    with ExitStack() as opened:  # what is opened here is closed again if the build fails
        sources = []
        for location, sid in zip(locations, stream_ids, strict=True):
            sources.append(open_source(location, sid))
            opened.callback(sources[-1].close)
        classifiers = open_classifiers(options)
        if classifiers is not None:
            opened.callback(classifiers.close)
        backends = open_backends(model_path, spec, sources, metrics, options,
                                 decoder_scale(spec, sinks, options))
        opened.pop_all()  # built: the pipeline's stages own the sources and the models
    assert backends.plan.batch_size is not None  # fitted by open_backends
    return wire_pipeline(sources, backends, spec, sinks, metrics, options,
                         backends.plan.batch_size, classifiers)


def open_classifiers(options: PipelineOptions) -> Classifiers | None:
    """Every classifier the streams' analytics name, loaded once (None: there are none)."""
    analytics = options.analytics
    if analytics is None or not analytics.classifiers:
        return None
    classifiers = Classifiers()
    try:
        for config in analytics.classifiers:
            classifiers.get(config)
    except BaseException:
        classifiers.close()
        raise
    return classifiers


def full_pictures(sinks: Sequence[Sink], options: PipelineOptions) -> bool:
    """Whether results keep the decoded pictures whole: a sink draws on them, or
    classifiers crop the tracks' boxes from them."""
    analytics = options.analytics
    return any(s.wants_images for s in sinks) or bool(analytics and analytics.classifiers)


def decoder_scale(spec: ModelSpec, sinks: Sequence[Sink],
                  options: PipelineOptions) -> ScaleTo | None:
    """The size CPU decoders shrink pictures to: the model's letterbox, with the card's filter
    (the reference's pixels), unless a sink draws on the full pictures (annotated video, the
    live feed), classifiers crop from them, or ``options`` turn it off. ``ffmpeg_resize``
    shrinks with FFmpeg's scaler instead, which changes the model's input: only on request,
    and said in the log."""
    if not options.decode_scaled or full_pictures(sinks, options):
        return None
    if not options.ffmpeg_resize:
        return ScaleTo.for_input(spec.input)
    log.warning("resizing in FFmpeg's scaler (--ffmpeg-resize): faster, but its %s filter is "
                "not OpenCV's, so the model sees other pixels than its card's preprocessing "
                "gives; `vidpipe model check MODEL --video CLIP --ffmpeg-resize` measures what "
                "it changes", spec.input.interpolation)
    return ScaleTo.for_input(spec.input, "ffmpeg")


def wire_pipeline(sources: Sequence[PacketSource], backends: StageBackends, spec: ModelSpec,
                  sinks: Sequence[Sink], metrics: PipelineMetrics, options: PipelineOptions,
                  batch_size: int, classifiers: Classifiers | None = None) -> Pipeline:
    """Stages and channels around already opened parts (tests pass fakes here); the
    analytics stage owns ``classifiers``."""
    def channel(name: str) -> Channel[Any]:
        made = counted_channel(metrics, f"{options.name}/{name}" if options.name else name,
                               options.capacity)
        channels.append(made)
        return made

    channels: list[Channel[Any] | FairChannel[Any]] = []
    stages: list[Stage[Any, Any]] = []
    keep_images = full_pictures(sinks, options)
    analytics = options.analytics if options.analytics and options.analytics.active else None
    # the streams meet in one queue each: a live stream keeps its own newest frames
    # (drop_oldest evicts only its oldest), a file's decoder waits for its own room
    decoded = frames_channel(metrics, f"{options.name}/decoded" if options.name else "decoded",
                             options.capacity, ends_with_streams=True)
    channels.append(decoded)
    per_stream = None if analytics is None else {
        s.stream_id: StreamAnalytics(s.stream_id, analytics, spec,
                                     float(getattr(s, "fps", 0.0) or 30.0), metrics,
                                     classifiers)
        for s in sources}
    for source in sources:
        policy = options.policy or ("drop_oldest" if source.live else "block")
        tracked = None if per_stream is None else per_stream[source.stream_id]
        stages.append(decode_stage(source, backends, decoded.attach(source.stream_id, policy),
                                   metrics, options, analytics=tracked,
                                   rider_images=keep_all if keep_images else keep_none))
    metrics.register_channel(decoded.name, decoded.capacity * len(sources), decoded.__len__)
    # inference prepares the frames of each call as it takes them, as a shared detector's does
    stages += detector_stages(decoded, backends, spec, metrics, options, channel=channel,
                              sinks=sinks, batch_size=batch_size,
                              infer_calls=backends.plan.threads.infer_workers,
                              analytics=per_stream, keep_images=keep_images,
                              queued=0 if all(s.live for s in sources) else 1,
                              classifiers=classifiers, prepare=True,
                              on_written=functools.partial(settle, decoded),
                              keeps_picture=keep_all if keep_images else keep_none)
    return Pipeline(stages, channels, metrics, [s.stream_id for s in sources],
                    plan=backends.plan)
