"""Detection accuracy: COCO mAP@0.5 and mAP@0.5:0.95 from predictions and ground truth.

Pure functions over numpy arrays, so the trainer (on rendered images), ``vidpipe model
evaluate`` (on the pipeline's detections.jsonl) and later the quantizer (INT8 against FP32)
all score the same way. The arithmetic is pycocotools' own (the reference implementation), not
a re-derivation: figures here compare with any other COCO-style figure.

Per frame, truth rows are ``x1, y1, x2, y2, class_id``; ignored rows (objects too hidden to
count) become COCO "crowd" regions, so a detection on them is neither a hit nor a false alarm;
prediction rows are ``x1, y1, x2, y2, score, class_id``. Coordinates are pixels of one frame.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

MAX_DETECTIONS = 100  # per frame: COCO's largest maxDets


@dataclass(frozen=True, slots=True)
class FrameTruth:
    boxes: np.ndarray  # (N, 5): x1, y1, x2, y2, class_id
    ignore: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), np.float32))


@dataclass(frozen=True, slots=True)
class Accuracy:
    """COCO figures over a set of frames; NaN where there was nothing to score."""

    map50: float
    map50_95: float
    ap50_per_class: dict[str, float]
    frames: int
    objects: int  # scored ground-truth boxes (ignored ones not counted)
    detections: int

    def as_dict(self) -> dict[str, Any]:
        return {"mAP@0.5": round(self.map50, 4), "mAP@0.5:0.95": round(self.map50_95, 4),
                "AP@0.5 per class": {k: round(v, 4) for k, v in self.ap50_per_class.items()},
                "frames": self.frames, "objects": self.objects, "detections": self.detections}


def mean_average_precision(truths: Sequence[FrameTruth], predictions: Sequence[np.ndarray],
                           classes: Sequence[str]) -> Accuracy:
    """mAP of ``predictions`` (one (K, 6) array per frame) against ``truths``, COCO rules."""
    if len(truths) != len(predictions):
        raise ValueError(f"one prediction array per frame: {len(truths)} frames of truth, "
                         f"{len(predictions)} of predictions")
    gt = _coco_truth(truths, classes)
    results = _coco_results(predictions, len(classes))
    objects = sum(len(t.boxes) for t in truths)
    if objects == 0:
        nan = float("nan")
        return Accuracy(nan, nan, {c: nan for c in classes}, len(truths), 0, len(results))
    if not results:  # nothing found: pycocotools cannot load an empty result list
        return Accuracy(0.0, 0.0, {c: 0.0 for c in classes}, len(truths), objects, 0)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        evaluation = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluation.params.maxDets = [1, 10, MAX_DETECTIONS]
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return Accuracy(float(evaluation.stats[1]), float(evaluation.stats[0]),
                    _ap50_per_class(evaluation, classes), len(truths), objects, len(results))


def _coco_truth(truths: Sequence[FrameTruth], classes: Sequence[str]) -> COCO:
    annotations: list[dict[str, Any]] = []
    for image_id, truth in enumerate(truths):
        for rows, crowd in ((truth.boxes, 0), (truth.ignore, 1)):
            for x1, y1, x2, y2, c in np.asarray(rows, dtype=np.float64).reshape(-1, 5):
                if not 0 <= c < len(classes):
                    raise ValueError(f"frame {image_id}: class_id {int(c)} is not in "
                                     f"0..{len(classes) - 1}")
                w, h = x2 - x1, y2 - y1
                annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                    "category_id": int(c), "bbox": [x1, y1, w, h],
                                    "area": w * h, "iscrowd": crowd})
    coco = COCO()
    coco.dataset = {"images": [{"id": i} for i in range(len(truths))],
                    "categories": [{"id": i, "name": n} for i, n in enumerate(classes)],
                    "annotations": annotations}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def _coco_results(predictions: Sequence[np.ndarray], num_classes: int) -> list[dict[str, Any]]:
    results = []
    for image_id, rows in enumerate(predictions):
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
        for x1, y1, x2, y2, score, c in rows:
            if 0 <= c < num_classes:  # a class the truth cannot have would only add noise
                results.append({"image_id": image_id, "category_id": int(c),
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "score": score})
    return results


def _ap50_per_class(evaluation: COCOeval, classes: Sequence[str]) -> dict[str, float]:
    """AP at IoU 0.5 per class: precision [T, R, K, A, M] at T=0.5, all areas, most dets."""
    precision = evaluation.eval["precision"][0, :, :, 0, -1]
    out = {}
    for k, name in enumerate(classes):
        column = precision[:, k]
        valid = column[column > -1]
        out[name] = float(valid.mean()) if valid.size else float("nan")
    return out
