"""Stage: one step of a pipeline as a passive processor, and ``run_stage``, the one loop that
drives every stage.

A stage says what one call does (``process``, on its own Worker thread), what it takes
(``next_items``: from its input channel by default) and what it hands on (``outputs``); the
runner takes, calls, hands on in the order taken, records the metrics and closes the output
when the input ends. The event loop only moves items between channels, so stages overlap on
separate cores (FFmpeg, OpenCV and ONNX Runtime release the GIL), and one thread per stage
keeps a CUDA context and stream with the thread that uses them.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Self, TypeVar

from pipelines.channel import Channel, Input, Output
from pipelines.errors import ChannelClosed
from pipelines.metrics import PipelineMetrics

R = TypeVar("R")
In = TypeVar("In")
Out = TypeVar("Out")
Call = asyncio.Future[tuple[Any, float]]  # a call on a worker: its result, seconds it took


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

    def start(self, fn: Callable[..., R], *args: object) -> asyncio.Future[tuple[R, float]]:
        """``fn(*args)`` started on the worker thread: a future of the event loop (no task
        of its own) of its result and the seconds it took there (the time on the thread, not
        counting the hand-over)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, _timed, fn, args)

    def close(self) -> None:
        """Wait for the call in progress, if any, then end the thread. Idempotent."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _timed(fn: Callable[..., R], args: tuple[object, ...]) -> tuple[R, float]:
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


class Stage(abc.ABC, Generic[In, Out]):
    """A pipeline step. Subclasses implement ``process`` (on the worker thread) and
    ``outputs`` (on the event loop, in the order the items were taken); ``run_stage`` does
    the rest.

    ``take_at_once`` items are taken per call, waiting at most ``take_wait_s()`` (by default
    ``take_timeout_s``) for more after the first. ``calls_at_once`` calls may be in flight,
    running on the worker's threads or queued behind them. With ``call_ahead`` a call's slot
    is free once its result is in, so the next call starts while its outputs are handed on
    (the worker need not wait for the event loop); without it, only once they all are.
    A list of ``outputs`` is put at once (``put_many``: the next stage woken once for the
    call); a generator's outputs are put one by one, each made just before it is put."""

    def __init__(self, name: str, metrics: PipelineMetrics, *, input: Input[In] | None,
                 output: Output[Out] | None, worker_name: str | None = None,
                 threads: int = 1, take_at_once: int = 1, take_timeout_s: float = 0.0,
                 calls_at_once: int = 1, call_ahead: bool = False) -> None:
        if take_at_once < 1:
            raise ValueError(f"items per call must be >= 1, got {take_at_once}")
        if calls_at_once < 1:
            raise ValueError(f"calls at once must be >= 1, got {calls_at_once}")
        self.name = name
        self.metrics = metrics
        self.input = input
        self.output = output
        self.take_at_once = take_at_once
        self.take_timeout_s = take_timeout_s
        self.calls_at_once = calls_at_once
        self.call_ahead = call_ahead
        self.worker = Worker(worker_name or name, threads)
        self.calls_on_worker = 0  # started on the worker and not yet returned (run_stage's count)
        self._stopping = False
        metrics.register_stage(name, threads)  # busy fractions are per thread

    async def next_items(self) -> list[In]:
        """The items of the next call (each one's wait in the channel recorded); raises
        ChannelClosed when there are no more. A source overrides it."""
        if self.input is None:
            raise TypeError(f"stage {self.name} has no input channel; override next_items")
        taken = await self.input.get_batch(self.take_at_once, self.take_wait_s())
        self.metrics.observe_waits(self.name, [waited for _, waited in taken])
        return [item for item, _ in taken]

    def take_wait_s(self) -> float:
        """How long the next take waits for more items after its first: ``take_timeout_s``
        by default."""
        return self.take_timeout_s

    def admit(self, items: list[In]) -> list[In]:
        """The taken items worth a call (the rest dropped and counted here); all by default."""
        return items

    def inline(self, items: list[In]) -> bool:
        """Whether the call is so little work (frames the model skips, passed on) that it runs
        on the event loop rather than paying a thread hand-over; only ever while none of the
        stage's calls is on its worker. None is, by default."""
        return False

    @abc.abstractmethod
    def process(self, items: list[In]) -> Any:
        """One call's work, on the worker thread."""

    @abc.abstractmethod
    def outputs(self, items: list[In], result: Any, seconds: float) -> Iterable[Out]:
        """What the call's result hands on, on the event loop, in the order taken."""

    def work_seconds(self, result: Any, seconds: float) -> float | None:
        """The work time to record for a call (None: recorded elsewhere); the call's time on
        the worker thread by default."""
        return seconds

    def registered(self) -> list[tuple[str, int]]:
        """The stages it registered in the metrics, with their threads (its own)."""
        return [(self.name, self.worker.threads)]

    def request_stop(self) -> None:
        """Ask a source stage to stop producing; the rest of the pipeline then drains."""
        self._stopping = True

    def close(self) -> None:
        """Release the worker thread and anything the stage holds. Idempotent."""
        self.worker.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def run_stage(stage: Stage[Any, Any]) -> None:
    """Drive ``stage`` until its input ends: take items while a call slot is free, start each
    call on the worker, and hand the results on, in the order taken, from a second task, so
    that no finished call waits for the next take. A stage's failure is raised as its own
    error; every call never handed on is cancelled and its outcome collected."""
    slots = asyncio.Semaphore(stage.calls_at_once)
    calls: Channel[tuple[list[Any], Call]] = Channel(f"{stage.name}/calls",
                                                    stage.calls_at_once)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_hand_on_in_order(stage, calls, slots))
            try:
                await _take_and_start(stage, calls, slots)
            finally:
                calls.close()
    except BaseExceptionGroup as e:  # one of the two tasks failed: its error is the stage's
        raise e.exceptions[0] from None
    finally:
        left = [call for _, call in calls.abort()]
        for call in left:
            call.cancel()
        if left:  # the stage fails with the first error; later ones are only collected
            await asyncio.gather(*left, return_exceptions=True)
        if stage.output is not None:
            stage.output.close()


