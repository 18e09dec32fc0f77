"""INT8 quantization: a QDQ graph calibrated on a video's frames, the decoding tail left float,
outputs close to the float model's; unreadable calibration videos are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from app.recipes.optimize import CalibrationError, calibration_frames
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.data import make_clip
from models.detector import DetectorConfig, ShapesYOLO
from models.export import card_spec, export_onnx
from models.quantize import HEAD_CONVS, METHODS, float_nodes, float_tail, quantize_model
from models.scene import CLASSES

STEM = "/stem/stem.0/Conv"
SMALL = DetectorConfig(num_classes=len(CLASSES), input_size=(160, 96),
                       widths=(8, 16, 16, 32, 32), depths=(0, 1, 1, 1), neck_width=16,
                       class_names=CLASSES)


@pytest.fixture(scope="module")
def fp32(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return export_onnx(ShapesYOLO(SMALL).eval(), tmp_path_factory.mktemp("q") / "model.onnx")


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> np.ndarray:
    clip = make_clip(tmp_path_factory.mktemp("c") / "calib.mp4", seed=3, frames=12,
                     size=(320, 240))  # 4:3 into 160x96: 16 px bands left and right
    spec = card_spec(ShapesYOLO(SMALL), "small")
    return calibration_frames(clip, spec.input, count=6)


def run(model: Path, images: np.ndarray) -> np.ndarray:
    with OnnxRuntimeBackend(model, threads=1) as backend:
        return backend.infer({"images": images})["output0"]


def test_calibration_frames_are_prepared_like_the_pipeline_prepares_them(frames) -> None:
    assert frames.shape == (6, 3, 96, 160) and frames.dtype == np.float32
    assert 0.0 <= frames.min() and frames.max() <= 1.0
    assert np.allclose(frames[:, :, :, 0], 114 / 255)  # letterbox bands at the sides


@pytest.mark.parametrize("method, target", [(m, "onnxruntime") for m in METHODS]
                         + [("minmax", "tensorrt")])
@pytest.mark.slow
def test_quantized_graph_is_qdq_with_a_float_tail_and_close_outputs(fp32: Path, frames,
                                                                    tmp_path: Path,
                                                                    method: str,
                                                                    target: str) -> None:
    int8 = quantize_model(fp32, tmp_path / "model.int8.onnx", frames, method, target=target)
    graph = onnx.load(str(int8))
    ops = [n.op_type for n in graph.graph.node]
    assert ops.count("QuantizeLinear") >= 5 and ops.count("DequantizeLinear") >= 10
    by_name = {n.name: n for n in graph.graph.node}
    produced_by = {out: n for n in graph.graph.node for out in n.output}
    initial = {i.name: i for i in graph.graph.initializer}
    float_convs = (*HEAD_CONVS, STEM)
    for name in float_convs:
        weight = by_name[name].input[1]
        assert weight in initial and initial[weight].data_type == onnx.TensorProto.FLOAT
    convs = [n for n in graph.graph.node if n.op_type == "Conv" and n.name not in float_convs]
    assert convs and all(produced_by[c.input[1]].op_type == "DequantizeLinear" for c in convs)
    quantized = [n for n in graph.graph.node if n.op_type == "QuantizeLinear"]
    points = [onnx.numpy_helper.to_array(initial[n.input[2]]) for n in quantized]
    assert by_name[STEM].input[0] == "images"  # the image reaches the float stem as is
    if target == "tensorrt":  # symmetric INT8 only
        assert all(z.dtype == np.int8 and not z.any() for z in points)
    else:  # unsigned activations: ONNX Runtime's fast x86 path
        assert all(z.dtype == np.uint8 for z in points)
    expected, got = run(fp32, frames), run(int8, frames)
    boxes = np.abs(expected[:, :4] - got[:, :4])
    assert np.median(boxes) < 1.0, np.median(boxes)  # pixels of a 160x96 input
    assert np.abs(expected[:, 4:] - got[:, 4:]).max() < 0.05


def test_the_float_tail_starts_at_the_three_head_convs(fp32: Path) -> None:
    graph = onnx.load(str(fp32))
    tail = float_tail(graph)
    assert set(HEAD_CONVS) <= set(tail)
    ops = {n.name: n.op_type for n in graph.graph.node}
    assert {ops[n] for n in tail} >= {"Sigmoid", "Softmax", "Concat"}
    assert not any(ops[n] == "Conv" for n in tail if n not in HEAD_CONVS)


def test_float_nodes_are_the_stem_and_the_tail_for_both_targets(fp32: Path) -> None:
    graph = onnx.load(str(fp32))
    assert set(float_nodes(graph)) == set(float_tail(graph)) | {STEM}
    assert set(float_nodes(graph, "tensorrt")) == set(float_nodes(graph))
    with pytest.raises(ValueError, match="target"):
        float_nodes(graph, "openvino")


def test_an_unknown_graph_is_refused(tmp_path: Path) -> None:
    from models.errors import ModelError

    graph = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])]))
    with pytest.raises(ModelError, match="/box/Conv"):
        float_tail(graph)


@pytest.mark.parametrize("content", [b"", b"\x00" * 4096, b"not a video at all"])
def test_an_unreadable_calibration_video_is_named(tmp_path: Path, content: bytes) -> None:
    video = tmp_path / "broken.mp4"
    video.write_bytes(content)
    spec = card_spec(ShapesYOLO(SMALL), "small")
    with pytest.raises(CalibrationError, match="broken.mp4"):
        calibration_frames(video, spec.input)


def test_a_missing_calibration_video_is_named(tmp_path: Path) -> None:
    spec = card_spec(ShapesYOLO(SMALL), "small")
    with pytest.raises(CalibrationError, match="nothing.mp4"):
        calibration_frames(tmp_path / "nothing.mp4", spec.input)
