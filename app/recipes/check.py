"""``vidpipe model check``: does the pipeline feed the model what its card says, and does the
model then say what it says when run directly?

The reference side decodes the clip at full size (``reference_picture``), prepares each frame
with the reference preprocessing (``reference_input``: the card's filter, pad, colour,
normalisation, written plainly) and runs the model file with a plain ONNX Runtime session on
the CPU. The pipeline side is a real run with the user's options; a tap on its inference stage
sees each batch exactly as the model gets it. Per frame: the input tensors' difference in grey
levels, and whether the detections match (same count; each reference box paired with one of
the same class at IoU >= 0.9, score within 0.02). For a variant (INT8, pruned) its detections
are also held against the FP32 model's, run directly on the reference input.

Both sides decode boxes with the pipeline's own output decoder (``decode_outputs``): what is
checked is what reaches the model and what the runtime makes of it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from app.run.sources import stream_ids
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from models.zoo import variant_label
from pipelines.build import build_pipeline
from pipelines.errors import SourceError
from pipelines.frame import Batch, Detections, Result, copied_to_host
from pipelines.geometry import Letterbox
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.postprocess.agreement import Agreement
from pipelines.postprocess.yolo import decode_outputs
from pipelines.preprocess.reference import input_difference, reference_input, reference_picture
from pipelines.sources.media import METADATA_ERRORS

DEFAULT_FRAMES = 300


class DirectModel:
    """The model file run plainly: one ONNX Runtime session on the CPU (every core), one frame
    a call; a file ONNX Runtime cannot load is a ModelLoadError naming it."""

    def __init__(self, path: Path, spec: ModelSpec) -> None:
        self._backend = OnnxRuntimeBackend(path)
        self._input = spec.input.name or self._backend.inputs[0].name
        self._spec = spec

    def detect(self, tensor: np.ndarray, letterbox: Letterbox) -> Detections:
        outputs = self._backend.infer({self._input: tensor[None]})
        spec = self._spec
        return decode_outputs(outputs, [letterbox], spec.output,
                              (spec.input.width, spec.input.height), spec.num_classes)[0]

    def close(self) -> None:
        self._backend.close()


def reference_pictures(clip: Path) -> Generator[np.ndarray, None, None]:
    """The clip's frames at full size in decode order (``reference_picture``)."""
    try:
        container = av.open(str(clip), metadata_errors=METADATA_ERRORS)
        stream = container.streams.video[0]
    except (av.FFmpegError, IndexError) as e:
        raise SourceError(f"{clip}: cannot decode it for the reference: {e}") from e
    with container:
        for frame in container.decode(stream):
            yield reference_picture(frame)


class ReferencePictures:
    """The clip's reference pictures handed out by index to whichever thread asks: decoded
    ahead as far as asked, each kept until taken."""

    def __init__(self, clip: Path) -> None:
        self._pictures = reference_pictures(clip)
        self._waiting: dict[int, np.ndarray] = {}
        self._next = 0
        self._lock = threading.Lock()

    def take(self, index: int) -> np.ndarray:
        with self._lock:
            while index >= self._next:
                picture = next(self._pictures, None)
                if picture is None:
                    raise SourceError(f"the reference decode ended before frame {index}")
                self._waiting[self._next] = picture
                self._next += 1
            taken = self._waiting.pop(index, None)
        if taken is None:
            raise SourceError(f"frame {index} was asked for twice")
        return taken

    def close(self) -> None:
        self._pictures.close()


@dataclass(slots=True)
class InputDiffs:
    """Grey-level differences of the pipeline's model input from the reference, all frames."""

    max: float = 0.0
    total: float = 0.0
    values: int = 0

    def add(self, got: np.ndarray, reference: np.ndarray, spec: ModelSpec) -> None:
        diff = input_difference(got, reference, spec.input)
        self.max = max(self.max, diff.max)
        self.total += diff.mean * reference.size
        self.values += reference.size

    @property
    def mean(self) -> float:
        return self.total / self.values if self.values else 0.0


class _Collect:
    wants_images = False

    def __init__(self) -> None:
        self.detections: dict[int, Detections] = {}

    def write(self, result: Result) -> None:
        self.detections[result.frame.index] = result.detections

    def close(self, commit: bool = True) -> None:
        pass


