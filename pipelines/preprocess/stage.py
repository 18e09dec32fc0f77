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


class PreprocessStage(Stage[Frame, Batch | Frame]):
    """Whatever frames are waiting (up to TAKE_AT_ONCE) in one call to the worker: each
    hand-over costs the event loop a future, a wake-up and a callback. A frame the model is
    not to see (``skipped``) passes as it is."""

    def __init__(self, stream_id: str, preprocessor: Preprocessor, input: Channel[Frame],
                 output: Output[Batch | Frame], metrics: PipelineMetrics) -> None:
        super().__init__("preprocess", metrics, input=input, output=output,
                         worker_name=f"preprocess-{stream_id}", take_at_once=TAKE_AT_ONCE)
        self.preprocessor = preprocessor

    def inline(self, items: list[Frame]) -> bool:
        return all(frame.skipped for frame in items)

    def process(self, items: list[Frame]) -> list[Batch | Frame]:
        """A Batch of one per frame (the inference stage batches across streams)."""
        out: list[Batch | Frame] = []
        for frame in items:
            if frame.skipped:
                out.append(frame)
                continue
            frame.materialize()  # a live stream's picture is converted here, if it was left
            out.append(self.preprocessor.prepare(frame))
        return out

    def work_seconds(self, result: list[Batch | Frame], seconds: float) -> float | None:
        """None for a call of skipped frames only: it prepared nothing."""
        return seconds if any(isinstance(r, Batch) for r in result) else None

    def outputs(self, items: list[Frame], result: list[Batch | Frame],
                seconds: float) -> list[Batch | Frame]:
        prepared = [f for f in items if not f.skipped]
        for frame in prepared:
            frame.timings["preprocess"] = seconds / len(prepared)
        return result

    def close(self) -> None:
        super().close()
        self.preprocessor.close()
