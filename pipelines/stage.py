"""Stage: one step of a pipeline, with one Worker thread that does its heavy work.

The event loop only moves items between channels; every decode, resize, inference or write runs
on the stage's own thread, so stages overlap on separate cores (FFmpeg, OpenCV and ONNX Runtime
release the GIL). One thread per stage also keeps a CUDA context and stream with the thread that
uses them.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from pipelines.metrics import PipelineMetrics

if TYPE_CHECKING:
    from pipelines.channel import Channel

R = TypeVar("R")
T = TypeVar("T")


class Worker:
    """The thread (or ``threads`` threads) that runs a stage's calls, and times them. One
    thread runs one call at a time; with more, as many calls run at once."""

    def __init__(self, name: str, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"worker threads must be >= 1, got {threads}")
        self.name = name
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads,
                                            thread_name_prefix=f"vidpipe-{name}")

    async def run(self, fn: Callable[..., R], *args: object) -> tuple[R, float]:
        """Run ``fn(*args)`` on the worker thread; return its result and the seconds it took
        there (the time on the thread, not counting the hand-over)."""
        def timed() -> tuple[R, float]:
            start = time.perf_counter()
            result = fn(*args)
            return result, time.perf_counter() - start

        return await asyncio.get_running_loop().run_in_executor(self._executor, timed)

    def close(self) -> None:
        """Wait for the call in progress, if any, then end the thread. Idempotent."""
        self._executor.shutdown(wait=True, cancel_futures=True)


class Stage(abc.ABC):
    """A pipeline step. Subclasses implement ``run``: read input channel(s), call into the
    worker, write output channel(s), and close their outputs when their input ends."""

    def __init__(self, name: str, metrics: PipelineMetrics, *, worker_name: str | None = None,
                 threads: int = 1):
        self.name = name
        self.metrics = metrics
        self.worker = Worker(worker_name or name, threads)
        self._stopping = False
        metrics.register_stage(name, threads)  # busy fractions are per thread

    @abc.abstractmethod
    async def run(self) -> None:
        """Process items until the input ends (or, for a source, until stop is requested)."""

    def request_stop(self) -> None:
        """Ask a source stage to stop producing; the rest of the pipeline then drains."""
        self._stopping = True

    async def take(self, channel: Channel[T], most: int, timeout_s: float = 0.0) -> list[T]:
        """Up to ``most`` items of ``channel`` (see ``Channel.get_batch``), each one's wait in
        the channel recorded under the stage's name; raises ChannelClosed when it is done."""
        taken = await channel.get_batch(most, timeout_s)
        for _, waited in taken:
            self.metrics.observe_wait(self.name, waited)
        return [item for item, _ in taken]

    async def call(self, fn: Callable[..., R], *args: object) -> tuple[R, float]:
        """Run ``fn`` on this stage's worker and record its work time under the stage's name."""
        result, seconds = await self.worker.run(fn, *args)
        self.metrics.observe_stage(self.name, seconds)
        return result, seconds

    def close(self) -> None:
        """Release the worker thread and anything the stage holds. Idempotent."""
        self.worker.close()
