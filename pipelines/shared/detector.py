"""SharedDetector: one model on one device, shared by every stream that uses it.

Like DeepStream's nvstreammux in front of one nvinfer, the streams' decoded frames meet in
one ``FairChannel`` and are batched together by one inference stage, which prepares the
frames it takes just before it runs the model (a live stream's waiting frame is its newest,
not one prepared a while ago); one postprocess stage and one sink stage follow, the sink
routing each result to its stream's own sinks. The model is loaded once, however many streams
attach. A stream attaches with its source: it gets an intake (its own decode stage, a small
Pipeline) that puts into its queue of the FairChannel, and runs and stops independently of
the others; when it detaches, what it had in flight is finished first and whatever could not
be is counted as ``dropped_stopped``. The stages are the engine's own (``pipelines.build``):
the device only chooses their backends.

A shared stage that fails fails the detector, not its streams: the frames it had taken are
counted as ``model_error`` for their streams, the model is loaded again after a backoff
(``RestartBudget``), and the streams' queues, which kept filling by their own drop rules
meanwhile, are served again. Only when the budget is spent does the detector fail.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.analytics.stream import StreamAnalytics
from pipelines.backends import StageBackends, open_backends
from pipelines.channel import Channel, DropPolicy
from pipelines.classify.model import Classifiers
from pipelines.decode.stage import PacketSource
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.shadow.live import LiveShadow
from pipelines.shared.restarts import RestartBudget
from pipelines.shared.routing import RoutingSink
from pipelines.sinks.pictures import PictureKeeper
from pipelines.sinks.stage import Sink
from pipelines.sources.url import redact_text
from pipelines.stage import Stage
from pipelines.wiring import (
    counted_channel,
    decode_stage,
    detector_stages,
    frames_channel,
    settle,
)

log = logging.getLogger(__name__)

CALLS_PER_PLANNED = 2  # inference calls at once per call of the thread plan (see open)
LIVE_QUEUED = 1  # decoded frames a live stream keeps waiting for the detector: the newest


class SharedDetector:
    """``name`` names its channels (``<name>/prepared`` ...); ``options`` are the service's
    pipeline options (device, batch size and timeout, backends, capacity)."""

    def __init__(self, name: str, backends: StageBackends, spec: ModelSpec,
                 metrics: PipelineMetrics, options: PipelineOptions, batch_size: int, *,
                 reopen: Callable[[], StageBackends] | None = None,
                 restarts: RestartBudget | None = None,
                 on_state: Callable[[str, str | None], None] | None = None,
                 model_path: Path | None = None) -> None:
        """``reopen`` loads the model again after a failure (None: a failure is final);
        ``on_state(state, error)`` hears ``"restarting"`` and ``"up"``, on the event loop;
        ``model_path``: the model file (its name marks each frame inferred)."""
        self.name = name
        self.model_path = model_path
        self.spec = spec
        self.metrics = metrics
        self.options = options
        self.backends = backends
        self.batch_size = batch_size
        self.reopen = reopen
        self.restarts = restarts or RestartBudget()
        self.on_state = on_state
        self.inputs = frames_channel(metrics, f"{name}/decoded", options.capacity,
                                     ends_with_streams=False)
        metrics.register_channel(self.inputs.name, self.inputs.capacity, self.inputs.__len__)
        self.router = RoutingSink(metrics)
        self.analytics: dict[str, StreamAnalytics] = {}  # the tracked streams
        # the classifiers its streams name, each loaded once, kept across restarts
        self.classifiers = Classifiers()
        self.candidate: LiveShadow | None = None  # a model compared beside it (the API's)
        self.standby: StageBackends | None = None  # the candidate loaded as its runtime
        self.pipeline = self._build(backends)
        self.intakes: dict[str, Pipeline] = {}  # each stream's decode stage, into the detector
        self.batches: Counter[int] = Counter()  # this detector's batch sizes
        self.started_at = time.monotonic()
        self.state = "up"

    def _build(self, backends: StageBackends) -> Pipeline:
        """The shared stages on ``backends``, between the FairChannel and the router, as a
        Pipeline of their own (the FairChannel outlives it: a failed one is built again)."""
        self.backends = backends
        channels: list[Channel[Any]] = []

        def channel(name: str) -> Channel[Any]:
            channels.append(counted_channel(self.metrics, f"{self.name}/{name}",
                                            self.options.capacity))
            return channels[-1]

        calls = backends.plan.threads.infer_workers
        stages = detector_stages(self.inputs, backends, self.spec, self.metrics, self.options,
                                 channel=channel, sinks=[self.router],
                                 on_written=functools.partial(settle, self.inputs),
                                 batch_size=self.batch_size,
                                 infer_calls=CALLS_PER_PLANNED * calls,
                                 postprocess_calls=calls, analytics=self.analytics,
                                 keep_images=True, prepare=True, on_batch=self._count_batch,
                                 model=None if self.model_path is None else self.model_path.name,
                                 keeps_picture=self.router.keeps_picture)
        return Pipeline(stages, channels, self.metrics, [], account_stopped=False)

    def _count_batch(self, size: int) -> None:
        self.batches[size] += 1

    def describe(self) -> dict[str, Any]:
        """What ``/api/stats`` shows of it: its model and device, the streams it serves, its
        batch sizes, and the frames it inferred per second since it was loaded."""
        frames = sum(size * n for size, n in self.batches.items())
        uptime = max(1e-9, time.monotonic() - self.started_at)
        return {"id": self.name, "model": self.spec.name, "device": self.options.device,
                "streams": self.streams,
                "batches": {str(k): v for k, v in sorted(self.batches.items())},
                "fps": round(frames / uptime, 2), "state": self.state,
                "restarts": self.restarts.used,
                "candidate": None if self.candidate is None else self.candidate.summary()}

    @classmethod
    def open(cls, name: str, model_path: Path, spec: ModelSpec, metrics: PipelineMetrics,
             options: PipelineOptions) -> SharedDetector:
        """The detector of ``model_path`` on ``options.device``: the model loaded here, once.
        Its thread plan is the throughput one (no streams to probe yet: inference-bound, every
        core, calls split where the threads split evenly), with ``CALLS_PER_PLANNED`` times its
        calls at once. The intakes' decoders run at the detector's priority: a live stream is
        current only if every frame of it is decoded (the frame after a skipped one does not
        decode), and nothing else of a frame is done before the detector takes it; at a lower
        priority they fell behind and skipped to key frames, which starved some streams
        (measured: docs/BENCHMARKS.md, "The service")."""
        def reopen() -> StageBackends:
            return open_backends(model_path, spec, [], metrics, options, scale=None)

        backends = reopen()
        try:
            assert backends.plan.batch_size is not None  # fitted by open_backends
            detector = cls(name, backends, spec, metrics, options, backends.plan.batch_size,
                           reopen=reopen, model_path=model_path)
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
        """Run the shared stages until ``close()``. A failing stage is rebuilt while the
        restart budget lasts; then its error is the detector's."""
        while True:
            try:
                await self._run_stages()
                return
            except Exception as e:
                error: Exception = e
            while True:  # rebuilt, or out of restarts
                self._lose_taken(error)
                await asyncio.to_thread(self._close_stages)
                reopen = self.reopen
                delay = None if reopen is None else self.restarts.next_delay()
                if reopen is None or delay is None or self.inputs.closed:
                    self._set_state("failed", error)
                    raise error
                self._set_state("restarting", error)
                await asyncio.sleep(delay)
                try:
                    self.pipeline = self._build(await asyncio.to_thread(reopen))
                except Exception as e:
                    error = e
                    continue
                self.metrics.count_detector_restart(self.spec.name, self.options.device)
                self.metrics.count_model_load(self.spec.name, self.options.device)
                log.warning("detector %s: rebuilt (restart %d); its streams go on", self.name,
                            self.restarts.used)
                self._set_state("up", None)
                break

    async def _run_stages(self) -> None:
        try:
            await self.pipeline.run()
        except BaseExceptionGroup as e:
            raise e.exceptions[0] from None

    def _lose_taken(self, error: Exception) -> None:
        """The frames the failed stages had taken are gone: ``model_error``, per stream."""
        for stream in self.inputs.streams:
            lost = self.inputs.taken[stream] - self.inputs.settled[stream]
            if lost > 0:
                self.inputs.settle(stream, lost)
                self.metrics.frame_outcome(stream, "model_error", lost)
        log.error("detector %s failed: %s", self.name, redact_text(str(error)))

    def _set_state(self, state: str, error: Exception | None) -> None:
        self.state = state
        if self.on_state is not None:
            self.on_state(state, None if error is None else redact_text(str(error)))

    def attach(self, source: PacketSource, sinks: Sequence[Sink], policy: DropPolicy,
               analytics: StreamAnalytics | None = None) -> Pipeline:
        """The intake of ``source`` into this detector, its results through ``analytics`` (its
        tracker, lines and zones, if any) to ``sinks``: a Pipeline of the stream's decode
        stage, for the caller to run and stop."""
        stream = source.stream_id
        # A live stream's newest decoded frame waits for the detector, replaced by each newer
        # one (drop_oldest, counted against the stream), and is prepared only when taken.
        live = policy == "drop_oldest"
        inlet = self.inputs.attach(stream, policy, capacity=LIVE_QUEUED if live else None)
        # its pictures kept where its sinks draw (every one where classifiers crop them)
        keeper = PictureKeeper(sinks, every_frame=analytics is not None
                               and bool(analytics.config.classifiers))
        stages: list[Stage[Any, Any]] = [
            decode_stage(source, self.backends, inlet, self.metrics, self.options,
                         analytics=analytics, rider_images=keeper.unseen)]
        self.router.routes[stream] = list(sinks)
        self.router.keepers[stream] = keeper
        if analytics is not None:
            self.analytics[stream] = analytics
        intake = Pipeline(stages, [], self.metrics, [stream], account_stopped=False)
        self.intakes[stream] = intake
        return intake

    async def detach(self, stream: str, timeout_s: float = 5.0) -> None:
        """After the stream's intake has ended: wait (at most ``timeout_s``) until what it put in
        is inferred and written, then forget it; frames read and never finished count as
        ``dropped_stopped``."""
        deadline = time.monotonic() + timeout_s
        while self.inputs.in_flight(stream) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.inputs.detach(stream)
        self.router.forget(stream)
        self.analytics.pop(stream, None)
        intake = self.intakes.pop(stream, None)
        if intake is not None:
            intake.forget_metrics()
        missing = self.metrics.unaccounted(stream)
        if missing > 0:
            self.metrics.frame_outcome(stream, "dropped_stopped", missing)

    def close(self) -> None:
        """No more streams: the shared stages end once the queues are empty."""
        self.inputs.close()

    def release(self) -> None:
        """Close the stages (threads, the model) and forget their metrics. Idempotent."""
        self._close_stages()
        self.classifiers.close()
        if self.candidate is not None:
            self.candidate.close()
        if self.standby is not None:
            self.standby.runtime.close()
        self.metrics.unregister_channel(self.inputs.name)

    def _close_stages(self) -> None:
        self.pipeline.close()
        self.pipeline.forget_metrics()
