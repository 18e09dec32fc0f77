"""A real TensorRT engine from vidpipe's own model, through ``ensure_engine``: built, cached,
run by TensorRTBackend, close to ONNX Runtime. Needs CUDA and the tensorrt package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.backends.onnxruntime import OnnxRuntimeBackend
from models.detector import DetectorConfig, ShapesYOLO
from models.engine import current_environment, ensure_engine
from models.export import export_onnx
from models.scene import CLASSES
from tests.gpu.agreement import need

SMALL = DetectorConfig(num_classes=len(CLASSES), input_size=(160, 96),
                       widths=(8, 16, 16, 32, 32), depths=(0, 1, 1, 1), neck_width=16,
                       class_names=CLASSES)


@pytest.mark.gpu
def test_fp16_engine_is_built_cached_and_agrees_with_onnx_runtime(cuda, tmp_path: Path):
    need("tensorrt")
    from models.backends.tensorrt import TensorRTBackend

    torch.manual_seed(0)
    onnx_path = export_onnx(ShapesYOLO(SMALL).eval(), tmp_path / "model.onnx")
    first = ensure_engine(onnx_path, "fp16", 4, tmp_path / "cache")
    again = ensure_engine(onnx_path, "fp16", 4, tmp_path / "cache")
    assert first.built and not again.built
    assert first.key.gpu == current_environment().gpu
    x = np.random.default_rng(0).random((3, 3, 96, 160), dtype=np.float32)
    with TensorRTBackend(first.path, device=str(cuda)) as backend:
        got = backend.infer({"images": x})["output0"]
    with OnnxRuntimeBackend(onnx_path, threads=1) as reference:
        expected = reference.infer({"images": x})["output0"]
    assert np.abs(got[:, :4] - expected[:, :4]).max() < 1.0  # pixels, FP16
    assert np.abs(got[:, 4:] - expected[:, 4:]).max() < 0.02
