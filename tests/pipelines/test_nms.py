"""NMS: the matrix and the row-by-row paths against a pair-by-pair reference, and its inputs."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.postprocess import nms as nms_module
from pipelines.postprocess.nms import box_iou, nms

# --- NMS -----------------------------------------------------------------------------------


def pair_iou(a: list[float], b: list[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


def reference_nms(xyxy: np.ndarray, score: np.ndarray, threshold: float,
                  class_id: np.ndarray | None) -> list[int]:
    """Greedy NMS written the slow, obvious way, pair by pair, in Python floats."""
    boxes = xyxy.astype(np.float64).tolist()
    order = sorted(range(len(score)), key=lambda i: (-score[i], i))
    kept: list[int] = []
    for i in order:
        same = [k for k in kept if class_id is None or class_id[k] == class_id[i]]
        if all(pair_iou(boxes[i], boxes[k]) <= threshold for k in same):
            kept.append(i)
    return kept


@pytest.mark.parametrize(
    ("boxes", "scores", "classes", "threshold", "max_keep", "expected"),
    [
        ([], [], None, 0.5, None, []),
        ([[0, 0, 10, 10], [1, 1, 11, 11]], [0.8, 0.9], None, 0.5, None, [1]),
        ([[0, 0, 10, 10], [1, 1, 11, 11]], [0.8, 0.9], [0, 1], 0.5, None, [1, 0]),
        ([[0, 0, 10, 10], [1, 1, 11, 11]], [0.8, 0.9], [2, 2], 0.5, None, [1]),
        ([[0, 0, 10, 10], [20, 20, 30, 30]], [0.3, 0.7], None, 0.5, None, [1, 0]),
        # IoU exactly at the threshold does not suppress
        ([[0, 0, 10, 10], [0, 0, 10, 5]], [0.9, 0.8], None, 0.5, None, [0, 1]),
        ([[0, 0, 10, 10], [0, 0, 10, 5]], [0.9, 0.8], None, 0.49, None, [0]),
        # chain: B is suppressed by A, so C (which overlaps only B) survives
        ([[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10]], [0.9, 0.8, 0.7], None, 0.3, None,
         [0, 2]),
        # equal scores: the earlier box wins
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [0.5, 0.5], None, 0.5, None, [0]),
        ([[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]], [0.1, 0.3, 0.2], None, 0.5, 2, [1, 2]),
        ([[0, 0, 1, 1]], [0.1], None, 0.5, 0, []),
        # degenerate (zero-area) boxes never suppress anything
        ([[5, 5, 5, 5], [5, 5, 5, 5]], [0.9, 0.8], None, 0.0, None, [0, 1]),
    ],
    ids=["empty", "overlap-same", "overlap-other-class", "overlap-same-class", "apart",
         "iou-at-threshold", "iou-above-threshold", "chain", "tie", "max-keep", "max-keep-0",
         "degenerate"],
)
@pytest.mark.parametrize("matrix_max", [nms_module.MATRIX_MAX, 0], ids=["matrix", "rows"])
def test_nms_cases(
    boxes: list[list[float]], scores: list[float], classes: list[int] | None, threshold: float,
    max_keep: int | None, expected: list[int], matrix_max: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nms_module, "MATRIX_MAX", matrix_max)
    xyxy = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    class_id = None if classes is None else np.asarray(classes)
    kept = nms(xyxy, np.asarray(scores, np.float32), threshold, class_id, max_keep)
    assert kept.dtype == np.intp
    assert kept.tolist() == expected


@pytest.mark.parametrize("matrix_max", [nms_module.MATRIX_MAX, 0], ids=["matrix", "rows"])
@pytest.mark.parametrize("class_aware", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_nms_matches_pairwise_reference(seed: int, class_aware: bool, matrix_max: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms_module, "MATRIX_MAX", matrix_max)
    rng = np.random.default_rng(seed)
    n = 200
    xy = rng.uniform(0, 300, (n, 2))
    wh = rng.uniform(10, 150, (n, 2))
    xyxy = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    score = rng.uniform(0, 1, n).astype(np.float32)
    class_id = rng.integers(0, 3, n) if class_aware else None
    expected = reference_nms(xyxy, score, 0.45, class_id)
    assert nms(xyxy, score, 0.45, class_id).tolist() == expected
    assert nms(xyxy, score, 0.45, class_id, max_keep=7).tolist() == expected[:7]


@pytest.mark.parametrize(
    ("a", "b", "iou"),
    [
        ([0, 0, 10, 10], [0, 0, 10, 10], 1.0),
        ([0, 0, 10, 10], [5, 0, 15, 10], 50 / 150),
        ([0, 0, 10, 10], [10, 0, 20, 10], 0.0),
        ([0, 0, 10, 10], [2, 2, 4, 4], 4 / 100),
        ([0, 0, 0, 0], [0, 0, 0, 0], 0.0),
    ],
    ids=["same", "half-shift", "touching", "contained", "both-empty"],
)
def test_box_iou(a: list[float], b: list[float], iou: float) -> None:
    result = box_iou(np.array([a]), np.array([b, a]))
    assert result.shape == (1, 2)
    assert result[0, 0] == pytest.approx(iou)


@pytest.mark.parametrize(
    ("xyxy", "score", "class_id", "max_keep", "message"),
    [
        (np.zeros((2, 3)), np.zeros(2), None, None, r"boxes must be \(N, 4\)"),
        (np.zeros((2, 4)), np.zeros(3), None, None, r"scores must be \(2,\)"),
        (np.zeros((2, 4)), np.zeros(2), np.zeros(1), None, r"class_id must be \(2,\)"),
        (np.zeros((2, 4)), np.zeros(2), None, -1, "max_keep must be >= 0"),
    ],
    ids=["box-columns", "score-length", "class-length", "negative-max-keep"],
)
def test_nms_rejects_bad_inputs(
    xyxy: np.ndarray, score: np.ndarray, class_id: np.ndarray | None, max_keep: int | None,
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        nms(xyxy, score, 0.5, class_id, max_keep)


# --- crafted outputs -----------------------------------------------------------------------
