"""Fixtures of the GPU tests. Tests marked ``gpu`` skip without CUDA (tests/conftest.py) and
fail instead under REQUIRE_GPU=1; the unmarked tests here run the same code paths with torch
on the CPU, so CI checks the numerics of the GPU modules everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipelines.synthetic.rectangles import make_test_clip
from tests.gpu.agreement import write_rectangle_model

CLIP_SIZE = (640, 360)
MODEL_SIZE = (320, 320)


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", 0)


@pytest.fixture(scope="session")
def rect_clip(media: Path) -> Path:
    """30 frames of 640x360 H.264 moving rectangles."""
    return make_test_clip(media / "rectangles.mp4", frames=30, size=CLIP_SIZE, seed=5)


@pytest.fixture(scope="session")
def rect_model(media: Path):
    """(onnx path, spec, module) of the RectangleDetector for rect_clip, 320x320 input."""
    return write_rectangle_model(media / "rectangles", CLIP_SIZE, MODEL_SIZE)
