"""The stages of a detector, wired one way for ``vidpipe run`` and for the service: a
stream's decode stage (``decode_stage``), and behind the streams inference (batching across
them), postprocessing, the streams' analytics where there are any, and the sink stage
(``detector_stages``), with the channel where the streams meet between them
(``frames_channel``: a queue per stream), whose frames inference prepares as it takes them.
``pipelines.build`` wires a run's streams to it, the shared detector (``pipelines.shared``)
the service's as they come and go. What differs between the two is passed in, so a rule of
these stages is the same for both, and each stage is constructed here alone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from models.spec import ModelSpec
from pipelines.analytics.stage import AnalyticsStage
from pipelines.analytics.stream import StreamAnalytics
from pipelines.backends import StageBackends
from pipelines.channel import Channel, DropPolicy, Input, Output
from pipelines.classify.model import Classifiers
from pipelines.decode.motion import MotionSettings
from pipelines.decode.stage import DecodeStage, PacketSource
from pipelines.frame import Batch, Frame, Result
from pipelines.infer.stage import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.postprocess.stage import PostprocessStage
from pipelines.shared.fair import FairChannel
from pipelines.sinks.pictures import KeepsPicture
from pipelines.sinks.stage import Sink, SinkStage
from pipelines.stage import Stage

ChannelFactory = Callable[[str], Channel[Any]]


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


def carry_skipped(evicted: Any, after: Any) -> Any | None:
    """What a live queue evicts, less the frames the model was never to see (``skipped``:
    keeping them costs nothing): those ride on with ``after``, the item that follows it in
    the queue, before its own riders. Returns what is left to drop, None when nothing is."""
    lead = after if isinstance(after, Frame) else \
        after.frames[0] if isinstance(after, Batch) and len(after) == 1 else None
    if lead is None or lead.stream_id != _frames(evicted)[0].stream_id:
        return evicted
    if isinstance(evicted, Frame) and evicted.skipped:
        lead.riders = [*evicted.riders, dataclasses.replace(evicted, riders=[]), *lead.riders]
        return None
    for frame in _frames(evicted):
        carried = [r for r in frame.riders if r.skipped]
        if carried:
            frame.riders = [r for r in frame.riders if not r.skipped]
            lead.riders = [*carried, *lead.riders]
    return evicted


def _frames(item: Any) -> list[Frame]:
    return item.frames if isinstance(item, Batch) else [item.frame] \
        if isinstance(item, Result) else [item]


def counted_channel(metrics: PipelineMetrics, name: str, capacity: int,
                    policy: DropPolicy = "block", producers: int = 1) -> Channel[Any]:
    """A channel whose drops count against their streams (a skipped frame it evicts rides
    on with the item after it instead), its depth exported as ``name``."""
    channel: Channel[Any] = Channel(name, capacity, policy, producers=producers,
                                    on_drop=lambda item, cause: account_drop(metrics, item,
                                                                             cause),
                                    carry=carry_skipped)
    metrics.register_channel(name, channel.capacity, channel.__len__)
    return channel


def frames_channel(metrics: PipelineMetrics, name: str, capacity: int, *,
                   ends_with_streams: bool) -> FairChannel[Frame | Batch]:
    """The channel between the streams' decoders and inference: a queue of ``capacity``
    per stream, its own drop policy, taken round the streams (``FairChannel``); drops count
    against their streams (a skipped frame it evicts rides on with the stream's next). A
    run's ends with its last stream, a shared detector's when closed. Its depth is exported
    by its owner, who knows how many streams it holds."""
    return FairChannel(name, capacity, _stream_of,
                       on_drop=lambda item, cause: account_drop(metrics, item, cause),
                       frames=_frames_of, carry=carry_skipped,
                       ends_with_streams=ends_with_streams)


def settle(channel: FairChannel[Frame | Batch], results: Sequence[Result]) -> None:
    """Written results settle their frames in the channel they came through (a stream's of
    the call at once)."""
    for stream, count in Counter(r.frame.stream_id for r in results).items():
        channel.settle(stream, count)


def _frames_of(item: Frame | Batch) -> int:
    """The frames an item of the channel stands for: its riders too."""
    frames = [item] if isinstance(item, Frame) else item.frames
    return sum(1 + len(f.riders) for f in frames)


def _stream_of(item: Frame | Batch) -> str:
    """The stream an item of the channel belongs to (a Frame, or once prepared a Batch of
    one, as the inference stage drops it)."""
    return item.stream_id if isinstance(item, Frame) else item.frames[0].stream_id


def decode_stage(source: PacketSource, backends: StageBackends, output: Output[Frame],
                 metrics: PipelineMetrics, options: PipelineOptions, *,
                 analytics: StreamAnalytics | None,
                 rider_images: KeepsPicture) -> DecodeStage:
    """A stream's decode stage: ``source``'s pictures into ``output``, those its ``analytics``
    pick (``detect_every``, ``detect_fps``; all without) for the model, the others riding
    with them (their pictures kept where ``rider_images`` says); with ``motion``, those with
    nothing moving and nothing seen lately go skipped."""
    config = analytics.config if analytics is not None else None
    motion = None
    if analytics is not None and config is not None and config.motion != "off":
        motion = MotionSettings(config.motion, config.motion_heartbeat_s,
                                lambda: analytics.config.masks, lambda: analytics.watch_until)
    return DecodeStage(source, backends.decoder_for, output, metrics,
                       frame_limit=options.frame_limit, max_lag_s=options.max_lag_ms / 1000.0,
                       detect_every=config.detect_every if config else 1,
                       detect_fps=config.detect_fps if config else None,
                       rider_images=rider_images, motion=motion)


def detector_stages(inputs: Input[Any], backends: StageBackends, spec: ModelSpec,
                    metrics: PipelineMetrics, options: PipelineOptions, *,
                    channel: ChannelFactory, sinks: Sequence[Sink], batch_size: int,
                    infer_calls: int, analytics: dict[str, StreamAnalytics] | None = None,
                    keep_images: bool = False, queued: int = 0, prepare: bool = False,
                    postprocess_calls: int = 1,
                    on_batch: Callable[[int], None] | None = None,
                    on_written: Callable[[list[Result]], None] | None = None,
                    classifiers: Classifiers | None = None,
                    model: str | None = None,
                    keeps_picture: KeepsPicture | None = None) -> list[Stage[Any, Any]]:
    """Inference on ``inputs`` (prepared Batches; with ``prepare``, decoded Frames it prepares
    itself), postprocessing, an analytics stage for the streams in ``analytics`` (None: none;
    it owns ``classifiers``, the models its streams' classifiers share),
    and the sink stage writing to ``sinks`` (``on_written`` hears each call's results once
    written; ``model``: the name inference marks each frame with; ``keeps_picture``: which
    frames it prepares keep their picture for the sinks, None: all). ``channel(name)`` makes
    each channel between them."""
    inferred = channel("inferred")
    stages: list[Stage[Any, Any]] = [
        InferStage(backends.runtime, inputs, inferred, metrics, batch_size=batch_size,
                   batch_timeout_ms=options.batch_timeout_ms, max_age_s=options.max_age_s,
                   calls_at_once=infer_calls, queued=queued, on_batch=on_batch,
                   preprocessor_for=backends.preprocessor_for if prepare else None,
                   input_tap=options.input_tap, model=model, keeps_picture=keeps_picture)]
    detected = channel("detected" if analytics is not None else "results")
    stages.append(PostprocessStage(backends.postprocessor, inferred, detected, metrics,
                                   keep_images=keep_images, calls_at_once=postprocess_calls))
    results = detected
    if analytics is not None:
        results = channel("results")
        stages.append(AnalyticsStage(analytics, detected, results, metrics,
                                     keep_images=keep_images, classifiers=classifiers,
                                     tap=options.classify_tap))
    stages.append(SinkStage(sinks, spec, results, metrics, on_written=on_written))
    return stages