class ReferenceRun:
    """The reference path beside a pipeline run: each batch as the model gets it (the
    pipeline's input tap, on the inference thread) is held to the reference input of its
    frames, and the model is run directly on that reference (and the FP32 model beside a
    variant): the detections the pipeline's are compared with."""

    def __init__(self, model_path: Path, spec: ModelSpec, clip: Path, frames: int,
                 on_progress: Callable[[int, int | None], None] | None) -> None:
        label = variant_label(model_path)
        fp32_path = model_path.parent / spec.file if label is not None else None
        self.spec, self.frames, self.on_progress = spec, frames, on_progress
        self.direct = DirectModel(model_path, spec)
        self.fp32 = DirectModel(fp32_path, spec) if fp32_path is not None and \
            fp32_path.is_file() else None
        self.pictures = ReferencePictures(clip)
        self.diffs = InputDiffs()
        self.reference: dict[int, Detections] = {}
        self.against_fp32: dict[int, Detections] = {}
        self._lock = threading.Lock()

    def __call__(self, batch: Batch) -> None:
        tensor = copied_to_host(batch.tensor)
        with self._lock:
            for row, frame in zip(tensor, batch.frames, strict=True):
                wanted, letterbox = reference_input(self.pictures.take(frame.index),
                                                    self.spec.input)
                self.diffs.add(row, wanted, self.spec)
                self.reference[frame.index] = self.direct.detect(wanted, letterbox)
                if self.fp32 is not None:
                    self.against_fp32[frame.index] = self.fp32.detect(wanted, letterbox)
                if self.on_progress is not None:
                    self.on_progress(len(self.reference), self.frames)

    def close(self) -> None:
        self.pictures.close()
        for model in (self.direct, self.fp32):
            if model is not None:
                model.close()


def check_model(model_path: Path, spec: ModelSpec, clip: Path, options: PipelineOptions, *,
                frames: int = DEFAULT_FRAMES,
                on_progress: Callable[[int, int | None], None] | None = None,
                ) -> dict[str, Any]:
    """Run the reference and the pipeline on the first ``frames`` frames of ``clip``."""
    tap = ReferenceRun(model_path, spec, clip, frames, on_progress)
    sink = _Collect()
    run = options.model_copy(update={"input_tap": tap, "frame_limit": frames})
    try:
        pipeline = build_pipeline([clip], stream_ids([clip]), model_path, spec, [sink],
                                  PipelineMetrics(), run)
        asyncio.run(pipeline.run())
    finally:
        tap.close()
    return _report(model_path, spec, clip, options, pipeline, tap, sink.detections)


def _report(model_path: Path, spec: ModelSpec, clip: Path, options: PipelineOptions,
            pipeline: Pipeline, tap: ReferenceRun,
            found: dict[int, Detections]) -> dict[str, Any]:
    """The figures of a check: agreement, the input's difference, boxes on each side."""
    agreement = Agreement()
    for index in sorted(tap.reference):
        agreement.add(tap.reference[index], found.get(index))
    plan = pipeline.plan
    report: dict[str, Any] = {
        "model": spec.name, "file": model_path.name, "clip": str(clip),
        "interpolation": spec.input.interpolation,
        "options": {"device": options.device, "batch_size": options.batch_size,
                    "ffmpeg_resize": options.ffmpeg_resize, "runtime": options.runtime},
        "runtime": plan.runtime.runtime if plan is not None and plan.runtime else None,
        **agreement.as_dict(),
        "max_input_diff": round(tap.diffs.max, 4), "mean_input_diff": round(tap.diffs.mean, 5),
        "frames_with_detections_reference": sum(len(d) > 0 for d in tap.reference.values()),
        "frames_with_detections_pipeline": sum(len(d) > 0 for i, d in found.items()
                                               if i in tap.reference),
    }
    if tap.fp32 is not None:
        versus = Agreement()
        for index in sorted(tap.against_fp32):
            versus.add(tap.against_fp32[index], found.get(index))
        report["fp32"] = {"file": spec.file, **versus.as_dict()}
    return report


def reference_detections(model_path: Path, spec: ModelSpec, clip: Path,
                         frames: int | None = None) -> list[Detections]:
    """The model run directly on the reference input of each frame of ``clip`` (the first
    ``frames``): what an accuracy figure of the pipeline is held to."""
    direct = DirectModel(model_path, spec)
    found: list[Detections] = []
    pictures = reference_pictures(clip)
    try:
        for picture in pictures:
            if frames is not None and len(found) >= frames:
                break
            found.append(direct.detect(*reference_input(picture, spec.input)))
    finally:
        pictures.close()
        direct.close()
    return found
