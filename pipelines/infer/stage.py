"""InferStage: batches prepared frames across streams and runs the model's Runtime.

Like DeepStream's nvstreammux, it takes up to ``batch_size`` frames from every stream, waiting
at most ``batch_timeout_ms`` after the first for a batch to fill — on the host only while
every worker thread is busy: a host call holds its thread to the end, so while one is free a
frame waiting for others to batch with would only wait (a batch of frames costs a CPU about
what the frames cost one by one); it is run with what is there, and batches grow as the
threads fill. A device call only enqueues, so its thread is never busy for long, and there the
wait is what makes batches. A frame older than
``max_age_s`` when it is taken (live streams only) is dropped as ``dropped_stale`` instead of
spending inference on a moment that has passed.

With ``calls_at_once`` > 1, that many batches run at once, each on its own thread (the runtime
is shared: ONNX Runtime's ``run`` may be called from several threads): intra-op threads meet at
a barrier after every operator, so where the cores are shared with decoding one preempted
thread stalls a call on several threads, while separate calls go on independently. Batches
leave in the order they were taken, whichever finishes first.

With ``queued`` > 0 (files), that many more batches are taken and their calls queued on the
threads, so a thread starts the next batch as soon as it ends one (double buffering). A
camera's pipeline queues none: a queued batch would wait out a whole inference, and its
frames are the newest only when taken at the last moment.

A call that fails is tried again one stream's batch at a time: the batches that fail alone
are dropped as ``model_error`` for their streams (a frame the model cannot take costs its own
stream that frame, not the others theirs); when none succeeds alone, the runtime itself is
failing, and so does the stage.

With ``preprocessor_for`` (a shared detector), it takes decoded Frames and prepares the ones
of each call on its worker thread just before running the model: a live stream's waiting
frame is then its newest, replaced while it waits, rather than one prepared a while ago, and
no frame is prepared that is not inferred. Preparing costs a few milliseconds per frame
against tens for inference; it is recorded as the ``preprocess`` stage.

A frame the model is not to see (``Frame.skipped``: motion gating) costs no batch slot and is
never stale: it rides with the call's next frame of its stream that the model sees, or, with
none, leaves after the call's batch as it came.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.channel import Input, Output
from pipelines.frame import Batch, Frame
from pipelines.infer.runtime import Runtime
from pipelines.metrics import PipelineMetrics
from pipelines.preprocess.preprocessor import Preprocessor
from pipelines.sinks.pictures import KeepsPicture, release
from pipelines.stage import Stage

log = logging.getLogger(__name__)
PREPARE = "preprocess"  # the stage a preparing InferStage records its preparing time as


@dataclass(slots=True)
class Inferred:
    """A call's results, the batches that failed alone (and why), the seconds preparing."""

    done: list[Batch]
    failed: list[tuple[Batch, str]] = field(default_factory=list)
    prepared_s: float = 0.0
    passed: list[Frame] = field(default_factory=list)  # skipped frames, handed on as they are


class _Preprocessors:
    """One preprocessor per worker thread (a preprocessor serves one thread), all closed
    together."""

    def __init__(self, make: Callable[[], Preprocessor]) -> None:
        self._make = make
        self._local = threading.local()
        self._made: list[Preprocessor] = []
        self._lock = threading.Lock()

    def here(self) -> Preprocessor:
        preprocessor: Preprocessor | None = getattr(self._local, "preprocessor", None)
        if preprocessor is None:
            preprocessor = self._local.preprocessor = self._make()
            with self._lock:
                self._made.append(preprocessor)
        return preprocessor

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        for preprocessor in made:
            preprocessor.close()


