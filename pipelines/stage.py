"""Stage: one step of a pipeline as a passive processor, and ``run_stage``, the one loop that
drives every stage.

A stage says what one call does (``process``, on its own Worker thread), what it takes
(``next_items``: from its input channel by default) and what it hands on (``outputs``); the
runner takes, calls, hands on in the order taken, records the metrics and closes the output
when the input ends. Stages overlap on separate cores where their work releases the GIL
(FFmpeg, OpenCV, ONNX Runtime), and one thread per stage keeps a CUDA context and stream with
the thread that uses them. Work that holds the interpreter gains nothing from a thread of
its own: a host stage's light calls run on the event loop instead (``Stage.light``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any, Generic, Self, TypeVar

from pipelines.channel import Channel, Input, Output
from pipelines.errors import ChannelClosed
from pipelines.metrics import PipelineMetrics
from pipelines.worker import Worker

In = TypeVar("In")
Out = TypeVar("Out")
# a call: its result, the seconds it took and the CPU seconds of the thread that ran it
Call = asyncio.Future[tuple[Any, float, float]]
# A call whose work (the CPU time of its thread) is under this runs on the event loop, where
# its stage allows it: handing it to a thread and back cost more than the call itself, since
# threads that want the interpreter at once only take turns at it (docs/BENCHMARKS.md).
LIGHT_CALL_S = 0.0005
COST_WEIGHT = 0.25  # the weight of the latest call in a stage's running cost per call
# a call taken: its items, the call, and whether its cost is weighed (not ``inline``'s)
Started = tuple[list[Any], Call, bool]


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
    call); a generator's outputs are put one by one, each made just before it is put.
    With ``light_here`` (host work that never waits on a device or the network) a call runs
    on the event loop while the stage's calls are light (``light``)."""

    def __init__(self, name: str, metrics: PipelineMetrics, *, input: Input[In] | None,
                 output: Output[Out] | None, worker_name: str | None = None,
                 threads: int = 1, take_at_once: int = 1, take_timeout_s: float = 0.0,
                 calls_at_once: int = 1, call_ahead: bool = False,
                 light_here: bool = False) -> None:
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
        self.light_here = light_here
        self.cost_s: float | None = None  # CPU seconds per call, recent calls weighed most
        self.cpu_here_s = 0.0  # CPU seconds of the calls run on the event loop
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

    def light(self, items: list[In]) -> bool:
        """Whether its calls run on the event loop, as each is cheaper there than a thread
        hand-over: where the stage allows it (``light_here``) and its recent calls took less
        than ``LIGHT_CALL_S`` of CPU (the first is measured on the worker; a call grown
        heavier sends the next ones back to it). Only ever while none of its calls is on the
        worker."""
        return self.light_here and self.cost_s is not None and self.cost_s < LIGHT_CALL_S

    def note_cost(self, cpu_s: float) -> None:
        """A call's CPU seconds (not ``inline``'s passing ones) into ``cost_s``."""
        self.cost_s = cpu_s if self.cost_s is None else \
            self.cost_s + COST_WEIGHT * (cpu_s - self.cost_s)

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
    calls: Channel[Started] = Channel(f"{stage.name}/calls", stage.calls_at_once)
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
        left = [call for _, call, _ in calls.abort()]
        for call in left:
            call.cancel()
        if left:  # the stage fails with the first error; later ones are only collected
            await asyncio.gather(*left, return_exceptions=True)
        if stage.output is not None:
            stage.output.close()


async def _finished(call: Call) -> tuple[Any, float, float]:
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
    """The call run on the event loop, as a finished future (its error included); its CPU
    time counted in the stage's ``cpu_here_s``."""
    call: Call = asyncio.get_running_loop().create_future()
    start, cpu = time.perf_counter(), time.thread_time()
    try:
        result = stage.process(items)
    except Exception as e:
        call.set_exception(e)
    else:
        cpu = time.thread_time() - cpu
        call.set_result((result, time.perf_counter() - start, cpu))
        stage.cpu_here_s += cpu
    return call


async def _take_and_start(stage: Stage[Any, Any], calls: Channel[Started],
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
        passing = stage.inline(items)
        # nothing on the worker to race
        here = stage.calls_on_worker == 0 and (passing or stage.light(items))
        await calls.put((items, _call_here(stage, items) if here
                         else _start_on_worker(stage, items), not passing))


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


async def _hand_on_in_order(stage: Stage[Any, Any], calls: Channel[Started],
                            slots: asyncio.Semaphore) -> None:
    while True:
        try:
            items, call, weighed = await calls.get()
        except ChannelClosed:
            return
        if stage.output is None:
            # A last stage's call has effects outside the pipeline (results written): one
            # under way when the pipeline is cancelled runs to its end on its thread anyway,
            # so it is waited for and its outcome counted, once; then the cancel goes on.
            try:
                result, seconds, cpu = await asyncio.shield(call)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):  # a failed call counted nothing
                    result, seconds, _ = await _finished(call)
                    stage.outputs(items, result, seconds)
                raise
        else:
            result, seconds, cpu = await call
        if weighed:
            stage.note_cost(cpu)
        if stage.call_ahead:
            slots.release()
        work = stage.work_seconds(result, seconds)
        if work is not None:
            stage.metrics.observe_stage(stage.name, work)
        await _put(stage, stage.outputs(items, result, seconds))
        if not stage.call_ahead:
            slots.release()
