"""PostprocessStage: model outputs -> Detections in source pixels -> one Result per frame."""

from __future__ import annotations

from models.spec import ModelSpec
from pipelines.channel import Channel
from pipelines.errors import ChannelClosed
from pipelines.frame import Batch, Detections, Result
from pipelines.metrics import PipelineMetrics
from pipelines.postprocess.yolo import decode_outputs
from pipelines.stage import Stage


class PostprocessStage(Stage):
    """Decodes boxes for a whole batch on its worker, then hands out per-frame Results.

    Frames keep their pixels only when ``keep_images`` (a sink draws on them); otherwise the
    image is released here so that results waiting for a slow sink hold no frame memory.
    """

    def __init__(self, spec: ModelSpec, input: Channel[Batch], output: Channel[Result],
                 metrics: PipelineMetrics, *, keep_images: bool = False) -> None:
        super().__init__("postprocess", metrics)
        self.spec = spec
        self.input = input
        self.output = output
        self.keep_images = keep_images

    async def run(self) -> None:
        try:
            while True:
                try:
                    batch, waited = await self.input.get_timed()
                except ChannelClosed:
                    return
                self.metrics.observe_wait(self.name, waited)
                detections, seconds = await self.call(self._decode, batch)
                for frame, boxes in zip(batch.frames, detections, strict=True):
                    kept = frame if self.keep_images else frame.without_image()
                    frame.timings["postprocess"] = seconds
                    await self.output.put(Result(kept, boxes, frame.timings))
        finally:
            self.output.close()

    def _decode(self, batch: Batch) -> list[Detections]:
        spec = self.spec
        return decode_outputs(batch.outputs, batch.letterboxes, spec.output,
                              (spec.input.width, spec.input.height), spec.num_classes)
