"""Export: ONNX Runtime gives what torch gives, and the card loads and fits the graph."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from models.backends.onnxruntime import ModelLoadError, OnnxRuntimeBackend
from models.detector import DetectorConfig, ShapesYOLO
from models.export import (
    card_spec,
    compare_latency,
    export_onnx,
    max_difference,
    measure_latency,
    write_card,
)
from models.spec import load_card
from models.zoo import check_compatible, resolve_model

CLASSES = ("disc", "box", "triangle")
# ops that INT8 QDQ quantization and TensorRT take without special handling
PLAIN_OPS = {"Conv", "Relu", "Clip", "Sigmoid", "Softmax", "Mul", "Add", "Sub", "Concat",
             "Resize",
             "Reshape", "Softplus", "Constant", "Shape", "Gather", "Slice", "Unsqueeze"}


def trained_looking(activation: str = "relu") -> ShapesYOLO:
    """Small random model with non-trivial BN statistics and box head, so outputs vary."""
    torch.manual_seed(0)
    model = ShapesYOLO(DetectorConfig(num_classes=3, widths=(8, 16, 16, 32, 32),
                                      depths=(0, 1, 1, 1), neck_width=16,
                                      activation=activation, class_names=CLASSES))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
    torch.nn.init.normal_(model.box.weight, std=0.05)
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[ShapesYOLO, Path]:
    model = trained_looking()
    return model, export_onnx(model, tmp_path_factory.mktemp("export") / "model.onnx")


def test_onnx_runtime_matches_torch_at_several_batch_sizes(exported) -> None:
    model, path = exported
    for batch in (1, 3):
        assert max_difference(model, path, torch.rand(batch, 3, 320, 320)) < 1e-3


def test_graph_has_a_dynamic_batch_fixed_rows_and_plain_ops(exported) -> None:
    _, path = exported
    graph = onnx.load(str(path))
    assert graph.opset_import[0].version == 17
    dims = graph.graph.output[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [4 + 3, 40 * 40]
    ops = {node.op_type for node in graph.graph.node}
    assert ops <= PLAIN_OPS, ops - PLAIN_OPS
    assert "Split" not in ops and "BatchNormalization" not in ops  # BN folded into convs


def test_silu_exports_too() -> None:
    model = trained_looking("silu")
    path = export_onnx(model, Path(__import__("tempfile").mkdtemp()) / "m.onnx")
    assert max_difference(model, path, torch.rand(1, 3, 320, 320)) < 1e-3


def test_card_loads_and_agrees_with_the_graph(exported, tmp_path: Path) -> None:
    model, path = exported
    folder = tmp_path / "shapes"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(path.read_bytes())
    write_card(card_spec(model, "shapes-test", measured={"note": 1}), folder / "card.yaml")
    spec = load_card(folder / "card.yaml")
    assert spec.output.format == "yolov8" and spec.classes == list(CLASSES)
    assert (spec.input.width, spec.input.height, spec.input.layout) == (320, 320, "NCHW")
    assert spec.input.mean == (0.0, 0.0, 0.0) and spec.input.std == (1.0, 1.0, 1.0)
    assert spec.input.pad_value == 114 and spec.input.resize == "letterbox"
    resolved, spec = resolve_model(str(folder))
    with OnnxRuntimeBackend(resolved) as backend:
        info = check_compatible(spec, backend.inputs, backend.outputs, resolved)
    assert info.name == "images"


def test_latency_is_measured_per_call(exported) -> None:
    _, path = exported
    latency = measure_latency(path, runs=3, warmup=1)
    assert latency["median_ms"] > 0 and latency["batch"] == 1


def test_latencies_side_by_side_come_one_per_model_in_order(exported, tmp_path: Path) -> None:
    _, path = exported
    other = tmp_path / "again.onnx"
    other.write_bytes(path.read_bytes())
    times = compare_latency([path, other, path], threads=1, rounds=2, calls=2, warmup=1)
    assert len(times) == 3 and all(t > 0 for t in times)
    with pytest.raises(ModelLoadError):
        compare_latency([path, tmp_path / "missing.onnx"], threads=1, rounds=1, calls=1)
