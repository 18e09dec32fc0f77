"""InferStage: batches prepared frames across streams and runs the backend.

Like DeepStream's nvstreammux, it takes up to ``batch_size`` frames from every stream, waiting
at most ``batch_timeout_ms`` after the first for a batch to fill. A frame older than
``max_age_s`` when it is taken (live streams only) is dropped as ``dropped_stale`` instead of
spending inference on a moment that has passed.

With ``workers`` > 1, that many batches run at once, each on its own thread (the backend's
session is shared: ONNX Runtime's ``run`` may be called from several threads). Two calls on
one intra-op thread each beat one call on two threads where the cores are shared with
decoding: intra-op threads meet at a barrier after every operator, so one preempted thread
stalls the call, while separate calls go on independently. Batches leave in the order they
were taken, whichever finishes first.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from models.runtime.base import Backend
from pipelines.channel import Channel
from pipelines.errors import ChannelClosed
from pipelines.frame import Batch
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage


class InferStage(Stage):
    def __init__(self, backend: Backend, input_name: str, input: Channel[Batch],
                 output: Channel[Batch], metrics: PipelineMetrics, *, batch_size: int = 4,
                 batch_timeout_ms: float = 10.0, max_age_s: float | None = None,
                 workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"inference workers must be >= 1, got {workers}")
        super().__init__("infer", metrics, threads=workers)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_timeout_ms < 0:
            raise ValueError(f"batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        self.backend = backend
        self.input_name = input_name
        self.input = input
        self.output = output
        self.batch_size = batch_size
        self.batch_timeout_s = batch_timeout_ms / 1000.0
        self.max_age_s = max_age_s

    async def run(self) -> None:
        running: deque[asyncio.Future[tuple[Batch, float]]] = deque()
        try:
            while True:
                try:
                    taken = await self.take(self.input, self.batch_size, self.batch_timeout_s)
                except ChannelClosed:
                    break
                fresh = self._fresh(taken)
                if not fresh:
                    continue
                self.metrics.observe_batch(sum(len(b) for b in fresh))
                running.append(asyncio.ensure_future(self.call(self._infer, fresh)))
                # hand on what has finished in order; wait for the oldest when all are busy
                while running and (running[0].done() or len(running) >= self.worker.threads):
                    await self._hand_on(running.popleft())
            while running:
                await self._hand_on(running.popleft())
        finally:
            for call in running:
                call.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            self.output.close()

    async def _hand_on(self, call: asyncio.Future[tuple[Batch, float]]) -> None:
        batch, seconds = await call
        for frame in batch.frames:
            frame.timings["infer"] = seconds
        await self.output.put(batch)

    def _fresh(self, batches: list[Batch]) -> list[Batch]:
        if self.max_age_s is None:
            return batches
        now = time.monotonic()
        fresh = []
        for item in batches:
            if now - item.frames[0].captured_at > self.max_age_s:
                self.input.drop(item, "dropped_stale")
            else:
                fresh.append(item)
        return fresh

    def _infer(self, batches: list[Batch]) -> Batch:
        """Join the batches and run them, on the worker thread: the copy of the join is work,
        not something for the event loop to do between hand-overs."""
        batch = Batch.concat(batches)
        batch.outputs = self.backend.infer({self.input_name: batch.tensor.numpy()})
        return batch

    def close(self) -> None:
        super().close()
        self.backend.close()
