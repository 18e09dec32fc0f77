"""A call of skipped frames only runs on the event loop (no thread hand-over), but never
beside a call still on the stage's worker, and the outputs keep the order taken."""

from __future__ import annotations

import asyncio
import threading

from pipelines.channel import Channel
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage, run_stage


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
