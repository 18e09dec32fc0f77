"""A Worker runs calls on its own thread and settles the event loop's futures: results with
their times, errors as errors; a call given up, or not started when it closes, never runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pipelines.worker import Worker


def test_a_call_comes_back_with_its_times_and_an_error_as_itself():
    async def main() -> None:
        worker = Worker("w")
        try:
            result, seconds, cpu = await worker.start(
                lambda a, b: (a + b, threading.current_thread().name), 2, 3)
            assert result == (5, "vidpipe-w_0")
            assert seconds >= 0 and cpu >= 0
            with pytest.raises(ZeroDivisionError):
                await worker.start(lambda: 1 / 0)
        finally:
            worker.close()

    asyncio.run(main())


def test_calls_given_up_or_not_started_at_close_never_run():
    ran: list[str] = []
    release = threading.Event()

    def call(name: str) -> str:
        ran.append(name)
        if name == "first":
            release.wait(5)
        return name

    async def main() -> Worker:
        worker = Worker("w")
        first = worker.start(call, "first")
        given_up = worker.start(call, "given up")
        given_up.cancel()
        queued = worker.start(call, "queued")
        while not ran:  # the first call is on the thread
            await asyncio.sleep(0.01)
        closing = asyncio.get_running_loop().run_in_executor(None, worker.close)
        while not worker.closed:
            await asyncio.sleep(0.01)
        release.set()
        await closing  # waited for the first call to end
        assert (await first)[0] == "first"
        with pytest.raises(asyncio.CancelledError):
            await queued
        return worker

    worker = asyncio.run(main())
    assert ran == ["first"]
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(_start(worker))


async def _start(worker: Worker) -> None:
    await worker.start(lambda: None)
