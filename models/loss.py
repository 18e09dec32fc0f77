"""Which cells answer for which object, and what they are fined when they answer wrong.

Assignment is centre-based and anchor-free (FCOS / YOLOX style, simplified to one grid): a
cell is a positive for an object when its centre lies inside the object's box and within
``CENTRE_RADIUS`` cells of the box centre, and the cell holding the box centre always is (so a
tiny object gets one). A cell claimed by several objects answers for the smallest one. Cells
whose centre falls in an ignored (too hidden) object's box are neither positive nor negative.

Losses, each summed and divided by the number of positives:

- boxes: GIoU (scale-free overlap) plus a small L1 on the side distances in cells (pulls
  boxes the last pixel once GIoU flattens out);
- objectness: binary cross-entropy on every counted cell, 1 on positives, 0 elsewhere;
- classes: cross-entropy over the C classes, on positives only (YOLOX's split: "where" is
  learnt from every cell, "which" without thousands of background cells in the way).

Measured before this split (IoU-valued per-class sigmoid targets, one shared head conv): 0.28
mAP@0.5 after 500 steps of 16 images, against 0.64 class-agnostic: the classes were what lagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from models.detector import STRIDE, HeadOutputs, distances

CENTRE_RADIUS = 2.0  # cells
BOX_WEIGHT, L1_WEIGHT, OBJECT_WEIGHT, CLASS_WEIGHT = 2.0, 0.2, 1.0, 1.0
DISTILL_WEIGHT = 1.0  # of ``distillation_loss`` against the ground-truth loss


@dataclass(frozen=True, slots=True)
class Targets:
    positive: torch.Tensor  # [B, N] bool
    boxes: torch.Tensor  # [B, N, 4] xyxy of the assigned object (valid where positive)
    classes: torch.Tensor  # [B, N] long (valid where positive)
    counted: torch.Tensor  # [B, N] bool: cells that take part in the class loss


def assign(boxes: Sequence[np.ndarray], ignore: Sequence[np.ndarray],
           grid: torch.Tensor) -> Targets:
    """Targets for a batch; ``boxes``/``ignore`` hold (n, 5) rows per image, ``grid`` [1, 2, N]."""
    truth, valid = _pad([np.asarray(b, np.float32) for b in boxes])
    x, y = grid[0, 0][None, None], grid[0, 1][None, None]  # [1, 1, N]
    x1, y1, x2, y2 = (truth[..., i, None] for i in range(4))  # [B, M, 1]
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    inside = (x > x1) & (x < x2) & (y > y1) & (y < y2)
    radius = CENTRE_RADIUS * STRIDE
    near = ((x - cx).abs() < radius) & ((y - cy).abs() < radius)
    holds_centre = ((x - cx).abs() <= STRIDE / 2) & ((y - cy).abs() <= STRIDE / 2)
    candidate = ((inside & near) | holds_centre) & valid[..., None]  # [B, M, N]
    area = ((x2 - x1) * (y2 - y1)).expand_as(candidate)
    cost = torch.where(candidate, area, torch.full_like(area, float("inf")))
    owner = cost.argmin(1)  # [B, N]
    positive = candidate.any(1)
    matched = torch.gather(truth, 1, owner[..., None].expand(-1, -1, 5))  # [B, N, 5]
    return Targets(positive, matched[..., :4], matched[..., 4].long(),
                   positive | ~_inside_any(ignore, grid))


def _pad(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged (n, 5) arrays as [B, M, 5] plus a [B, M] validity mask (M >= 1)."""
    most = max([len(r) for r in rows] + [1])
    truth = torch.zeros(len(rows), most, 5)
    valid = torch.zeros(len(rows), most, dtype=torch.bool)
    for i, r in enumerate(rows):
        truth[i, :len(r)] = torch.from_numpy(r.reshape(-1, 5))
        valid[i, :len(r)] = True
    return truth, valid


