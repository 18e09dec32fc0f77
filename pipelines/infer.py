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

With ``queued`` > 0 (files), that many more batches are taken and their calls queued on the
workers, so a worker starts the next batch as soon as it ends one instead of idling while the
event loop hands the last one on and takes the next. A camera's pipeline queues none: a
queued batch would wait out a whole inference, and its frames are the newest only when taken
at the last moment.
"""

from __future__ import annotations

import asyncio
import time

from models.runtime.base import Backend
from pipelines.channel import Channel
from pipelines.errors import ChannelClosed
from pipelines.frame import Batch
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

InferCall = asyncio.Future[tuple[Batch, float]]  # a batch's call: the batch, seconds it took


class InferStage(Stage):
    def __init__(self, backend: Backend, input_name: str, input: Channel[Batch],
                 output: Channel[Batch], metrics: PipelineMetrics, *, batch_size: int = 4,
                 batch_timeout_ms: float = 10.0, max_age_s: float | None = None,
                 workers: int = 1, queued: int = 0) -> None:
        if workers < 1:
            raise ValueError(f"inference workers must be >= 1, got {workers}")
        if queued < 0:
            raise ValueError(f"queued inference calls must be >= 0, got {queued}")
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
        self.queued = queued

    async def run(self) -> None:
        # Two tasks: one takes batches and starts their calls while fewer than the workers plus
        # ``queued`` are in flight; the other hands finished batches on, in the order taken.
        slots = asyncio.Semaphore(self.worker.threads + self.queued)
        calls: asyncio.Queue[InferCall | None] = asyncio.Queue()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._hand_on_in_order(calls, slots))
                await self._take_and_start(calls, slots)
        except BaseExceptionGroup as e:  # one task failed: its error is the stage's
            raise e.exceptions[0] from None
        finally:
            # calls never handed on: cancel those still running, and collect every outcome
            # (the stage fails with the first error; later ones are only collected)
            left = [call for call in _drain_now(calls) if call is not None]
            for call in left:
                call.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)
            self.output.close()

    async def _take_and_start(self, calls: asyncio.Queue[InferCall | None],
                              slots: asyncio.Semaphore) -> None:
        while True:
            await slots.acquire()
            try:
                taken = await self.take(self.input, self.batch_size, self.batch_timeout_s)
            except ChannelClosed:
                calls.put_nowait(None)
                return
            fresh = self._fresh(taken)
            if not fresh:
                slots.release()
                continue
            self.metrics.observe_batch(sum(len(b) for b in fresh))
            calls.put_nowait(asyncio.ensure_future(self.call(self._infer, fresh)))

    async def _hand_on_in_order(self, calls: asyncio.Queue[InferCall | None],
                                slots: asyncio.Semaphore) -> None:
        while (call := await calls.get()) is not None:
            batch, seconds = await call
            slots.release()
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


def _drain_now(queue: asyncio.Queue[InferCall | None]) -> list[InferCall | None]:
    """What ``queue`` holds now, taken out of it without waiting."""
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items
