"""Channel pruning: torch-pruning removes channels the graph allows, the result still runs,
exports, saves and loads; bad ratios are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.checkpoint import load_checkpoint, load_pruned
from models.detector import DetectorConfig, ShapesYOLO
from models.export import export_onnx, max_difference
from models.prune import (
    SHALLOW_MAX,
    PruneConfig,
    channel_summary,
    count_channels,
    count_macs,
    layer_ratios,
    prunable_convs,
    prune,
    ratio_checked,
    save_pruned,
)
from models.scene import CLASSES

SMALL = DetectorConfig(num_classes=len(CLASSES), input_size=(160, 96),
                       widths=(8, 16, 16, 32, 32), depths=(0, 1, 1, 1), neck_width=16,
                       class_names=CLASSES)
FAST = dict(rounds=2, round_steps=2, final_steps=3, batch_size=2, scenes=16, threads=1)


@pytest.fixture(scope="module")
def pruned() -> tuple[ShapesYOLO, object]:
    torch.manual_seed(0)
    model = ShapesYOLO(SMALL).eval()
    return model, prune(model, PruneConfig(ratio=0.5, **FAST))


def test_half_the_channels_go_and_the_network_shrinks_to_about_a_quarter(pruned) -> None:
    original, result = pruned
    before, after = result.parameters
    assert after < 0.4 * before, (before, after)
    assert result.macs[1] < 0.45 * result.macs[0]
    assert channel_summary(original) == "8-16-16-32-32 / neck 16"
    assert channel_summary(result.model) == "4-8-8-16-16 / neck 8"
    # output convs keep their channels: 4 box sides, 1 objectness, 5 classes
    assert result.model.box.out_channels == 4 and result.model.cls.out_channels == 5
    assert len(result.history) >= 1 and result.history[-1]["step"] == 5
    assert count_macs(original) == result.macs[0]


def test_the_original_model_is_left_alone(pruned) -> None:
    original, _ = pruned
    assert original.stem[0].out_channels == 8


def test_pruned_model_exports_saves_and_loads(pruned, tmp_path: Path) -> None:
    _, result = pruned
    onnx_path = export_onnx(result.model, tmp_path / "model.pruned50.onnx")
    images = torch.rand(2, 3, 96, 160)
    assert max_difference(result.model, onnx_path, images) < 1e-4
    save_pruned(result, tmp_path / "model.pruned50.pt")
    loaded = load_checkpoint(tmp_path / "model.pruned50.pt")
    assert channel_summary(loaded) == channel_summary(result.model)
    with torch.no_grad():
        assert torch.equal(loaded(images), result.model(images))


def test_load_pruned_refuses_a_state_that_does_not_fit() -> None:
    state = ShapesYOLO(SMALL).state_dict()
    state["box.weight"] = torch.zeros(4, 3, 1, 1)  # 3 in-channels, the branch gives 16
    with pytest.raises(ValueError, match="do not fit together"):
        load_pruned(SMALL, state)


@pytest.mark.parametrize("ratio", [0.0, -0.5, 0.95, float("nan")])
def test_ratios_out_of_range_are_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio"):
        ratio_checked(ratio)
    if np.isfinite(ratio):
        with pytest.raises(ValueError, match="ratio"):
            PruneConfig(ratio=ratio)


def test_distillation_is_what_the_fine_tuning_learns_from_too(pruned) -> None:
    original, with_teacher = pruned
    torch.manual_seed(0)
    alone = prune(original, PruneConfig(ratio=0.5, distill=False, **FAST))
    a, b = with_teacher.model.state_dict(), alone.model.state_dict()
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)  # same channels
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())


def _deep_and_shallow(model: ShapesYOLO) -> tuple[int, int]:
    deep = {id(c) for m in (model.stage16, model.stage32) for c in m.modules()}
    convs = prunable_convs(model)
    return (sum(c.out_channels for c in convs if id(c) in deep),
            sum(c.out_channels for c in convs if id(c) not in deep))


def test_deep_first_keeps_half_the_shallow_channels_and_takes_the_rest_from_the_deep_stages(
) -> None:
    torch.manual_seed(0)
    model = ShapesYOLO(SMALL).eval()
    deep_before, shallow_before = _deep_and_shallow(model)
    result = prune(model, PruneConfig(ratio=0.7, allocation="deep-first", **FAST))
    deep_after, shallow_after = _deep_and_shallow(result.model)
    # small layers round: 8 channels at 70% keep 2 or 3
    assert abs(result.channels_removed - 0.7) < 0.05, result.channels
    assert result.channels == (count_channels(model), count_channels(result.model))
    assert shallow_after >= (1 - SHALLOW_MAX) * shallow_before - 2, (shallow_after,
                                                                     shallow_before)
    assert deep_after < 0.2 * deep_before, (deep_after, deep_before)
    uniform = prune(model, PruneConfig(ratio=0.7, allocation="uniform", **FAST))
    assert abs(uniform.channels_removed - 0.7) < 0.05
    assert _deep_and_shallow(uniform.model)[1] < shallow_after  # uniform cuts the shallow more


def test_deep_first_is_uniform_up_to_half_and_every_prunable_layer_gets_a_ratio() -> None:
    model = ShapesYOLO(SMALL)
    assert set(layer_ratios(model, 0.5, "deep-first").values()) == {0.5}
    assert set(layer_ratios(model, 0.7, "uniform").values()) == {0.7}
    ratios = layer_ratios(model, 0.7, "deep-first")
    covered = {id(c) for m in ratios for c in m.modules()}
    assert all(id(c) in covered for c in prunable_convs(model))
    assert ratios[model.stem] == SHALLOW_MAX and ratios[model.stage32] > 0.7
    most = layer_ratios(model, 0.9, "deep-first")  # the deep stages cannot take it all
    assert max(most.values()) <= 0.9 + 1e-9 and most[model.stem] > SHALLOW_MAX


def test_a_pruned_network_is_taken_on_to_the_ratio_of_the_unpruned_one(pruned) -> None:
    original, half = pruned
    ratios = layer_ratios(half.model, 0.7, "deep-first")
    assert ratios[half.model.stem] == 0.0  # lost its half already
    on = prune(half.model, PruneConfig(ratio=0.7, **FAST), teacher=original)
    direct = prune(original, PruneConfig(ratio=0.7, **FAST))
    assert on.channels[0] == count_channels(original)  # counted against the unpruned network
    assert channel_summary(on.model) == channel_summary(direct.model)
    assert abs(on.channels_removed - 0.7) < 0.05
    with pytest.raises(ValueError, match="lost 50% of its channels already"):
        prune(half.model, PruneConfig(ratio=0.5, **FAST))


def test_an_unknown_allocation_is_refused() -> None:
    with pytest.raises(ValueError, match="allocation"):
        PruneConfig(ratio=0.7, allocation="random")
