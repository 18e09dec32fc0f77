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

TAKE_AT_ONCE = 4  # most frames prepared per call to the worker


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
                    # the frames already waiting, in one call to the worker: each hand-over
                    # costs the event loop a future, a wake-up and a callback
                    frames = await self.take(self.input, TAKE_AT_ONCE)
                except ChannelClosed:
                    return
                batches, seconds = await self.call(self._prepare, frames)
                for frame, batch in zip(frames, batches, strict=True):
                    frame.timings["preprocess"] = seconds / len(frames)
                    await self.output.put(batch)
        finally:
            self.output.close()

    def _prepare(self, frames: list[Frame]) -> list[Batch]:
        """A Batch of one per frame (the inference stage batches across streams)."""
        return [self.preprocessor.prepare(frame) for frame in frames]
