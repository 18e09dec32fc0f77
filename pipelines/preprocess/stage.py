"""PreprocessStage: one per stream; turns Frames into model-ready Batches of one.

It feeds the shared channel in front of the inference stage, where frames of all streams meet
and are batched together.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.channel import Channel
from pipelines.errors import ChannelClosed
from pipelines.frame import Batch, Frame
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage


class Preprocessor(Protocol):
    def prepare(self, frame: Frame) -> Batch: ...


class PreprocessStage(Stage):
    def __init__(self, stream_id: str, preprocessor: Preprocessor, input: Channel[Frame],
                 output: Channel[Batch], metrics: PipelineMetrics) -> None:
        super().__init__("preprocess", metrics, worker_name=f"preprocess-{stream_id}")
        self.preprocessor = preprocessor
        self.input = input
        self.output = output

    async def run(self) -> None:
        try:
            while True:
                try:
                    frame, waited = await self.input.get_timed()
                except ChannelClosed:
                    return
                self.metrics.observe_wait(self.name, waited)
                batch, seconds = await self.call(self.preprocessor.prepare, frame)
                frame.timings["preprocess"] = seconds
                await self.output.put(batch)
        finally:
            self.output.close()
