"""The loss gate and the variant naming of ``vidpipe model optimize``."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.evaluate import Accuracy
from models.variants import VariantRow, apply_gate, int8_name
from models.zoo import variant_file, variant_label


def row(label: str, map50: float, ms: float) -> VariantRow:
    return VariantRow(label, f"{label}.onnx", 1000, 1.0, Accuracy(map50, map50 / 2, {}, 10, 20,
                                                                  30), ms, ms)


def test_loss_and_speedup_are_against_fp32_and_only_the_costly_are_refused() -> None:
    rows = apply_gate([row("fp32", 0.92, 10.0), row("int8", 0.918, 4.0),
                       row("pruned50", 0.905, 5.0), row("pruned70", 0.89, 3.0)], 1.5)
    assert [r.loss_points for r in rows] == [0.0, 0.2, 1.5, 3.0]
    assert [r.speedup for r in rows] == [1.0, 2.5, 2.0, 3.33]
    assert [r.refused for r in rows] == [False, False, False, True]


def test_a_variant_better_than_fp32_has_a_negative_loss() -> None:
    rows = apply_gate([row("fp32", 0.90, 10.0), row("int8", 0.91, 5.0)], 0.0)
    assert rows[1].loss_points == pytest.approx(-1.0) and not rows[1].refused


@pytest.mark.parametrize("ratio, int8, name, label", [
    (None, True, "model.int8.onnx", "int8"),
    (0.5, False, "model.pruned50.onnx", "pruned50"),
    (0.7, True, "model.pruned70.int8.onnx", "pruned70+int8"),
])
def test_variant_names_and_labels_round_trip(ratio, int8, name, label) -> None:
    assert variant_file(ratio, int8) == name and variant_label(Path(name)) == label


def test_files_that_are_not_variants_have_no_label() -> None:
    for name in ("model.onnx", "model.pt", "other.int8.onnx", "model.prunedx.onnx"):
        assert variant_label(Path(name)) is None


def test_int8_name_keeps_the_pruned_part() -> None:
    assert int8_name(Path("z/model.onnx")) == "model.int8.onnx"
    assert int8_name(Path("z/model.pruned50.onnx")) == "model.pruned50.int8.onnx"


def test_a_zoo_name_finds_every_variant_and_a_variant_file_only_itself() -> None:
    from models.zoo import ZOO_DIR, model_variants

    everything = model_variants("shapes-yolo")
    assert list(everything) == ["fp32", "int8", "pruned50", "pruned50+int8"]
    assert everything["fp32"][0].name == "model.onnx"
    alone = model_variants(ZOO_DIR / "shapes-yolo" / "model.pruned50.int8.onnx")
    assert list(alone) == ["pruned50+int8"]
    assert alone["pruned50+int8"][0].name == "model.pruned50.int8.onnx"
