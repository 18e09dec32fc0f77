"""The inference stage alone: calls queued behind the running one, order, errors, the batch
wait."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import numpy as np
import pytest

from pipelines.channel import Channel
from pipelines.frame import Batch, Frame
from pipelines.infer.runtime import HostRuntime
from pipelines.infer.stage import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.stage import run_stage
from tests.support.fakes import FAKE_SPEC, FakeBackend, drain


def _batch(index: int) -> Batch:
    image = np.full((48, 64, 3), index, np.uint8)
    return OpenCVPreprocessor(FAKE_SPEC.input).prepare(Frame("s", index, None, 0.0, image))


class _HeldBackend(FakeBackend):
    """Every call waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def infer(self, feeds):
        self.go.wait(5)
        return super().infer(feeds)


@pytest.mark.parametrize(("calls", "queued"), [(1, 0), (1, 1), (2, 0), (2, 1)])
def test_a_stage_takes_as_many_batches_as_it_has_calls_at_once_and_queued(calls, queued):
    backend = _HeldBackend()
    metrics = PipelineMetrics()
    inp: Channel[Batch] = Channel("prepared", 8)
    out: Channel[Batch] = Channel("inferred", 8)
    stage = InferStage(HostRuntime(backend, "image"), inp, out, metrics, batch_size=1,
                       batch_timeout_ms=0, calls_at_once=calls, queued=queued)

    async def main() -> tuple[int, list[Batch]]:
        for i in range(6):
            await inp.put(_batch(i))
        inp.close()
        task = asyncio.create_task(run_stage(stage))
        await asyncio.sleep(0.1)  # every call is held: only the slots decide what is taken
        taken = 6 - len(inp)
        backend.go.set()
        results = await drain(out)
        await task
        return taken, results

    try:
        taken, results = asyncio.run(main())
    finally:
        stage.close()
    assert taken == calls + queued
    assert [b.frames[0].index for b in results] == list(range(6))


def test_a_finished_batch_goes_on_before_the_next_one_comes():
    # a camera: the channel stays open and empty after one frame; its result must not wait
    metrics = PipelineMetrics()
    inp: Channel[Batch] = Channel("prepared", 8)
    out: Channel[Batch] = Channel("inferred", 8)
    stage = InferStage(HostRuntime(FakeBackend(), "image"), inp, out, metrics, batch_size=4,
                       batch_timeout_ms=0, queued=1)

    async def main() -> int:
        task = asyncio.create_task(run_stage(stage))
        await inp.put(_batch(0))
        result = await asyncio.wait_for(out.get(), 5)
        inp.close()
        await task
        return result.frames[0].index

    try:
        assert asyncio.run(main()) == 0
    finally:
        stage.close()


def _batch_sizes_of(stage: InferStage, inp: Channel[Batch], out: Channel[Batch],
                    arrivals: list[float], release_after_s: float | None = None) -> list[int]:
    """Frames put at ``arrivals`` (seconds from the start, the input left open), the sizes of
    the batches they came out in; a held backend let go after ``release_after_s``."""
    async def main() -> list[int]:
        task = asyncio.create_task(run_stage(stage))
        start = time.monotonic()
        for i, at in enumerate(arrivals):
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            await inp.put(_batch(i))
        if release_after_s is not None:
            await asyncio.sleep(max(0.0, start + release_after_s - time.monotonic()))
            stage.runtime.backend.go.set()  # type: ignore[attr-defined]
        sizes = []
        while sum(sizes) < len(arrivals):
            sizes.append(len(await asyncio.wait_for(out.get(), 5)))
        inp.close()
        await task
        return sizes

    try:
        return asyncio.run(main())
    finally:
        stage.close()


def test_a_host_stage_with_a_free_thread_runs_a_lone_frame_without_the_batch_wait():
    # a CPU call holds its thread to the end: waiting for a batch while one is free only
    # delays the frame (the wait here, 3 s, would outlast the test's 1 s for the result)
    stage = InferStage(HostRuntime(FakeBackend(), "image"), inp := Channel("prepared", 8),
                       out := Channel("inferred", 8), PipelineMetrics(), batch_size=4,
                       batch_timeout_ms=3000, calls_at_once=2, queued=1)

    async def main() -> float:
        task = asyncio.create_task(run_stage(stage))
        start = time.monotonic()
        await inp.put(_batch(0))
        await asyncio.wait_for(out.get(), 1)
        taken = time.monotonic() - start
        inp.close()
        await task
        return taken

    try:
        assert asyncio.run(main()) < 1
    finally:
        stage.close()


def test_a_host_stage_waits_for_a_batch_while_every_thread_is_busy():
    # frame 0's call holds the one thread; frame 1 is taken for the queued call and, the
    # thread still busy, waits for frame 2 (0.1 s later) to join it
    backend = _HeldBackend()
    stage = InferStage(HostRuntime(backend, "image"), inp := Channel("prepared", 8),
                       out := Channel("inferred", 8), PipelineMetrics(), batch_size=4,
                       batch_timeout_ms=1000, calls_at_once=1, queued=1)
    assert _batch_sizes_of(stage, inp, out, [0.0, 0.1, 0.2], release_after_s=0.5) == [1, 2]


class _DeviceRuntime(HostRuntime):
    timed_on_device = True  # a call only enqueues: its thread is never busy for long


def test_a_device_stage_waits_for_a_batch_with_a_thread_free():
    stage = InferStage(_DeviceRuntime(FakeBackend(), "image"), inp := Channel("prepared", 8),
                       out := Channel("inferred", 8), PipelineMetrics(), batch_size=4,
                       batch_timeout_ms=1000, calls_at_once=2)
    assert _batch_sizes_of(stage, inp, out, [0.0, 0.1]) == [2]


def test_a_failing_call_fails_the_stage_with_its_own_error(caplog):
    # two calls at once; the second fails first, then the first: the stage raises the first
    # one's error (batches go on in order), and the second's is collected, not left behind
    class Broken(FakeBackend):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0
            self.second_failed = threading.Event()
            self._lock = threading.Lock()

        def infer(self, feeds):
            with self._lock:
                self.calls += 1
                first = self.calls == 1
            if first:
                self.second_failed.wait(5)
                time.sleep(0.05)  # the second call's failure reaches the event loop first
                raise RuntimeError("backend died")
            self.second_failed.set()
            raise RuntimeError("backend died again")

    metrics = PipelineMetrics()
    inp: Channel[Batch] = Channel("prepared", 8)
    out: Channel[Batch] = Channel("inferred", 8)
    stage = InferStage(HostRuntime(Broken(), "image"), inp, out, metrics, batch_size=1,
                       calls_at_once=2)

    async def main() -> None:
        for i in range(4):
            await inp.put(_batch(i))
        await asyncio.wait_for(run_stage(stage), 5)  # the input stays open: the error ends it

    try:
        with pytest.raises(RuntimeError, match="backend died$"):
            asyncio.run(main())
    finally:
        stage.close()
    assert out.closed
    gc.collect()  # a task whose error nobody collected says so when it is freed
    assert "never retrieved" not in caplog.text


def test_queued_calls_must_not_be_negative():
    with pytest.raises(ValueError, match="queued"):
        InferStage(HostRuntime(FakeBackend(), "image"), Channel("a", 1), Channel("b", 1),
                   PipelineMetrics(), queued=-1)
