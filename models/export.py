"""From trained weights to what the pipeline runs: an ONNX file and its card.yaml.

The graph is the model's own ``forward``: letterboxed RGB in [0, 1] in, yolov8 rows out
(``[B, 4 + C, N]``, boxes in input pixels, sigmoid scores), so the card says ``format:
yolov8`` and the pipeline needs nothing model-specific. Opset 17, batch axis dynamic (the
inference stage batches across streams), BatchNorm folded into the convs by the exporter.
The TorchScript exporter is used (``dynamo=False``): it needs no onnxscript, and its graph is
plain Conv/Relu/Add/Concat/Resize/Sigmoid, which INT8 QDQ quantization handles op by op.
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import yaml

from models.backends.onnxruntime import OnnxRuntimeBackend
from models.detector import STRIDE, ShapesYOLO
from models.spec import ModelSpec, load_card

OPSET = 17
INPUT_NAME, OUTPUT_NAME = "images", "output0"


def export_onnx(model: ShapesYOLO, path: Path) -> Path:
    """Write ``model`` as ONNX at its configured input size, any batch size."""
    model = model.eval()
    width, height = model.config.input_size
    example = torch.zeros(1, 3, height, width)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the TorchScript exporter warns that it is deprecated (torch >= 2.9); it is still the one
    # that runs without onnxscript, and the tests check what it writes
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (example,), str(path), dynamo=False, opset_version=OPSET,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            do_constant_folding=True,
        )
    graph = onnx.load(str(path))
    _declare_output_shape(graph, model)
    onnx.checker.check_model(graph)
    onnx.save(graph, str(path))
    return path


def _declare_output_shape(graph: onnx.ModelProto, model: ShapesYOLO) -> None:
    """Write the output's fixed dims (4 + C rows, N cells) into the graph: the exporter leaves
    them symbolic after the reshapes, and the pipeline checks the card against them."""
    width, height = model.config.input_size
    dims = graph.graph.output[0].type.tensor_type.shape.dim
    for dim, value in zip(dims[1:], (4 + model.config.num_classes,
                                     (width // STRIDE) * (height // STRIDE)), strict=True):
        dim.Clear()
        dim.dim_value = value


def card_spec(model: ShapesYOLO, name: str, *, description: str = "",
              provenance: dict[str, Any] | None = None,
              measured: dict[str, Any] | None = None) -> ModelSpec:
    """The ModelSpec of an exported ShapesYOLO: NCHW float32 RGB, x / 255, letterbox, pad 114."""
    width, height = model.config.input_size
    classes = list(model.config.class_names) or [f"class{i}"
                                                 for i in range(model.config.num_classes)]
    return ModelSpec.model_validate({
        "name": name, "file": "model.onnx", "description": description,
        "input": {"name": INPUT_NAME, "width": width, "height": height, "layout": "NCHW",
                  "dtype": "float32", "color": "RGB", "resize": "letterbox",
                  "interpolation": "bilinear", "pad_value": 114, "mean": [0.0, 0.0, 0.0],
                  "std": [1.0, 1.0, 1.0]},
        "output": {"format": "yolov8"},
        "classes": classes, "licence": "MIT (trained by vidpipe on its own synthetic data)",
        "provenance": provenance or {}, "measured": measured or {},
    })


def write_card(spec: ModelSpec, path: Path) -> Path:
    """Write ``spec`` as card.yaml and read it back, so a card that would not load never ships."""
    data = spec.model_dump(mode="json")
    path.write_text(f"# {spec.name}: written by models/export.py; figures under 'measured'.\n"
                    + yaml.safe_dump(data, sort_keys=False, width=96, default_flow_style=None))
    load_card(path)
    return path


def max_difference(model: ShapesYOLO, onnx_path: Path, images: torch.Tensor) -> float:
    """Largest absolute difference between torch and ONNX Runtime outputs on ``images``."""
    with torch.no_grad():
        expected = model.eval()(images).numpy()
    with OnnxRuntimeBackend(onnx_path, threads=1) as backend:
        got = backend.infer({INPUT_NAME: images.numpy()})[OUTPUT_NAME]
    return float(np.abs(expected - got).max())


def measure_latency(onnx_path: Path, *, batch: int = 1, threads: int = 2, runs: int = 50,
                    warmup: int = 5) -> dict[str, float]:
    """ONNX Runtime wall time per call (ms: median and p90), on a fixed random input."""
    with OnnxRuntimeBackend(onnx_path, threads=threads) as backend:
        info = backend.inputs[0]
        shape = [batch if d is None else d for d in info.shape]
        feeds = {info.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
        for _ in range(warmup):
            backend.infer(feeds)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            backend.infer(feeds)
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"median_ms": round(statistics.median(times), 2),
            "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
            "batch": batch, "threads": threads}


def compare_latency(paths: list[Path], *, threads: int, rounds: int = 12, calls: int = 8,
                    warmup: int = 10) -> list[float]:
    """Median ms per call of each model, batch 1, measured side by side: every session is
    open at once and the rounds interleave them (A B C A B C ...), so a neighbour's load or
    a clock change on a shared machine falls on all of them alike and their ratios hold even
    when the absolute times drift."""
    backends: list[OnnxRuntimeBackend] = []
    try:
        for path in paths:  # opened one by one: a bad file closes the ones already open
            backends.append(OnnxRuntimeBackend(path, threads=threads))
        feeds = []
        for backend in backends:
            info = backend.inputs[0]
            shape = [1 if d is None else d for d in info.shape]
            feeds.append({info.name: np.random.default_rng(0).random(shape, dtype=np.float32)})
            for _ in range(warmup):
                backend.infer(feeds[-1])
        times: list[list[float]] = [[] for _ in paths]
        for _ in range(rounds):
            for backend, feed, spent in zip(backends, feeds, times, strict=True):
                for _ in range(calls):
                    start = time.perf_counter()
                    backend.infer(feed)
                    spent.append((time.perf_counter() - start) * 1e3)
    finally:
        for backend in backends:
            backend.close()
    return [round(statistics.median(t), 2) for t in times]
