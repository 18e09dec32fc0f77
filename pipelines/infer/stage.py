"""InferStage: batches prepared frames across streams and runs the model's Runtime.

Like DeepStream's nvstreammux, it takes up to ``batch_size`` frames from every stream, waiting
at most ``batch_timeout_ms`` after the first for a batch to fill. A frame older than
``max_age_s`` when it is taken (live streams only) is dropped as ``dropped_stale`` instead of
spending inference on a moment that has passed.

With ``workers`` > 1, that many batches run at once, each on its own thread (the runtime is
shared: ONNX Runtime's ``run`` may be called from several threads): intra-op threads meet at
a barrier after every operator, so where the cores are shared with decoding one preempted
thread stalls a call on several threads, while separate calls go on independently. Batches
leave in the order they were taken, whichever finishes first.

With ``queued`` > 0 (files), that many more batches are taken and their calls queued on the
workers, so a worker starts the next batch as soon as it ends one (double buffering). A
camera's pipeline queues none: a queued batch would wait out a whole inference, and its
frames are the newest only when taken at the last moment.

A call that fails is tried again one stream's batch at a time: the batches that fail alone
are dropped as ``model_error`` for their streams (a frame the model cannot take costs its own
stream that frame, not the others theirs); when none succeeds alone, the runtime itself is
failing, and so does the stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipelines.channel import Input, Output
from pipelines.frame import Batch
from pipelines.infer.runtime import Runtime
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

log = logging.getLogger(__name__)
Inferred = tuple[list[Batch], list[tuple[Batch, str]]]  # results, and batches that failed (why)


class InferStage(Stage[Batch, Batch]):
    def __init__(self, runtime: Runtime, input: Input[Batch], output: Output[Batch],
                 metrics: PipelineMetrics, *, batch_size: int = 4,
                 batch_timeout_ms: float = 10.0, max_age_s: float | None = None,
                 workers: int = 1, queued: int = 0,
                 on_batch: Callable[[int], None] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"inference workers must be >= 1, got {workers}")
        if queued < 0:
            raise ValueError(f"queued inference calls must be >= 0, got {queued}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_timeout_ms < 0:
            raise ValueError(f"batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        super().__init__("infer", metrics, input=input, output=output, threads=workers,
                         take_at_once=batch_size, take_timeout_s=batch_timeout_ms / 1000.0,
                         calls_at_once=workers + queued, call_ahead=True)
        self.runtime = runtime
        self.prepared = input
        self.batch_size = batch_size
        self.max_age_s = max_age_s
        self.queued = queued
        self.on_batch = on_batch  # hears each batch's size (a shared detector's own counts)

    def admit(self, items: list[Batch]) -> list[Batch]:
        """The batches young enough to infer (the rest dropped as stale); counted as a batch."""
        fresh = items
        if self.max_age_s is not None:
            now = time.monotonic()
            fresh = []
            for item in items:
                if now - item.frames[0].captured_at > self.max_age_s:
                    self.prepared.drop(item, "dropped_stale")
                else:
                    fresh.append(item)
        if fresh:
            size = sum(len(b) for b in fresh)
            self.metrics.observe_batch(size)
            if self.on_batch is not None:
                self.on_batch(size)
        return fresh

    def process(self, items: list[Batch]) -> Inferred:
        try:
            return [self.runtime.infer(items)], []
        except Exception as e:
            if len(items) == 1:
                raise
            error = e
        done: list[Batch] = []
        failed: list[tuple[Batch, str]] = []
        for item in items:  # which stream's frame did the model fail on?
            try:
                done.append(self.runtime.infer([item]))
            except Exception as e:
                failed.append((item, str(e)))
        if not done:
            raise error
        return done, failed

    def work_seconds(self, result: Inferred, seconds: float) -> float | None:
        # a device runtime only enqueues: postprocessing records its GPU time
        return None if self.runtime.timed_on_device else seconds

    def outputs(self, items: list[Batch], result: Inferred, seconds: float) -> list[Batch]:
        done, failed = result
        for batch, error in failed:
            frame = batch.frames[0]
            log.warning("the model failed on frame %d of stream %s (dropped as model_error): "
                        "%s", frame.index, frame.stream_id, error)
            self.prepared.drop(batch, "model_error")
        if not self.runtime.timed_on_device:
            for batch in done:
                for frame in batch.frames:
                    frame.timings["infer"] = seconds
        return done

    def close(self) -> None:
        super().close()
        self.runtime.close()