class InferStage(Stage[Batch | Frame, Batch | Frame]):
    def __init__(self, runtime: Runtime, input: Input[Any],
                 output: Output[Batch | Frame], metrics: PipelineMetrics, *,
                 batch_size: int = 4,
                 batch_timeout_ms: float = 10.0, max_age_s: float | None = None,
                 calls_at_once: int = 1, queued: int = 0,
                 on_batch: Callable[[int], None] | None = None,
                 preprocessor_for: Callable[[], Preprocessor] | None = None,
                 input_tap: Callable[[Batch], None] | None = None,
                 model: str | None = None,
                 keeps_picture: KeepsPicture | None = None) -> None:
        if calls_at_once < 1:
            raise ValueError(f"inference calls at once must be >= 1, got {calls_at_once}")
        if queued < 0:
            raise ValueError(f"queued inference calls must be >= 0, got {queued}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_timeout_ms < 0:
            raise ValueError(f"batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        super().__init__("infer", metrics, input=input, output=output, threads=calls_at_once,
                         take_at_once=batch_size, take_timeout_s=batch_timeout_ms / 1000.0,
                         calls_at_once=calls_at_once + queued, call_ahead=True)
        self.runtime = runtime
        # the runtime and the name each frame it infers is marked with, read once per call:
        # ``swap`` replaces both between calls (the calls under way finish on the old)
        self._current = (runtime, model)
        self._retired: list[Runtime] = []
        self.prepared: Input[Any] = input  # Batches, or Frames with ``preprocessor_for``
        self.batch_size = batch_size
        self.max_age_s = max_age_s
        self.queued = queued
        self.on_batch = on_batch  # hears each batch's size (a shared detector's own counts)
        self.input_tap = input_tap  # sees each batch as the model gets it (model check)
        # which frames it prepares keep their picture for the sinks (None: all)
        self.keeps_picture = keeps_picture
        self._preprocessors = None if preprocessor_for is None else _Preprocessors(
            preprocessor_for)
        if self._preprocessors is not None:
            metrics.register_stage(PREPARE, calls_at_once)

    def take_wait_s(self) -> float:
        """The batch wait (the module's docstring): none on the host while a thread is free."""
        if not self.runtime.timed_on_device and self.calls_on_worker < self.worker.threads:
            return 0.0
        return self.take_timeout_s

    def admit(self, items: list[Batch | Frame]) -> list[Batch | Frame]:
        """The items young enough to infer (the rest dropped as stale); counted as a batch."""
        fresh = items
        if self.max_age_s is not None:
            now = time.monotonic()
            fresh = []
            for item in items:
                if not _skipped(item) and now - _captured_at(item) > self.max_age_s:
                    self.prepared.drop(item, "dropped_stale")
                else:
                    fresh.append(item)
        size = sum(1 if isinstance(b, Frame) else len(b) for b in fresh if not _skipped(b))
        if size:
            self.metrics.observe_batch(size)
            if self.on_batch is not None:
                self.on_batch(size)
        return fresh

    def inline(self, items: list[Batch | Frame]) -> bool:
        return all(_skipped(item) for item in items)

    def swap(self, runtime: Runtime, model: str) -> None:
        """Infer with ``runtime`` (the model file ``model``) from the next call on; the old
        one is closed with the stage."""
        self._retired.append(self._current[0])
        self._current = (runtime, model)
        self.runtime = runtime

    def process(self, items: list[Batch | Frame]) -> Inferred:
        items, passed = _fold_skipped(items)
        if not items:
            return Inferred([], passed=passed)
        runtime, model = self._current
        start = time.perf_counter()
        batches = self._batches(items)
        prepared_s = time.perf_counter() - start
        for batch in batches:
            for frame in batch.frames:
                frame.model = model
            if self.input_tap is not None:
                self.input_tap(batch)
        try:
            return Inferred([runtime.infer(batches)], prepared_s=prepared_s, passed=passed)
        except Exception as e:
            if len(batches) == 1:
                raise
            error = e
        result = Inferred([], prepared_s=prepared_s, passed=passed)
        for batch in batches:  # which stream's frame did the model fail on?
            try:
                result.done.append(runtime.infer([batch]))
            except Exception as e:
                result.failed.append((batch, str(e)))
        if not result.done:
            raise error
        return result

    def _batches(self, items: list[Batch | Frame]) -> list[Batch]:
        """The call's items as Batches: Frames prepared here, on the worker thread."""
        if self._preprocessors is None:
            return items  # type: ignore[return-value]  # an unpreparing stage takes Batches
        preprocessor = self._preprocessors.here()
        batches = []
        for item in items:
            if isinstance(item, Frame):
                item.materialize()
                frame, item = item, preprocessor.prepare(item)
                if self.keeps_picture is not None and not self.keeps_picture(frame):
                    release(frame)  # the model's input is made: no sink draws on it
            batches.append(item)
        return batches

    def work_seconds(self, result: Inferred, seconds: float) -> float | None:
        # a device runtime only enqueues: postprocessing records its GPU time; a call of
        # skipped frames only did no inference at all
        if self.runtime.timed_on_device or not (result.done or result.failed):
            return None
        return seconds - result.prepared_s

    def outputs(self, items: list[Batch | Frame], result: Inferred,
                seconds: float) -> list[Batch | Frame]:
        for batch, error in result.failed:
            frame = batch.frames[0]
            log.warning("the model failed on frame %d of stream %s (dropped as model_error): "
                        "%s", frame.index, frame.stream_id, error)
            self.prepared.drop(batch, "model_error")
        inferred = sum(len(batch) for batch in result.done)
        if self._preprocessors is not None and inferred:
            self.metrics.observe_stage(PREPARE, result.prepared_s)
            for batch in result.done:
                for frame in batch.frames:
                    frame.timings[PREPARE] = result.prepared_s / inferred
        if not self.runtime.timed_on_device:
            for batch in result.done:
                for frame in batch.frames:
                    frame.timings["infer"] = seconds - result.prepared_s
        return [*result.done, *result.passed]

    def close(self) -> None:
        super().close()  # the worker threads end first: no preprocessor is in use after
        for runtime in [*self._retired, self._current[0]]:
            runtime.close()
        if self._preprocessors is not None:
            self._preprocessors.close()

    def registered(self) -> list[tuple[str, int]]:
        """Its own stage, and the preparing it records as ``preprocess`` where it prepares."""
        prepares = [(PREPARE, self.worker.threads)] if self._preprocessors is not None else []
        return [*super().registered(), *prepares]


def _skipped(item: Batch | Frame) -> bool:
    return isinstance(item, Frame) and item.skipped is not None


def _fold_skipped(items: list[Batch | Frame]) -> tuple[list[Batch | Frame], list[Frame]]:
    """A call's items for the model, each carrying the skipped frames of its stream taken
    before it (as riders, in order), and the skipped frames no later item of their stream
    carries, to hand on after the call's batch: either way, in each stream's order."""
    inferred: list[Batch | Frame] = []
    passed: list[Frame] = []
    later: dict[str, Frame] = {}  # each stream's next frame for the model in the call
    for item in reversed(items):
        if isinstance(item, Frame) and item.skipped:
            lead = later.get(item.stream_id)
            if lead is None:
                passed.append(item)
            else:
                lead.riders = [*item.riders, dataclasses.replace(item, riders=[]),
                               *lead.riders]
            continue
        inferred.append(item)
        lead = item if isinstance(item, Frame) else item.frames[0]
        later[lead.stream_id] = lead
    return inferred[::-1], passed[::-1]


def _captured_at(item: Batch | Frame) -> float:
    return item.captured_at if isinstance(item, Frame) else item.frames[0].captured_at
