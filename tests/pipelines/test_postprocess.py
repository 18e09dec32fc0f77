"""Output decoding, checked against raw outputs built from known source boxes.

Each crafted output starts from boxes in SOURCE pixels, maps them into the model input with
the frame's Letterbox, and lays them out the way the model format does. Decoding must give
back the same source boxes, whatever the aspect ratio and resize mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipelines.errors import ModelError
from pipelines.geometry import Letterbox
from pipelines.postprocess.yolo import (
    decode_outputs,
    decode_ssd,
    decode_yolov5,
    decode_yolov8,
)
from tests.support.outputs import (
    INPUTS,
    MODES,
    NUM_CLASSES,
    SSD_NAMES,
    assert_known_boxes,
    crafted,
    letterboxes_for,
    output_spec,
)


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
