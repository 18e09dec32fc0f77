"""Greedy non-maximum suppression on the CPU, in numpy.

Detectors without NMS inside (YOLO exports) propose many overlapping boxes for one object;
NMS keeps the best-scoring box of each cluster. Each greedy step compares the current best
box with all remaining candidates at once, so the Python loop runs once per *kept* box, not
once per pair. Up to ``MATRIX_MAX`` candidates (a detector's usual few dozen after the score
threshold) every pairwise IoU is computed in one pass first, and each step is then one
row lookup, which is faster than one pass per kept box at these sizes (docs/BENCHMARKS.md,
"Measurements behind code choices"). Both ways give the same boxes (the tests hold them to
a pair-by-pair reference).
"""

from __future__ import annotations

import numpy as np

MATRIX_MAX = 512  # candidates up to which all pairwise IoUs are computed at once (~2 MB)


def nms(
    xyxy: np.ndarray,
    score: np.ndarray,
    iou_threshold: float,
    class_id: np.ndarray | None = None,
    max_keep: int | None = None,
) -> np.ndarray:
    """Indices of the boxes that survive NMS, highest score first.

    A box is suppressed when its IoU with a kept, better-scoring box is greater than
    ``iou_threshold``. With ``class_id`` the suppression is class-aware: a person box never
    hides an overlapping car box. Ties in score keep the earlier box, so the result does not
    depend on the sort algorithm. ``max_keep`` stops early once that many boxes are kept.
    """
    boxes = np.asarray(xyxy, dtype=np.float64)
    scores = np.asarray(score)
    _check_inputs(boxes, scores, class_id, max_keep)
    if boxes.shape[0] == 0 or max_keep == 0:
        return np.zeros(0, dtype=np.intp)
    classes = None if class_id is None else np.asarray(class_id)
    limit = boxes.shape[0] if max_keep is None else max_keep
    order = np.argsort(-scores, kind="stable")
    if boxes.shape[0] <= MATRIX_MAX:
        return _greedy_on_matrix(boxes[order], None if classes is None else classes[order],
                                 iou_threshold, limit, order)
    area = _area(boxes)
    keep: list[int] = []
    while order.size > 0 and len(keep) < limit:
        best, rest = int(order[0]), order[1:]
        keep.append(best)
        suppressed = _iou_one_to_many(boxes, area, best, rest) > iou_threshold
        if classes is not None:
            suppressed &= classes[rest] == classes[best]
        order = rest[~suppressed]
    return np.asarray(keep, dtype=np.intp)


def _greedy_on_matrix(boxes: np.ndarray, classes: np.ndarray | None, iou_threshold: float,
                      limit: int, order: np.ndarray) -> np.ndarray:
    """Greedy NMS over boxes already sorted best first, from their pairwise IoUs; returns
    the kept boxes' indices in ``order``."""
    suppresses = box_iou(boxes, boxes) > iou_threshold
    if classes is not None:
        suppresses &= classes[:, None] == classes[None, :]
    alive = np.ones(boxes.shape[0], dtype=bool)
    keep: list[int] = []
    start = 0
    while len(keep) < limit:
        ahead = np.flatnonzero(alive[start:])
        if ahead.size == 0:
            break
        best = start + int(ahead[0])
        keep.append(best)
        start = best + 1
        alive[start:] &= ~suppresses[best, start:]
    return order[np.asarray(keep, dtype=np.intp)]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of (N, 4) and (M, 4) xyxy boxes, as an (N, M) array; 0 where both are empty."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    # one coordinate at a time: (N, 1) against (1, M), no (N, M, 2) temporaries
    w = np.minimum(a[:, 2:3], b[:, 2]) - np.maximum(a[:, 0:1], b[:, 0])
    h = np.minimum(a[:, 3:4], b[:, 3]) - np.maximum(a[:, 1:2], b[:, 1])
    np.maximum(w, 0.0, out=w)
    np.maximum(h, 0.0, out=h)
    inter = np.multiply(w, h, out=w)
    union = _area(a)[:, None] + _area(b) - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _iou_one_to_many(
    boxes: np.ndarray, area: np.ndarray, i: int, others: np.ndarray
) -> np.ndarray:
    """IoU of box ``i`` with each box in ``others``; degenerate pairs (zero union) count as 0."""
    b = boxes[others]
    w = np.minimum(boxes[i, 2], b[:, 2]) - np.maximum(boxes[i, 0], b[:, 0])
    h = np.minimum(boxes[i, 3], b[:, 3]) - np.maximum(boxes[i, 1], b[:, 1])
    inter = np.clip(w, 0.0, None) * np.clip(h, 0.0, None)
    union = area[i] + area[others] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _area(boxes: np.ndarray) -> np.ndarray:
    """Areas of xyxy boxes; an inverted box has area 0, not a negative one."""
    w = np.clip(boxes[:, 2] - boxes[:, 0], 0.0, None)
    h = np.clip(boxes[:, 3] - boxes[:, 1], 0.0, None)
    return w * h


def _check_inputs(
    boxes: np.ndarray, scores: np.ndarray, class_id: np.ndarray | None, max_keep: int | None
) -> None:
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"nms boxes must be (N, 4) xyxy, got {boxes.shape}")
    n = boxes.shape[0]
    if scores.shape != (n,):
        raise ValueError(f"nms scores must be ({n},) to match the boxes, got {scores.shape}")
    if class_id is not None and np.shape(class_id) != (n,):
        raise ValueError(
            f"nms class_id must be ({n},) to match the boxes, got {np.shape(class_id)}"
        )
    if max_keep is not None and max_keep < 0:
        raise ValueError(f"nms max_keep must be >= 0 or None, got {max_keep}")