async def _finished(call: Call) -> tuple[Any, float]:
    """The call's outcome once its thread is done, however often the waiting is cancelled."""
    while True:
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            if call.done():
                return call.result()


def _start_on_worker(stage: Stage[Any, Any], items: list[Any]) -> Call:
    """The call started on the stage's worker, counted in ``calls_on_worker`` until it
    returns."""
    stage.calls_on_worker += 1
    call = stage.worker.start(stage.process, items)
    call.add_done_callback(lambda _: _returned(stage))
    return call


def _returned(stage: Stage[Any, Any]) -> None:
    stage.calls_on_worker -= 1


def _call_here(stage: Stage[Any, Any], items: list[Any]) -> Call:
    """The call run on the event loop, as a finished future (its error included)."""
    call: Call = asyncio.get_running_loop().create_future()
    start = time.perf_counter()
    try:
        call.set_result((stage.process(items), time.perf_counter() - start))
    except Exception as e:
        call.set_exception(e)
    return call


async def _take_and_start(stage: Stage[Any, Any], calls: Channel[tuple[list[Any], Call]],
                          slots: asyncio.Semaphore) -> None:
    while True:
        await slots.acquire()
        try:
            items = stage.admit(await stage.next_items())
        except ChannelClosed:
            return
        if not items:
            slots.release()
            continue
        here = stage.calls_on_worker == 0 and stage.inline(items)  # nothing on it to race
        await calls.put((items, _call_here(stage, items) if here
                         else _start_on_worker(stage, items)))


async def _put(stage: Stage[Any, Any], outputs: Iterable[Any]) -> None:
    """A call's outputs into the stage's output: a list at once (one wake-up of the next
    stage for the call), a generator's one by one, each made just before it is put."""
    if isinstance(outputs, list):
        if outputs:
            await _output_of(stage, outputs[0]).put_many(outputs)
        return
    for item in outputs:
        await _output_of(stage, item).put(item)


def _output_of(stage: Stage[Any, Any], item: Any) -> Output[Any]:
    if stage.output is None:
        raise TypeError(f"stage {stage.name} has no output channel for {item!r}")
    return stage.output


async def _hand_on_in_order(stage: Stage[Any, Any], calls: Channel[tuple[list[Any], Call]],
                            slots: asyncio.Semaphore) -> None:
    while True:
        try:
            items, call = await calls.get()
        except ChannelClosed:
            return
        if stage.output is None:
            # A last stage's call has effects outside the pipeline (results written): one
            # under way when the pipeline is cancelled runs to its end on its thread anyway,
            # so it is waited for and its outcome counted, once; then the cancel goes on.
            try:
                result, seconds = await asyncio.shield(call)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):  # a failed call counted nothing
                    result, seconds = await _finished(call)
                    stage.outputs(items, result, seconds)
                raise
        else:
            result, seconds = await call
        if stage.call_ahead:
            slots.release()
        work = stage.work_seconds(result, seconds)
        if work is not None:
            stage.metrics.observe_stage(stage.name, work)
        await _put(stage, stage.outputs(items, result, seconds))
        if not stage.call_ahead:
            slots.release()
