"""Raw model outputs crafted from known boxes in source pixels: each is mapped into the model
input with its frame's Letterbox and laid out the way the model format does, so decoding must
give the same source boxes back."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.spec import OutputSpec
from pipelines.frame import Detections
from pipelines.geometry import Letterbox

NUM_CLASSES = 3
SOURCES = [(1280, 720), (720, 1280), (333, 997), (1000, 101)]
INPUTS = [(640, 640), (320, 256)]
MODES = ["letterbox", "stretch"]
SSD_NAMES = {"boxes": "detection_boxes", "scores": "detection_scores",
             "classes": "detection_classes", "count": "num_detections"}


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
