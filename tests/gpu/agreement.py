"""What the GPU tests and bench_gpu.py share: a detector whose answers are stable under float
noise, the two pipelines run on the same clip, how their detections are compared, and
``need`` (skip a test whose library is missing, or fail for a carried one under REQUIRE_GPU).

``RectangleDetector`` finds make_test_clip's coloured rectangles (yolov8 layout, one class):
a pixel is foreground as its colour moves away from the texture's mid grey (a clipped ramp:
texture pixels give 0, rectangle pixels 1), and each stride-8 cell scores the fraction of a
rectangle-sized window around it that is foreground, less a small tie-breaker that differs
between any two cells closer than three apart. Its scores move smoothly with the pixels, and
two overlapping cells never tie, so a grey level of difference in decoding or resizing (NVDEC
against FFmpeg, torch against OpenCV) changes scores by about 1e-4 and almost no kept box:
with +-2 levels of noise added to every decoded pixel, the CPU pipeline and the torch path
agreed on 99.3-100% of the boxes over eight clips (320x240 to 1920x1080). A disagreement
between the pipelines then means a real difference, not a coin flip between two equal cells.
(A trained detector would be the realistic check; none ships that torch can run: the zoo's
SSD has TensorFlow NMS loops inside.)
"""

from __future__ import annotations

import asyncio
import importlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from models.spec import ModelSpec
from pipelines.backends import StageBackends, host_backends
from pipelines.build import wire_pipeline
from pipelines.cuda import library_available
from pipelines.frame import Detections
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.postprocess.nms import box_iou
from tests.support.requires import unavailable

STRIDE = 8


class RectangleDetector(nn.Module):
    """[B, 3, H, W] RGB in [0, 1] -> [B, 5, N] yolov8 rows for one class ("rectangle")."""

    def __init__(self, input_size: tuple[int, int], box: tuple[int, int]) -> None:
        super().__init__()
        width, height = input_size
        if width % STRIDE or height % STRIDE:
            raise ValueError(f"input size must be a multiple of {STRIDE}, got {input_size}")
        self.box = box
        bw, bh = box
        left, top = bw // 2 - STRIDE // 2, bh // 2 - STRIDE // 2
        self.pads = (left, bw - 1 - left, top, bh - 1 - top)  # window centred on each cell
        rows, cols = height // STRIDE, width // STRIDE
        ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        centres = torch.stack([xs.flatten(), ys.flatten()]).float() * STRIDE + STRIDE / 2
        sizes = torch.tensor([[float(bw)], [float(bh)]]).expand(2, rows * cols)
        self.register_buffer("boxes", torch.cat([centres, sizes])[None])
        # neighbours within two cells always differ here: their near-ties break the same way
        tiebreak = 1e-3 * ((ys.flatten() % 3) * 3 + xs.flatten() % 3)
        self.register_buffer("tiebreak", tiebreak.float()[None, None])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        distance = (images - 0.5).abs().amax(dim=1, keepdim=True)
        foreground = ((distance - 0.10) * 10.0).clamp(0.0, 1.0)
        cover = F.avg_pool2d(F.pad(foreground, self.pads), (self.box[1], self.box[0]), STRIDE)
        score = cover.flatten(2) - self.tiebreak
        return torch.cat([self.boxes.expand(images.shape[0], -1, -1), score], 1)


def rectangle_spec(input_size: tuple[int, int], name: str = "rectangles") -> ModelSpec:
    width, height = input_size
    return ModelSpec.model_validate({
        "name": name, "file": "model.onnx",
        "input": {"name": "images", "width": width, "height": height, "layout": "NCHW",
                  "dtype": "float32", "color": "RGB", "resize": "letterbox", "pad_value": 114},
        "output": {"format": "yolov8", "score_threshold": 0.75, "iou_threshold": 0.45},
        "classes": ["rectangle"],
    })


