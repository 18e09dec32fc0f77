"""Output decoding and NMS, checked against raw outputs built from known source boxes.

Each crafted output starts from boxes in SOURCE pixels, maps them into the model input with
the frame's Letterbox, and lays them out the way the model format does. Decoding must give
back the same source boxes, whatever the aspect ratio and resize mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from models.spec import OutputSpec
from pipelines.errors import ModelError
from pipelines.frame import Detections
from pipelines.geometry import Letterbox
from pipelines.postprocess import nms as nms_module
from pipelines.postprocess.nms import box_iou, nms
from pipelines.postprocess.yolo import (
    decode_outputs,
    decode_ssd,
    decode_yolov5,
    decode_yolov8,
)

NUM_CLASSES = 3
SOURCES = [(1280, 720), (720, 1280), (333, 997), (1000, 101)]
INPUTS = [(640, 640), (320, 256)]
MODES = ["letterbox", "stretch"]
SSD_NAMES = {"boxes": "detection_boxes", "scores": "detection_scores",
             "classes": "detection_classes", "count": "num_detections"}

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

def known_boxes(src: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source boxes (incl. the whole frame and a tiny one), their scores and classes.

    The two class-0 boxes barely overlap, so NMS must keep both of them.
    """
    w, h = src
    fractions = np.array([
        [0.10, 0.20, 0.40, 0.50],
        [0.38, 0.45, 0.90, 0.95],
        [0.00, 0.00, 1.00, 1.00],
        [0.60, 0.05, 0.63, 0.15],
    ])
    xyxy = (fractions * [w, h, w, h]).astype(np.float32)
    return xyxy, np.array([0.9, 0.8, 0.7, 0.6], np.float32), np.array([0, 0, 1, 2])


def to_cxcywh(xyxy: np.ndarray) -> np.ndarray:
    xyxy = xyxy.astype(np.float64)
    return np.concatenate([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], axis=1)


