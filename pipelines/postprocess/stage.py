"""PostprocessStage: model outputs -> Detections in source pixels -> one Result per frame.

The work is a Postprocessor's: ``HostPostprocessor`` decodes numpy outputs on the CPU,
``pipelines.postprocess.gpu.TorchPostprocessor`` decodes and suppresses boxes on the GPU and
copies only the kept ones out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from models.spec import ModelSpec
from pipelines.channel import Channel
from pipelines.frame import Batch, Detections, Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.postprocess.yolo import decode_outputs
from pipelines.stage import Stage


@dataclass(slots=True)
class Decoded:
    """One batch after postprocessing: each frame's boxes, the frames to hand on (on the
    host; with their pixels only where a sink draws on them) and, where the runtime is
    timed on the device, the batch's inference time read from its events."""

    detections: list[Detections]
    frames: list[Frame]
    infer_s: float | None = None
    passed: bool = False  # a frame the model did not see: nothing decoded

class Postprocessor(Protocol):
    """``concurrent``: ``decode`` may run on several threads at once (no state of its own);
    ``on_host``: it works on the host alone, never waiting for a device."""

    concurrent: bool
    on_host: bool

    def decode(self, batch: Batch, keep_images: bool) -> Decoded: ...

    def close(self) -> None: ...


class HostPostprocessor:
    """numpy box decoding and NMS for outputs on the host."""

    concurrent = True  # pure functions of the batch
    on_host = True

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def decode(self, batch: Batch, keep_images: bool) -> Decoded:
        spec = self.spec
        detections = decode_outputs(batch.outputs, batch.letterboxes, spec.output,
                                    (spec.input.width, spec.input.height), spec.num_classes)
        frames = batch.frames if keep_images else [f.without_image() for f in batch.frames]
        return Decoded(detections, frames)

    def close(self) -> None:
        """Nothing to release."""


class PostprocessStage(Stage[Batch | Frame, Result]):
    """Decodes boxes for a whole batch on its worker, then hands out per-frame Results; a
    frame the model did not see (``skipped``) becomes a Result with no boxes.

    Frames keep their pixels only when ``keep_images`` (a sink draws on them); otherwise the
    image is released here so that results waiting for a slow sink hold no frame memory.
    With ``calls_at_once`` > 1 and a ``concurrent`` postprocessor, that many batches are decoded at
    once (results still leave in order): a shared detector's one postprocess thread was its
    bottleneck at 16 streams, behind several inference calls at once. A host postprocessor's
    light calls (a batch with few candidate boxes) run on the event loop (``Stage.light``).
    """

    def __init__(self, postprocessor: Postprocessor, input: Channel[Batch | Frame],
                 output: Channel[Result], metrics: PipelineMetrics, *,
                 keep_images: bool = False, calls_at_once: int = 1) -> None:
        calls = calls_at_once if postprocessor.concurrent else 1
        super().__init__("postprocess", metrics, input=input, output=output, threads=calls,
                         calls_at_once=calls, call_ahead=True,
                         light_here=postprocessor.on_host)
        self.postprocessor = postprocessor
        self.keep_images = keep_images

    def inline(self, items: list[Batch | Frame]) -> bool:
        return isinstance(items[0], Frame)  # a skipped frame, passed on without boxes

    def process(self, items: list[Batch | Frame]) -> Decoded:
        (batch,) = items
        if isinstance(batch, Frame):
            frame = batch if self.keep_images else batch.without_image()
            return Decoded([Detections.empty()], [frame], passed=True)
        return self.postprocessor.decode(batch, self.keep_images)

    def work_seconds(self, result: Decoded, seconds: float) -> float | None:
        return None if result.passed else seconds

    def outputs(self, items: list[Batch | Frame], result: Decoded,
                seconds: float) -> list[Result]:
        if result.infer_s is not None:
            self.metrics.observe_stage("infer", result.infer_s)
        found = []
        for frame, boxes in zip(result.frames, result.detections, strict=True):
            frame.timings["postprocess"] = seconds
            if result.infer_s is not None:
                frame.timings["infer"] = result.infer_s
            found.append(Result(frame, boxes, frame.timings))
        return found

    def close(self) -> None:
        super().close()
        self.postprocessor.close()
