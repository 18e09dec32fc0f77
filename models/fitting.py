"""The parts of a training loop that training and pruning's fine-tuning share: one optimiser
step (optionally distilling a teacher), the learning-rate schedule, weight-decay groups and
the weight average that is kept."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from models.data import TrainBatch
from models.detector import ShapesYOLO
from models.loss import assign, detection_loss, distillation_loss


def optimiser_step(model: ShapesYOLO, optimiser: torch.optim.Optimizer, batch: TrainBatch,
                   grid: torch.Tensor, teacher: ShapesYOLO | None = None,
                   ) -> tuple[float, dict[str, float]]:
    """One optimiser step on ``batch``; with a ``teacher``, its outputs on the same images
    are a second target (``distillation_loss``)."""
    images = images_to_tensor(batch.images)
    raw = model.features(images)
    targets = assign(batch.boxes, batch.ignore, grid)
    loss, parts = detection_loss(raw, grid, targets)
    if teacher is not None:
        with torch.no_grad():
            taught = teacher.features(images)
        extra, extra_parts = distillation_loss(raw, taught, targets)
        loss = loss + extra
        parts = {**parts, **extra_parts}
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimiser.step()
    return loss.item(), parts


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """[B, H, W, 3] uint8 RGB -> [B, 3, H, W] float in [0, 1]: the card's mean 0, std 1."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def lr_factor(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 5% of the peak: set by the step, not the clock."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on conv weights only: decaying BN scales and biases only hurts."""
    decay = [p for p in model.parameters() if p.ndim == 4]
    other = [p for p in model.parameters() if p.ndim != 4]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": other, "weight_decay": 0.0}]


class WeightAverage:
    """EMA of parameters and BN statistics; the decay ramps up so early steps are not frozen in."""

    def __init__(self, model: ShapesYOLO, decay: float) -> None:
        self.model: ShapesYOLO = copy.deepcopy(model).eval()
        self.decay = decay
        self.updates = 0
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1.0 - math.exp(-self.updates / 200.0))
        live = model.state_dict()
        for name, value in self.model.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(d).add_(live[name].detach(), alpha=1.0 - d)
            else:
                value.copy_(live[name])
