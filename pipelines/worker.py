"""Worker: the thread (or threads) that runs a stage's calls, each timed on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

R = TypeVar("R")


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

    def start(self, fn: Callable[..., R], *args: object
              ) -> asyncio.Future[tuple[R, float, float]]:
        """``fn(*args)`` started on the worker thread: a future of the event loop (no task
        of its own) of its result, the seconds it took there (the time on the thread, not
        counting the hand-over) and the thread's CPU seconds in them."""
        return asyncio.get_running_loop().run_in_executor(self._executor, _timed, fn, args)

    def close(self) -> None:
        """Wait for the call in progress, if any, then end the thread. Idempotent."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _timed(fn: Callable[..., R], args: tuple[object, ...]) -> tuple[R, float, float]:
    start, cpu = time.perf_counter(), time.thread_time()
    result = fn(*args)
    return result, time.perf_counter() - start, time.thread_time() - cpu
