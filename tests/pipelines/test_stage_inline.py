"""A call of skipped frames only runs on the event loop (no thread hand-over), but never
beside a call still on the stage's worker, and the outputs keep the order taken; a stage
that allows it runs its light calls there too."""

from __future__ import annotations

import asyncio
import threading
import time

from pipelines.channel import Channel
from pipelines.metrics import PipelineMetrics
from pipelines.stage import COST_WEIGHT, LIGHT_CALL_S, Stage, run_stage


class Echo(Stage[str, str]):
    """Hands each item on; ``hold`` items wait on the worker until released. Two calls may
    be under way at once (as an inference stage's), so a call is taken while one runs."""

    def __init__(self, input: Channel[str], output: Channel[str]) -> None:
        super().__init__("echo", PipelineMetrics(), input=input, output=output,
                         calls_at_once=2)
        self.threads: dict[str, str] = {}
        self.release = threading.Event()

    def inline(self, items: list[str]) -> bool:
        return all(item.startswith("skip") for item in items)

    def process(self, items: list[str]) -> list[str]:
        for item in items:
            self.threads[item] = threading.current_thread().name
            if item.startswith("hold"):
                self.release.wait(5)
        return items

    def outputs(self, items: list[str], result: list[str], seconds: float) -> list[str]:
        return result


def test_skipped_calls_run_on_the_loop_only_while_the_worker_is_free():
    async def main() -> tuple[Echo, list[str]]:
        source: Channel[str] = Channel("in", 8)
        sink: Channel[str] = Channel("out", 8)
        stage = Echo(source, sink)
        runner = asyncio.create_task(run_stage(stage))
        await source.put("skip-0")
        assert await sink.get() == "skip-0"
        await source.put("hold-1")  # on the worker, held there
        await asyncio.sleep(0.05)
        await source.put("skip-2")  # taken while hold-1 is on the worker: it queues behind
        await asyncio.sleep(0.05)
        stage.release.set()
        got = [await sink.get(), await sink.get()]
        await source.put("skip-3")  # the worker is free again
        got.append(await sink.get())
        source.close()
        await runner
        stage.close()
        return stage, got

    stage, got = asyncio.run(main())
    assert got == ["hold-1", "skip-2", "skip-3"]
    loop = threading.main_thread().name
    assert stage.threads["skip-0"] == loop == stage.threads["skip-3"]
    assert stage.threads["hold-1"] != loop and stage.threads["skip-2"] != loop


class Costly(Stage[str, str]):
    """Hands each item on; a ``heavy`` one first spends 5 ms of its thread's CPU."""

    def __init__(self, input: Channel[str], output: Channel[str], light_here: bool) -> None:
        super().__init__("costly", PipelineMetrics(), input=input, output=output,
                         light_here=light_here)
        self.threads: list[str] = []

    def process(self, items: list[str]) -> list[str]:
        self.threads.append(threading.current_thread().name)
        if items[0] == "heavy":
            start = time.thread_time()
            while time.thread_time() - start < 0.005:
                pass
        return items

    def outputs(self, items: list[str], result: list[str], seconds: float) -> list[str]:
        return result


def _one_by_one(light_here: bool, items: list[str]) -> list[bool]:
    """Each item through a Costly stage, one call at a time: whether each call ran on the
    event loop's thread."""
    async def main() -> Costly:
        source: Channel[str] = Channel("in", 1)
        sink: Channel[str] = Channel("out", 1)
        stage = Costly(source, sink, light_here)
        runner = asyncio.create_task(run_stage(stage))
        for item in items:
            await source.put(item)
            assert await sink.get() == item
        source.close()
        await runner
        stage.close()
        return stage

    stage = asyncio.run(main())
    return [name == threading.main_thread().name for name in stage.threads]


def test_light_calls_run_on_the_loop_until_one_costs_more_than_a_hand_over():
    here = _one_by_one(True, ["light"] * 3 + ["heavy"] + ["light"] * 8)
    assert here[:4] == [False, True, True, True]  # the first is measured on the worker
    assert LIGHT_CALL_S < 0.005 * COST_WEIGHT
    assert here[4] is False  # the heavy call sent the next ones back to the worker
    assert here[-1] is True  # until light calls brought the stage's cost down again


def test_a_stage_that_does_not_allow_it_keeps_every_call_on_its_worker():
    assert not any(_one_by_one(False, ["light"] * 6))
