"""SharedDetector: one model on one device, shared by every stream that uses it.

Like DeepStream's nvstreammux in front of one nvinfer, the streams' frames meet in one
``FairChannel`` and are batched together by one inference stage; one postprocess stage and one
sink stage follow, the sink routing each result to its stream's own sinks. The model is loaded
once, however many streams attach. A stream attaches with its source: it gets a feed (its own
decode and preprocess stages, a small Pipeline) that puts into its queue of the FairChannel,
and runs and stops independently of the others; when it detaches, what it had in flight is
finished first and whatever could not be is counted as ``dropped_stopped``. The stages are
the engine's own (``pipelines.build``): the device only chooses their backends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.backends import StageBackends, open_backends
from pipelines.build import account_drop, counted_channel, fitted_batch_size
from pipelines.channel import Channel, DropPolicy
from pipelines.decode.stage import DecodeStage, PacketSource
from pipelines.fair import FairChannel
from pipelines.frame import Batch, Result
from pipelines.infer.stage import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.postprocess.stage import PostprocessStage
from pipelines.preprocess.stage import PreprocessStage
from pipelines.sinks.stage import Sink, SinkStage
from pipelines.stage import Stage, run_stage

log = logging.getLogger(__name__)

FEED_NICE = 10  # the streams' decode and preprocess threads yield the cores to the detector
CALLS_PER_PLANNED = 2  # inference calls at once per call of the thread plan (see open)


class RoutingSink:
    """The detector's one sink: each result goes to the sinks of its stream, and settles its
    frame in the FairChannel."""

    def __init__(self, inputs: FairChannel[Batch]) -> None:
        self._inputs = inputs
        self.routes: dict[str, list[Sink]] = {}
        self.wants_images = True  # a stream's sinks may draw (the service's snapshots do)

    def write(self, result: Result) -> None:
        stream = result.frame.stream_id
        for sink in self.routes.get(stream, ()):
            sink.write(result)

    def settle(self, results: Sequence[Result]) -> None:
        for result in results:
            self._inputs.settle(result.frame.stream_id)

    def close(self, commit: bool = True) -> None:
        """The streams' sinks belong to whoever attached them."""


class _SettlingSinkStage(SinkStage):
    """The sink stage, settling each written result's frame (on the event loop, in order)."""

    def __init__(self, router: RoutingSink, spec: ModelSpec, input: Channel[Result],
                 metrics: PipelineMetrics) -> None:
        super().__init__([router], spec, input, metrics)
        self.router = router

    def outputs(self, items: list[Result], result: None, seconds: float) -> list[None]:
        done = super().outputs(items, result, seconds)
        self.router.settle(items)
        return done