def _inside_any(ignore: Sequence[np.ndarray], grid: torch.Tensor) -> torch.Tensor:
    """[B, N]: cells whose centre lies in one of the image's ignored boxes."""
    regions, valid = _pad([np.asarray(b, np.float32) for b in ignore])
    x, y = grid[0, 0][None, None], grid[0, 1][None, None]
    x1, y1, x2, y2 = (regions[..., i, None] for i in range(4))
    inside = (x >= x1) & (x <= x2) & (y >= y1) & (y <= y2) & valid[..., None]
    return inside.any(1)


def detection_loss(raw: HeadOutputs, grid: torch.Tensor,
                   targets: Targets) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss and its parts from the head's raw outputs (see ``HeadOutputs``)."""
    positive = targets.positive
    count = positive.sum().clamp(min=1).float()
    sides = distances(raw.box.flatten(2)).transpose(1, 2)[positive]  # [P, 4] l, t, r, b
    centres = grid[0].T.expand(positive.shape[0], -1, -1)[positive]  # [P, 2]
    predicted = torch.cat([centres - sides[:, :2], centres + sides[:, 2:]], 1)
    wanted = targets.boxes[positive]
    _, giou = box_iou_giou(predicted, wanted)
    wanted_sides = torch.cat([centres - wanted[:, :2], wanted[:, 2:] - centres], 1).clamp(min=0)
    box_loss = (1.0 - giou).sum() / count
    l1_loss = ((sides - wanted_sides).abs() / STRIDE).sum() / count
    objectness = raw.objectness.flatten(1)  # [B, N]
    per_cell = F.binary_cross_entropy_with_logits(objectness, positive.to(objectness.dtype),
                                                  reduction="none")
    object_loss = (per_cell * targets.counted).sum() / count
    class_logits = raw.classes.flatten(2).transpose(1, 2)[positive]  # [P, C]
    class_loss = F.cross_entropy(class_logits, targets.classes[positive], reduction="sum") / count
    total = (BOX_WEIGHT * box_loss + L1_WEIGHT * l1_loss + OBJECT_WEIGHT * object_loss
             + CLASS_WEIGHT * class_loss)
    return total, {"box": box_loss.item(), "l1": l1_loss.item(), "obj": object_loss.item(),
                   "cls": class_loss.item()}


def box_iou_giou(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """IoU and generalised IoU of matching rows of two (P, 4) xyxy tensors."""
    lt, rb = torch.maximum(a[:, :2], b[:, :2]), torch.minimum(a[:, 2:], b[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(1)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(1)
    union = area_a + area_b - inter + 1e-7
    iou = inter / union
    hull = (torch.maximum(a[:, 2:], b[:, 2:]) - torch.minimum(a[:, :2], b[:, :2])).prod(1)
    return iou, iou - (hull - union) / (hull + 1e-7)


def distillation_loss(student: HeadOutputs, teacher: HeadOutputs,
                      targets: Targets) -> tuple[torch.Tensor, dict[str, float]]:
    """How far the student's raw outputs are from a teacher's on the same images (Hinton's
    knowledge distillation, applied to the three head outputs), normalised like
    ``detection_loss`` by the number of positives:

    - objectness: BCE of the student's logits against the teacher's probabilities, on every
      counted cell (the teacher's "maybe" on a half-hidden object is information the 0/1
      labels do not carry);
    - classes: KL divergence of the softmax distributions, weighted per cell by the teacher's
      objectness (background cells' class outputs are never used);
    - box sides: L1 in cells, weighted the same way.
    """
    count = targets.positive.sum().clamp(min=1).float()
    weight = teacher.objectness.flatten(1).sigmoid()  # [B, N]
    object_loss = (F.binary_cross_entropy_with_logits(
        student.objectness.flatten(1), weight, reduction="none") * targets.counted).sum() / count
    log_student = student.classes.flatten(2).log_softmax(1)
    log_teacher = teacher.classes.flatten(2).log_softmax(1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(1)  # [B, N]
    class_loss = (kl * weight).sum() / count
    sides = (distances(student.box.flatten(2)) - distances(teacher.box.flatten(2))).abs()
    box_loss = (sides.sum(1) / STRIDE * weight).sum() / count
    total = object_loss + class_loss + box_loss
    return DISTILL_WEIGHT * total, {"kd_obj": object_loss.item(), "kd_cls": class_loss.item(),
                                    "kd_box": box_loss.item()}
