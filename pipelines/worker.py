"""Worker: the thread (or threads) that runs a stage's calls, each timed on it.

A call's outcome reaches the event loop as one callback (``call_soon_threadsafe``) that
settles the loop's future, with no ``concurrent.futures.Future`` in between: an executor's
future, chained to the loop's, cost each call two more callbacks on the loop and a condition
variable's round on both sides (a fifth of a hand-over's CPU: docs/BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")
# a call to make: the loop to tell, its future, the function and its arguments
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any],
             tuple[object, ...]]


class Worker:
    """The thread (or ``threads`` threads, started with the first call) that runs a stage's
    calls, and times them. One thread runs one call at a time; with more, as many calls run
    at once."""

    def __init__(self, name: str, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"worker threads must be >= 1, got {threads}")
        self.name = name
        self.threads = threads
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._running: list[threading.Thread] = []
        self._closed = False

    def start(self, fn: Callable[..., R], *args: object
              ) -> asyncio.Future[tuple[R, float, float]]:
        """``fn(*args)`` started on the worker thread: a future of the event loop (no task
        of its own) of its result, the seconds it took there (the time on the thread, not
        counting the hand-over) and the thread's CPU seconds in them."""
        if self._closed:
            raise RuntimeError(f"worker {self.name} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[R, float, float]] = loop.create_future()
        if not self._running:
            self._running = [threading.Thread(target=self._run, name=f"vidpipe-{self.name}_{i}",
                                              daemon=True) for i in range(self.threads)]
            for thread in self._running:
                thread.start()
        self._jobs.put((loop, future, fn, args))
        return future

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wait for the calls in progress, if any, then end the threads; a call not yet
        started is cancelled. Idempotent."""
        if not self._closed:
            self._closed = True
            for _ in self._running:
                self._jobs.put(None)
        for thread in self._running:
            if thread is not threading.current_thread():
                thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            if future.cancelled():  # given up before it started (as an executor's call)
                continue
            if self._closed:  # closing: what was not started is not run
                _tell(loop, future.cancel)
                continue
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                result = fn(*args)
            except BaseException as e:  # the call's error is its future's, as an executor's
                _tell(loop, _failed, future, e)
            else:
                _tell(loop, _done, future,
                      (result, time.perf_counter() - start, time.thread_time() - cpu))


def _tell(loop: asyncio.AbstractEventLoop, callback: Callable[..., object],
          *args: object) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: nobody waits for the call any more
        pass


def _done(future: asyncio.Future[Any], outcome: object) -> None:
    if not future.cancelled():
        future.set_result(outcome)


def _failed(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.cancelled():
        future.set_exception(error)
