"""PreprocessStage: one per stream; turns Frames into model-ready Batches of one.

It feeds the shared channel in front of the inference stage, where frames of all streams meet
and are batched together.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.channel import Channel, Output
from pipelines.frame import Batch, Frame
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

TAKE_AT_ONCE = 4  # most frames prepared per call to the worker


class Preprocessor(Protocol):
    """Turns frames into model-ready batches on one device: OpenCV on the CPU, CV-CUDA or
    torch on a GPU. Passive and synchronous; one instance serves one thread."""

    def prepare(self, frame: Frame) -> Batch: ...

    def close(self) -> None: ...


class PreprocessStage(Stage[Frame, Batch]):
    """Whatever frames are waiting (up to TAKE_AT_ONCE) in one call to the worker: each
    hand-over costs the event loop a future, a wake-up and a callback."""

    def __init__(self, stream_id: str, preprocessor: Preprocessor, input: Channel[Frame],
                 output: Output[Batch], metrics: PipelineMetrics) -> None:
        super().__init__("preprocess", metrics, input=input, output=output,
                         worker_name=f"preprocess-{stream_id}", take_at_once=TAKE_AT_ONCE)
        self.preprocessor = preprocessor

    def process(self, items: list[Frame]) -> list[Batch]:
        """A Batch of one per frame (the inference stage batches across streams)."""
        for frame in items:
            frame.materialize()  # a live stream's picture is converted here, if it was left
        return [self.preprocessor.prepare(frame) for frame in items]

    def outputs(self, items: list[Frame], result: list[Batch], seconds: float) -> list[Batch]:
        for frame in items:
            frame.timings["preprocess"] = seconds / len(items)
        return result

    def close(self) -> None:
        super().close()
        self.preprocessor.close()