def clip_box(clip_size: tuple[int, int], input_size: tuple[int, int]) -> tuple[int, int]:
    """make_test_clip's rectangle size, seen through the letterbox of ``input_size``."""
    cw, ch = clip_size
    scale = min(input_size[0] / cw, input_size[1] / ch)
    return max(3, round(max(2, cw // 6) * scale)), max(3, round(max(2, ch // 6) * scale))


def write_rectangle_model(folder: Path, clip_size: tuple[int, int],
                          input_size: tuple[int, int]) -> tuple[Path, ModelSpec, nn.Module]:
    """model.onnx + its spec + the module, for clips of ``clip_size``."""
    model = RectangleDetector(input_size, clip_box(clip_size, input_size)).eval()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    example = torch.zeros(1, 3, input_size[1], input_size[0])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=17,
                          input_names=["images"], output_names=["output0"],
                          dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}})
    graph = onnx.load(str(path))
    dims = graph.graph.output[0].type.tensor_type.shape.dim
    for dim, value in zip(dims[1:], (5, (input_size[0] // STRIDE) * (input_size[1] // STRIDE)),
                          strict=True):
        dim.Clear()
        dim.dim_value = value
    onnx.save(graph, str(path))
    return path, rectangle_spec(input_size), model


class CollectSink:
    """Keeps each frame's detections by (stream, index)."""

    wants_images = False

    def __init__(self) -> None:
        self.found: dict[tuple[str, int], Detections] = {}

    def write(self, result: Any) -> None:
        self.found[(result.frame.stream_id, result.frame.index)] = result.detections

    def close(self, commit: bool = True) -> None:
        pass


def run_cpu_pipeline(clip: Path, model_path: Path, spec: ModelSpec,
                     frames: int | None = None) -> dict[tuple[str, int], Detections]:
    """The CPU pipeline (FFmpeg, OpenCV, ONNX Runtime, numpy NMS) on one clip."""
    from models.backends.onnxruntime import OnnxRuntimeBackend
    from pipelines.decode.pyav import PyAVDecoder
    from pipelines.sources.file import FileSource

    sink = CollectSink()
    options = PipelineOptions(batch_size=4, frame_limit=frames)
    backend = OnnxRuntimeBackend(model_path, threads=2)
    backends = host_backends(lambda s: PyAVDecoder(s.video), backend, spec)
    pipeline = wire_pipeline([FileSource(clip, "clip")], backends, spec, [sink],
                             PipelineMetrics(), options, 4)
    asyncio.run(pipeline.run())
    return sink.found


def run_gpu_pipeline(clips: Sequence[Path], spec: ModelSpec, backend: Any,
                     decoder_for: Callable[[Any], Any], make_preprocessor: Callable[[], Any],
                     device: torch.device, *, batch_size: int = 8, frames: int | None = None,
                     metrics: PipelineMetrics | None = None,
                     ) -> tuple[dict[tuple[str, int], Detections], PipelineMetrics, float]:
    """The pipeline with GPU backends (``backend``: TorchBackend or TensorRTBackend) over
    ``clips`` (stream ids clip, clip1, ...): detections, metrics and wall seconds. On
    ``device="cpu"`` it runs the same stages with torch on the CPU."""
    import time

    from pipelines.infer.device import DeviceRuntime
    from pipelines.plan import RunPlan
    from pipelines.postprocess.gpu import TorchPostprocessor
    from pipelines.sources.file import FileSource
    from pipelines.threads import ThreadPlan

    sink = CollectSink()
    metrics = metrics or PipelineMetrics()
    options = PipelineOptions(batch_size=batch_size, frame_limit=frames, capacity=8)
    sources = [FileSource(clip, "clip" if i == 0 else f"clip{i}") for i, clip in enumerate(clips)]
    runtime = DeviceRuntime(backend, "images", name="torch", device=str(device))
    backends = StageBackends(decoder_for, make_preprocessor, runtime,
                             TorchPostprocessor(spec, device), backend.inputs[0],
                             RunPlan(ThreadPlan(1, 1, "given")))
    pipeline = wire_pipeline(sources, backends, spec, [sink], metrics, options, batch_size)
    start = time.perf_counter()
    asyncio.run(pipeline.run())
    return sink.found, metrics, time.perf_counter() - start


@dataclass(frozen=True, slots=True)
class Agreement:
    boxes: int  # reference boxes
    matched: int  # of those, matched by a box of the other side with IoU >= min_iou
    extra: int  # boxes of the other side that match nothing
    max_score_diff: float  # over matched pairs

    @property
    def ratio(self) -> float:
        return self.matched / self.boxes if self.boxes else 1.0

    def __str__(self) -> str:
        return (f"{self.matched}/{self.boxes} matched ({self.ratio:.2%}), {self.extra} extra, "
                f"max score diff {self.max_score_diff:.4f}")


def agreement(reference: dict[Any, Detections], other: dict[Any, Detections],
              min_iou: float = 0.9) -> Agreement:
    """Greedy one-to-one matching per frame (same class, best IoU first)."""
    boxes = matched = extra = 0
    worst = 0.0
    for key, ref in reference.items():
        got = other.get(key, Detections.empty())
        boxes += len(ref)
        if len(ref) == 0 or len(got) == 0:
            extra += len(got)
            continue
        iou = box_iou(ref.xyxy, got.xyxy)
        iou[ref.class_id[:, None] != got.class_id[None, :]] = 0.0
        used_ref: set[int] = set()
        used_got: set[int] = set()
        for flat in np.argsort(-iou, axis=None, kind="stable"):
            i, j = divmod(int(flat), iou.shape[1])
            if iou[i, j] < min_iou:
                break
            if i in used_ref or j in used_got:
                continue
            used_ref.add(i)
            used_got.add(j)
            worst = max(worst, abs(float(ref.score[i]) - float(got.score[j])))
        matched += len(used_ref)
        extra += len(got) - len(used_got)
    extra += sum(len(d) for k, d in other.items() if k not in reference)
    return Agreement(boxes, matched, extra, worst)


# Libraries the lent GPU can be given (carried wheels): missing there is a failure under
# REQUIRE_GPU=1. CV-CUDA and TensorRT cannot be carried: their tests skip wherever missing.
CARRIED = {"PyNvVideoCodec", "pynvml"}


def need(module: str) -> None:
    """Skip unless ``module`` imports. A carried one that is not installed fails instead under
    REQUIRE_GPU=1 (device_check.sh should have installed it); one that is installed but cannot
    load (PyNvVideoCodec without the driver's video libraries) skips with the reason, since the
    machine, not the code, lacks something."""
    if not library_available(module):
        message = f"{module} is not installed"
        if module in CARRIED:
            unavailable("gpu", f"{message} (tests/gpu/device_check.sh installs it)")
        pytest.skip(message)
    try:
        importlib.import_module(module)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        pytest.skip(f"{module} is installed but cannot load on this machine: {first}")
