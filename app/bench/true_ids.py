"""The counting bench's measure of what the tracker costs: a recorded run's boxes counted by
the same lines with the truth's identities in place of the tracker's. Each box the model gave
takes the id of the object whose whole outline (hidden or not) its box overlaps most, at
IoU >= ``MATCH_IOU``, one box an object a frame; a box that matches none counts nothing.
No tracker runs: the count error left is the detector's boxes' and the counter's own, and a
run's error above it is its tracker's identities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from models.counting_data import counting_scene
from models.counting_truth import count_error, object_boxes
from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.analytics.lines import LineCounter
from pipelines.analytics.replay import recorded_streams
from pipelines.analytics.stream import class_ids
from pipelines.frame import Detections
from pipelines.postprocess.nms import box_iou

MATCH_IOU = 0.3


def true_ids(xyxy: np.ndarray, object_ids: np.ndarray, object_xyxy: np.ndarray) -> np.ndarray:
    """Each box's object id (-1: none): pairs taken by IoU, highest first, each box and each
    object at most once, none under ``MATCH_IOU``."""
    ids = np.full(len(xyxy), -1, np.int64)
    if not len(xyxy) or not len(object_ids):
        return ids
    iou = box_iou(xyxy, object_xyxy)
    taken: set[int] = set()
    for flat in np.argsort(-iou, axis=None, kind="stable"):
        box, obj = divmod(int(flat), iou.shape[1])
        if iou[box, obj] < MATCH_IOU:
            break
        if ids[box] < 0 and obj not in taken:
            ids[box] = object_ids[obj]
            taken.add(obj)
    return ids


def true_id_error(run: Path, truths: dict[str, dict[str, Any]], config: AnalyticsConfig,
                  spec: ModelSpec) -> dict[str, Any]:
    """The count error of ``run``'s boxes (its ``detections.jsonl``, of counting-set clips
    whose truths, each its ``counts.json``, are given by stream) with the truth's identities,
    by ``config``'s lines. The frames the model did not see pass with no boxes, as the
    lines' clock goes on."""
    recorded = recorded_streams(run / "detections.jsonl")
    found = {}
    for sid, truth in truths.items():
        scene = counting_scene(int(truth["seed"]))
        lines = [LineCounter(c, class_ids(c.classes, spec, f"line {c.name}"))
                 for c in config.lines]
        for frame in recorded[sid]:
            d, ids = Detections.empty(), np.zeros(0, np.int64)
            if not frame.predicted and frame.skipped is None:
                d = frame.detections
                ids = true_ids(d.xyxy, *object_boxes(scene, frame.index))
            for line in lines:
                line.update(d.xyxy, ids, d.class_id)
        found[sid] = {line.config.name: dict(line.counts) for line in lines}
    return count_error(found, truths)