def yolo_rows(letterbox: Letterbox, n_anchors: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Anchors as (cxcywh, class scores, objectness): known boxes scattered among noise.

    Noise anchors have class scores under the 0.25 threshold; known boxes have objectness 1.
    """
    xyxy, score, class_id = known_boxes(letterbox.src_size)
    cxcywh = rng.uniform(20, 200, (n_anchors, 4))
    cls = rng.uniform(0.0, 0.2, (n_anchors, NUM_CLASSES))
    obj = rng.uniform(0.0, 1.0, n_anchors)
    slots = rng.choice(n_anchors, len(score), replace=False)
    cxcywh[slots] = to_cxcywh(letterbox.to_input(xyxy))
    cls[slots] = 0.05
    cls[slots, class_id] = score
    obj[slots] = 1.0
    return cxcywh, cls, obj


def letterboxes_for(input_size: tuple[int, int], mode: Any) -> list[Letterbox]:
    return [Letterbox.fit(src, input_size, mode) for src in SOURCES]


def yolov8_output(letterboxes: list[Letterbox], n_anchors: int = 64) -> np.ndarray:
    rng = np.random.default_rng(8)
    items = []
    for lb in letterboxes:
        cxcywh, cls, _ = yolo_rows(lb, n_anchors, rng)
        items.append(np.concatenate([cxcywh, cls], axis=1).T)
    return np.stack(items).astype(np.float32)


def yolov5_output(letterboxes: list[Letterbox], n_anchors: int = 64) -> np.ndarray:
    rng = np.random.default_rng(5)
    items = []
    for lb in letterboxes:
        cxcywh, cls, obj = yolo_rows(lb, n_anchors, rng)
        cls[obj < 0.2] = 0.99  # noise with high class scores but hopeless objectness
        items.append(np.concatenate([cxcywh, obj[:, None], cls], axis=1))
    return np.stack(items).astype(np.float32)


def ssd_outputs(letterboxes: list[Letterbox], input_size: tuple[int, int], k: int = 10
                ) -> dict[str, np.ndarray]:
    """TF-style outputs: classes count from 1; past ``count`` lies high-scoring garbage."""
    in_w, in_h = input_size
    boxes = np.zeros((len(letterboxes), k, 4), np.float32)
    scores = np.full((len(letterboxes), k), 0.99, np.float32)
    classes = np.full((len(letterboxes), k), 1.0, np.float32)
    count = np.zeros(len(letterboxes), np.float32)
    for b, lb in enumerate(letterboxes):
        xyxy, score, class_id = known_boxes(lb.src_size)
        n = len(score)
        on_input = lb.to_input(xyxy).astype(np.float64)
        boxes[b, :n] = on_input[:, [1, 0, 3, 2]] / [in_h, in_w, in_h, in_w]
        boxes[b, n] = [0.1, 0.1, 0.2, 0.2]  # valid entry, below the score threshold
        scores[b, :n + 1] = [*score, 0.1]
        classes[b, :n] = class_id + 1 - 1e-6  # a float that truncates to the wrong class
        count[b] = n + 1
    return {SSD_NAMES["boxes"]: boxes, SSD_NAMES["scores"]: scores,
            SSD_NAMES["classes"]: classes, SSD_NAMES["count"]: count}


def assert_known_boxes(found: list[Detections], letterboxes: list[Letterbox]) -> None:
    assert len(found) == len(letterboxes)
    for dets, lb in zip(found, letterboxes, strict=True):
        xyxy, score, class_id = known_boxes(lb.src_size)
        order = np.argsort(-dets.score)
        assert len(dets) == len(score), f"source {lb.src_size}"
        np.testing.assert_allclose(dets.xyxy[order], xyxy, atol=1e-3,
                                   err_msg=f"source {lb.src_size}")
        np.testing.assert_allclose(dets.score[order], score, atol=1e-6)
        assert dets.class_id[order].tolist() == class_id.tolist()
        assert dets.track_id.tolist() == [-1] * len(score)


def output_spec(fmt: str, **overrides: Any) -> OutputSpec:
    names = SSD_NAMES if fmt == "ssd" else {}
    class_offset = 1 if fmt == "ssd" else 0
    return OutputSpec.model_validate(
        {"format": fmt, "names": names, "class_offset": class_offset} | overrides)


def crafted(fmt: str, letterboxes: list[Letterbox], input_size: tuple[int, int]
            ) -> dict[str, np.ndarray]:
    if fmt == "yolov8":
        return {"output0": yolov8_output(letterboxes)}
    if fmt == "yolov5":
        return {"output": yolov5_output(letterboxes)}
    return ssd_outputs(letterboxes, input_size)


@pytest.mark.parametrize("fmt", ["yolov8", "yolov5", "ssd"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("input_size", INPUTS, ids=["640x640", "320x256"])
def test_decoded_boxes_return_to_their_source_pixels(
    fmt: str, mode: Any, input_size: tuple[int, int]
) -> None:
    letterboxes = letterboxes_for(input_size, mode)
    outputs = crafted(fmt, letterboxes, input_size)
    found = decode_outputs(outputs, letterboxes, output_spec(fmt), input_size, NUM_CLASSES)
    assert_known_boxes(found, letterboxes)


@pytest.mark.parametrize("fmt", ["yolov8", "yolov5"])
def test_yolo_nms_suppresses_same_class_overlap_only(fmt: str) -> None:
    lb = Letterbox.fit((1280, 720), (640, 640))
    # input-pixel boxes: A, A shifted by 2 px (same class), A shifted by 2 px (other class)
    cxcywh = np.array([[100, 300, 80, 60], [102, 300, 80, 60], [102, 302, 80, 60]], np.float32)
    cls = np.array([[0.9, 0, 0], [0.8, 0, 0], [0, 0.7, 0]], np.float32)
    if fmt == "yolov8":
        pred = np.concatenate([cxcywh, cls], axis=1).T[None]
        found = decode_yolov8(pred, [lb], output_spec(fmt), NUM_CLASSES)[0]
    else:
        pred = np.concatenate([cxcywh, np.ones((3, 1), np.float32), cls], axis=1)[None]
        found = decode_yolov5(pred, [lb], output_spec(fmt), NUM_CLASSES)[0]
    assert found.class_id.tolist() == [0, 1]
    np.testing.assert_allclose(found.score, [0.9, 0.7])
    np.testing.assert_allclose(found.xyxy[0], lb.to_source(np.array([[60, 270, 140, 330]]))[0])


@pytest.mark.parametrize(
    ("threshold", "max_detections", "expected_scores"),
    [
        (0.25, 300, [0.9, 0.7, 0.5, 0.3]),
        (0.5, 300, [0.9, 0.7, 0.5]),
        (0.95, 300, []),
        (0.0, 2, [0.9, 0.7]),
    ],
    ids=["default", "threshold-inclusive", "all-below", "max-detections"],
)
@pytest.mark.parametrize("fmt", ["yolov8", "yolov5", "ssd"])
def test_score_threshold_and_max_detections(
    fmt: str, threshold: float, max_detections: int, expected_scores: list[float]
) -> None:
    lb = Letterbox.fit((640, 640), (640, 640))
    scores = np.array([0.3, 0.9, 0.1, 0.5, 0.7], np.float32)
    apart = np.array([[50 + 100 * i, 50, 40, 40] for i in range(5)], np.float32)  # no overlap
    spec = output_spec(fmt, score_threshold=threshold, max_detections=max_detections)
    if fmt == "ssd":
        xyxy = apart[:, :2, None] + np.array([-20, 20])  # cx/cy -> lo/hi per axis
        yxyx = np.stack([xyxy[:, 1, 0], xyxy[:, 0, 0], xyxy[:, 1, 1], xyxy[:, 0, 1]], 1) / 640
        found = decode_ssd(yxyx[None], scores[None], np.ones((1, 5)), None, [lb], spec,
                           (640, 640))[0]
    else:
        cls = np.zeros((5, NUM_CLASSES), np.float32)
        cls[:, 1] = scores
        found = decode_outputs({"out": single_yolo(fmt, apart, cls)}, [lb], spec, (640, 640),
                               NUM_CLASSES)[0]
    np.testing.assert_allclose(np.sort(found.score)[::-1], expected_scores, rtol=1e-6)
    assert found.class_id.tolist() == [0 if fmt == "ssd" else 1] * len(expected_scores)


def single_yolo(fmt: str, cxcywh: np.ndarray, cls: np.ndarray) -> np.ndarray:
    if fmt == "yolov8":
        return np.concatenate([cxcywh, cls], axis=1).T[None]
    return np.concatenate([cxcywh, np.ones((len(cls), 1), np.float32), cls], axis=1)[None]


def test_yolov5_score_is_objectness_times_class_score() -> None:
    lb = Letterbox.fit((640, 640), (640, 640))
    pred = np.array([[[100, 100, 20, 20, 0.5, 0.0, 0.8, 0.1],     # 0.4 -> kept
                      [300, 300, 20, 20, 0.9, 0.26, 0.0, 0.0],    # 0.234 -> dropped
                      [500, 500, 20, 20, 0.2, 1.0, 1.0, 1.0]]],   # 0.2 -> dropped
                    np.float32)
    found = decode_yolov5(pred, [lb], output_spec("yolov5"), NUM_CLASSES)[0]
    np.testing.assert_allclose(found.score, [0.4], rtol=1e-6)
    assert found.class_id.tolist() == [1]


@pytest.mark.parametrize(
    ("fmt", "outputs"),
    [
        ("yolov8", {"out": np.zeros((2, 4 + NUM_CLASSES, 0), np.float32)}),
        ("yolov8", {"out": np.zeros((2, 4 + NUM_CLASSES, 50), np.float32)}),
        ("yolov5", {"out": np.zeros((2, 0, 5 + NUM_CLASSES), np.float32)}),
        ("yolov5", {"out": np.zeros((2, 50, 5 + NUM_CLASSES), np.float32)}),
        ("ssd", {"detection_boxes": np.zeros((2, 0, 4)), "detection_scores": np.zeros((2, 0)),
                 "detection_classes": np.zeros((2, 0)), "num_detections": np.zeros(2)}),
        ("ssd", {"detection_boxes": np.ones((2, 5, 4)), "detection_scores": np.ones((2, 5)),
                 "detection_classes": np.ones((2, 5)), "num_detections": np.zeros(2)}),
    ],
    ids=["yolov8-no-anchors", "yolov8-all-zero", "yolov5-no-anchors", "yolov5-all-zero",
         "ssd-no-slots", "ssd-count-zero"],
)
def test_empty_outputs_give_empty_detections_per_frame(
    fmt: str, outputs: dict[str, np.ndarray]
) -> None:
    letterboxes = [Letterbox.fit((1280, 720), (640, 640))] * 2
    found = decode_outputs(outputs, letterboxes, output_spec(fmt), (640, 640), NUM_CLASSES)
    assert [len(d) for d in found] == [0, 0]
    assert all(d.xyxy.shape == (0, 4) for d in found)


def test_ssd_without_count_reads_every_slot() -> None:
    lb = Letterbox.fit((640, 640), (640, 640))
    boxes = np.array([[[0.0, 0.0, 0.5, 0.25], [0.5, 0.5, 1.0, 1.0]]], np.float32)
    spec = output_spec("ssd", names={k: v for k, v in SSD_NAMES.items() if k != "count"})
    outputs = {"detection_boxes": boxes, "detection_scores": np.array([[0.9, 0.8]]),
               "detection_classes": np.array([[1, 2]], np.int64)}
    found = decode_outputs(outputs, [lb], spec, (640, 640), NUM_CLASSES)[0]
    np.testing.assert_allclose(found.xyxy, [[0, 0, 160, 320], [320, 320, 640, 640]])
    assert found.class_id.tolist() == [0, 1]


LB2 = [Letterbox.fit((1280, 720), (640, 640))] * 2


@pytest.mark.parametrize(
    ("fmt", "outputs", "message"),
    [
        ("yolov8", {"out": np.zeros((1, 84, 8400))},
         r"yolov8 output must be \[B, 4\+C, N\] with C=3 classes, got \(1, 84, 8400\)"),
        ("yolov8", {"out": np.zeros((7, 8400))}, r"yolov8 output must be .*got \(7, 8400\)"),
        ("yolov8", {"out": np.zeros((3, 7, 10))}, "yolov8 output holds 3 batch items, but the "
                                                  "batch had 2 frames"),
        ("yolov5", {"out": np.zeros((2, 8, 25200))},
         r"yolov5 output must be \[B, N, 5\+C\] with C=3 classes, got \(2, 8, 25200\)"),
        ("yolov5", {"out": np.zeros((2, 100, 85))}, r"C=3 classes, got \(2, 100, 85\)"),
        ("yolov8", {"a": np.zeros((2, 7, 1)), "b": np.zeros((2, 7, 1))},
         r"exactly one output, got \['a', 'b'\]"),
        ("yolov5", {}, r"exactly one output, got \[\]"),
        ("ssd", {"detection_boxes": np.zeros((2, 5, 4))},
         r"'scores' is named 'detection_scores' in the model card, but the model's outputs are "
         r"\['detection_boxes'\]"),
        ("ssd", {"detection_boxes": np.zeros((2, 5, 3)), "detection_scores": np.zeros((2, 5)),
                 "detection_classes": np.zeros((2, 5)), "num_detections": np.zeros(2)},
         r"ssd boxes must be \[B, K, 4\] \(ymin, xmin, ymax, xmax\), got \(2, 5, 3\)"),
        ("ssd", {"detection_boxes": np.zeros((2, 5, 4)), "detection_scores": np.zeros((2, 6)),
                 "detection_classes": np.zeros((2, 5)), "num_detections": np.zeros(2)},
         r"ssd scores must be \[B, K\] = \[2, 5\] to match the boxes, got \(2, 6\)"),
        ("ssd", {"detection_boxes": np.zeros((2, 5, 4)), "detection_scores": np.zeros((2, 5)),
                 "detection_classes": np.zeros((5,)), "num_detections": np.zeros(2)},
         r"ssd classes must be \[B, K\]"),
        ("ssd", {"detection_boxes": np.zeros((2, 5, 4)), "detection_scores": np.zeros((2, 5)),
                 "detection_classes": np.zeros((2, 5)), "num_detections": np.zeros(3)},
         r"ssd count must hold one number per batch item \(2\), got shape \(3,\)"),
        ("ssd", {"detection_boxes": np.zeros((1, 5, 4)), "detection_scores": np.zeros((1, 5)),
                 "detection_classes": np.zeros((1, 5)), "num_detections": np.zeros(1)},
         "ssd output holds 1 batch items, but the batch had 2 frames"),
    ],
    ids=["yolov8-coco-for-3", "yolov8-2d", "yolov8-batch", "yolov5-transposed",
         "yolov5-coco-for-3", "yolo-two-outputs", "yolo-no-output", "ssd-missing-name",
         "ssd-boxes", "ssd-scores", "ssd-classes", "ssd-count", "ssd-batch"],
)
def test_wrong_layouts_raise_model_error(
    fmt: str, outputs: dict[str, np.ndarray], message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        decode_outputs(outputs, LB2, output_spec(fmt), (640, 640), NUM_CLASSES)


def test_num_classes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_classes must be >= 1"):
        decode_yolov8(np.zeros((2, 4, 10)), LB2, output_spec("yolov8"), 0)
