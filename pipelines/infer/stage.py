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
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipelines.channel import Input, Output
from pipelines.frame import Batch
from pipelines.infer.runtime import Runtime
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage


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

    def process(self, items: list[Batch]) -> Batch:
        return self.runtime.infer(items)

    def work_seconds(self, result: Batch, seconds: float) -> float | None:
        # a device runtime only enqueues: postprocessing records its GPU time
        return None if self.runtime.timed_on_device else seconds

    def outputs(self, items: list[Batch], result: Batch, seconds: float) -> list[Batch]:
        if not self.runtime.timed_on_device:
            for frame in result.frames:
                frame.timings["infer"] = seconds
        return [result]

    def close(self) -> None:
        super().close()
        self.runtime.close()