class SharedDetector:
    """``name`` names its channels (``<name>/prepared`` ...); ``options`` are the service's
    pipeline options (device, batch size and timeout, backends, capacity)."""

    def __init__(self, name: str, backends: StageBackends, spec: ModelSpec,
                 metrics: PipelineMetrics, options: PipelineOptions, batch_size: int) -> None:
        self.name = name
        self.spec = spec
        self.metrics = metrics
        self.options = options
        self.backends = backends
        self.batch_size = batch_size
        self.inputs: FairChannel[Batch] = FairChannel(
            f"{name}/prepared", options.capacity, lambda b: b.frames[0].stream_id,
            on_drop=lambda item, cause: account_drop(metrics, item, cause))
        self.router = RoutingSink(self.inputs)
        metrics.register_channel(self.inputs.name, self.inputs.capacity, self.inputs.__len__)
        inferred = counted_channel(metrics, f"{name}/inferred", options.capacity)
        results = counted_channel(metrics, f"{name}/results", options.capacity)
        self.channels: list[Any] = [self.inputs, inferred, results]
        self.stages: list[Stage[Any, Any]] = [
            InferStage(self.backends.runtime, self.inputs, inferred, metrics,
                       batch_size=self.batch_size, batch_timeout_ms=options.batch_timeout_ms,
                       max_age_s=options.max_age_s,
                       workers=CALLS_PER_PLANNED * self.backends.plan.infer_workers,
                       on_batch=self._count_batch),
            PostprocessStage(self.backends.postprocessor, inferred, results, metrics,
                             keep_images=True),
            _SettlingSinkStage(self.router, spec, results, metrics),
        ]
        self.feeds: dict[str, Pipeline] = {}
        self.batches: Counter[int] = Counter()  # this detector's batch sizes
        self.started_at = time.monotonic()

    def _count_batch(self, size: int) -> None:
        self.batches[size] += 1

    def describe(self) -> dict[str, Any]:
        """What ``/api/stats`` shows of it: its model and device, the streams it serves, its
        batch sizes, and the frames it inferred per second since it was loaded."""
        frames = sum(size * n for size, n in self.batches.items())
        uptime = max(1e-9, time.monotonic() - self.started_at)
        return {"model": self.spec.name, "device": self.options.device, "streams": self.streams,
                "batches": {str(k): v for k, v in sorted(self.batches.items())},
                "fps": round(frames / uptime, 2)}

    @classmethod
    def open(cls, name: str, model_path: Path, spec: ModelSpec, metrics: PipelineMetrics,
             options: PipelineOptions) -> SharedDetector:
        """The detector of ``model_path`` on ``options.device``: the model loaded here, once.
        Its thread plan is the throughput one (no streams to probe yet: inference-bound, every
        core, calls split where the threads split evenly), with ``CALLS_PER_PLANNED`` times its
        calls at once, and the streams' feeds run at a lower priority (``FEED_NICE``): many
        feeds' threads would otherwise take the cores from the few the detector has, and
        decode frames it can only drop (measured: docs/BENCHMARKS.md, "The service")."""
        backends = open_backends(model_path, spec, [], metrics, options, scale=None)
        try:
            batch_size = fitted_batch_size(options.batch_size, backends, model_path)
            detector = cls(name, backends, spec, metrics, options, batch_size)
        except BaseException:
            backends.close()
            raise
        metrics.count_model_load(spec.name, options.device)
        log.info("detector %s: %s loaded once, for every stream that uses it", name,
                 model_path.name)
        return detector

    @property
    def streams(self) -> list[str]:
        return self.inputs.streams

    async def run(self) -> None:
        """Run the shared stages until ``close()``; a failing stage fails the detector."""
        try:
            async with asyncio.TaskGroup() as group:
                for stage in self.stages:
                    group.create_task(run_stage(stage), name=f"{self.name}-{stage.name}")
        except BaseExceptionGroup as e:
            raise e.exceptions[0] from None

    def attach(self, source: PacketSource, sinks: Sequence[Sink], policy: DropPolicy,
               ) -> Pipeline:
        """The feed of ``source`` into this detector, its results to ``sinks``: a Pipeline of
        the stream's decode and preprocess stages, for the caller to run and stop."""
        stream = source.stream_id
        # A live stream's newest frame wins before preprocessing, not after: its prepared
        # queue blocks, so a frame is prepared only once the detector has room for it, and
        # the decoded frames it could not take are replaced while still cheap.
        inlet = self.inputs.attach(stream, "block")
        decoded = counted_channel(self.metrics, f"{stream}/decoded",
                                  1 if policy == "drop_oldest" else self.options.capacity, policy)
        stages: list[Stage[Any, Any]] = [
            DecodeStage(source, self.backends.decoder_for, decoded, self.metrics,
                        frame_limit=self.options.frame_limit, nice=FEED_NICE),
            PreprocessStage(stream, self.backends.preprocessor_for(), decoded, inlet,
                            self.metrics, nice=FEED_NICE)]
        self.router.routes[stream] = list(sinks)
        feed = Pipeline(stages, [decoded], self.metrics, [stream], account_stopped=False)
        self.feeds[stream] = feed
        return feed

    async def detach(self, stream: str, timeout_s: float = 5.0) -> None:
        """After the stream's feed has ended: wait (at most ``timeout_s``) until what it put in
        is inferred and written, then forget it; frames read and never finished count as
        ``dropped_stopped``."""
        deadline = time.monotonic() + timeout_s
        while self.inputs.in_flight(stream) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.inputs.detach(stream)
        self.router.routes.pop(stream, None)
        feed = self.feeds.pop(stream, None)
        if feed is not None:
            feed.forget_metrics()
        missing = self.metrics.unaccounted(stream)
        if missing > 0:
            self.metrics.frame_outcome(stream, "dropped_stopped", missing)

    def close(self) -> None:
        """No more streams: the shared stages end once the queues are empty."""
        self.inputs.close()

    def release(self) -> None:
        """Close the stages (threads, the model) and forget their metrics. Idempotent."""
        for stage in reversed(self.stages):
            try:
                stage.close()
            except Exception:  # one failing close must not keep the others open
                log.exception("closing stage %s of detector %s failed", stage.name, self.name)
            self.metrics.unregister_stage(stage.name, stage.worker.threads)
        self.stages = []
        for channel in self.channels:
            self.metrics.unregister_channel(channel.name)
        self.channels = []
