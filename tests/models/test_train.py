"""Training: the loss falls, runs repeat exactly, checkpoints load, targets are sane."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from models.checkpoint import load_checkpoint, save_checkpoint
from models.data import training_batch
from models.detector import DetectorConfig, HeadOutputs, ShapesYOLO, make_grid
from models.fitting import lr_factor, optimiser_step
from models.loss import assign, detection_loss, distillation_loss
from models.scene import CLASSES
from models.train import TrainConfig, train

TINY = DetectorConfig(num_classes=len(CLASSES), widths=(8, 16, 16, 32, 32),
                      depths=(0, 1, 1, 0), neck_width=16, class_names=CLASSES)
SIZE = (128, 96)


def test_a_few_steps_on_one_small_batch_reduce_the_loss() -> None:
    torch.manual_seed(0)
    model = ShapesYOLO(TINY).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = training_batch(0, 0, 4, SIZE)
    grid = make_grid(*SIZE)
    losses = [optimiser_step(model, optimiser, batch, grid)[0] for _ in range(25)]
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3]), losses


def test_same_config_same_weights() -> None:
    config = TrainConfig(steps=3, batch_size=2, image_size=SIZE, warmup_steps=1)
    first, second = train(config, network=TINY), train(config, network=TINY)
    for (name, a), b in zip(first.model.state_dict().items(),
                            second.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    other = train(TrainConfig(steps=3, batch_size=2, image_size=SIZE, warmup_steps=1, seed=1),
                  network=TINY)
    assert not torch.equal(other.model.cls.weight, first.model.cls.weight)
    assert first.steps_done == 3 and not first.stopped_early
    assert [h["step"] for h in first.history] == [1, 3]


def test_progress_hears_every_step() -> None:
    seen = []
    train(TrainConfig(steps=2, batch_size=1, image_size=SIZE, warmup_steps=1),
          seen.append, network=TINY)
    assert [r.step for r in seen] == [1, 2] and all(r.steps == 2 for r in seen)
    assert all(np.isfinite(r.loss) for r in seen)


def test_learning_rate_warms_up_then_decays_by_step() -> None:
    factors = [lr_factor(s, 100, 10) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:], strict=False))
    assert factors[-1] == pytest.approx(0.05, abs=0.01)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    result = train(TrainConfig(steps=1, batch_size=1, image_size=SIZE, warmup_steps=1),
                   network=TINY)
    save_checkpoint(result.model, tmp_path / "model.pt", asdict(result.config))
    loaded = load_checkpoint(tmp_path / "model.pt")
    assert loaded.config == TINY
    images = torch.rand(1, 3, 96, 128)
    with torch.no_grad():
        assert torch.equal(loaded(images), result.model(images))


def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a ShapesYOLO checkpoint"):
        load_checkpoint(path)


def test_assignment_centre_cells_small_objects_and_ignored_regions() -> None:
    grid = make_grid(64, 32)  # 8 x 4 cells
    boxes = [np.array([[0, 0, 48, 32, 1], [50, 2, 58, 10, 3]], np.float32)]
    ignore = [np.array([[56, 16, 64, 32, 0]], np.float32)]
    targets = assign(boxes, ignore, grid)
    owner = targets.classes[0].reshape(4, 8)
    positive = targets.positive[0].reshape(4, 8)
    assert positive[0, 6] and owner[0, 6] == 3  # the tiny box gets its centre cell
    assert positive[:, :5].sum() > 4 and (owner[:, :5][positive[:, :5]] == 1).all()
    assert not targets.counted[0].reshape(4, 8)[3, 7]  # inside the ignored box
    assert targets.counted[0].reshape(4, 8)[3, 5]  # an ordinary negative


def test_loss_is_near_zero_for_the_right_answer_and_high_for_a_wrong_one() -> None:
    grid = make_grid(64, 32)
    truth = np.array([[8, 0, 40, 32, 1]], np.float32)
    targets = assign([truth], [np.zeros((0, 5))], grid)
    positive = targets.positive[0]
    centres = grid[0].T[positive]
    sides = torch.cat([centres - torch.tensor(truth[0, :2]),
                       torch.tensor(truth[0, 2:4]) - centres], 1)
    box = torch.zeros(1, 4, 32)
    box[0][:, positive] = torch.log(torch.expm1(sides / 8)).T  # softplus(raw) * 8 == sides
    objectness = torch.where(positive, 9.0, -9.0).view(1, 1, 32)
    classes = torch.zeros(1, 2, 32)
    classes[0, 1] = 9.0
    shape = (1, -1, 4, 8)
    right = HeadOutputs(box.view(shape), objectness.view(shape), classes.view(shape))
    good, parts = detection_loss(right, grid, targets)
    assert max(parts.values()) < 1e-3 and good < 1e-2
    wrong_class = right._replace(classes=classes.flip(1).view(shape))
    missed = right._replace(objectness=-objectness.view(shape))
    off = right._replace(box=torch.zeros(shape[:1] + (4, 4, 8)))
    for bad, part in ((wrong_class, "cls"), (missed, "obj"), (off, "box")):
        assert detection_loss(bad, grid, targets)[1][part] > 0.5, part


def test_distillation_pulls_a_student_towards_its_teachers_outputs_only() -> None:
    grid = make_grid(64, 32)
    targets = assign([np.array([[8, 0, 40, 32, 1]], np.float32)], [np.zeros((0, 5))], grid)
    torch.manual_seed(0)
    shape = (1, -1, 4, 8)
    teacher = HeadOutputs(torch.randn(1, 4, 4, 8), torch.randn(1, 1, 4, 8) * 3,
                          torch.randn(1, 2, 4, 8) * 3)
    same, parts = distillation_loss(teacher, teacher, targets)
    assert parts["kd_cls"] < 1e-6 and parts["kd_box"] < 1e-6  # nothing to learn from itself
    for name, part in (("box", "kd_box"), ("objectness", "kd_obj"), ("classes", "kd_cls")):
        value = getattr(teacher, name)
        student = teacher._replace(**{name: (-value if name != "box" else value + 2.0)
                                      .view(shape)})
        loss, moved = distillation_loss(student, teacher, targets)
        assert moved[part] > parts[part] + 0.1 and loss > same, name
