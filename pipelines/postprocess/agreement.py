"""Whether two runs of a model on the same frames gave the same detections, frame by frame:
the measure ``vidpipe model check`` reports and the CPU runtime choice admits a runtime by
(``pipelines.infer.choice``). A frame agrees when both sides found as many boxes and each
reference box pairs with one of the same class at IoU >= ``MATCH_IOU`` whose score is within
``MATCH_SCORE``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.frame import Detections
from pipelines.postprocess.nms import box_iou

MATCH_IOU = 0.9
MATCH_SCORE = 0.02


@dataclass(slots=True)
class Agreement:
    """Frame-by-frame agreement of one side's detections with another's (the reference)."""

    frames: int = 0
    agreed: int = 0
    ious: list[float] = field(default_factory=list)  # of the boxes paired across the sides
    score_diffs: list[float] = field(default_factory=list)
    boxes_reference: int = 0
    boxes_other: int = 0
    frames_missing: int = 0  # reference frames the other side gave no result for

    def add(self, reference: Detections, other: Detections | None) -> bool:
        """Count one frame; whether it agrees."""
        self.frames += 1
        self.boxes_reference += len(reference)
        if other is None:
            self.frames_missing += 1
            return False
        self.boxes_other += len(other)
        ious, scores, all_paired = pair_boxes(reference, other)
        self.ious.extend(ious)
        self.score_diffs.extend(scores)
        agree = (len(reference) == len(other) and all_paired
                 and all(i >= MATCH_IOU for i in ious) and all(d <= MATCH_SCORE for d in scores))
        self.agreed += agree
        return agree

    def as_dict(self) -> dict[str, Any]:
        ious, diffs = np.asarray(self.ious), np.asarray(self.score_diffs)
        return {
            "frames": self.frames,
            "frame_agreement": round(self.agreed / self.frames, 4) if self.frames else None,
            "frames_agreeing": self.agreed,
            "frames_missing": self.frames_missing,
            "boxes_reference": self.boxes_reference, "boxes_pipeline": self.boxes_other,
            "box_iou_min": round(float(ious.min()), 4) if ious.size else None,
            "box_iou_mean": round(float(ious.mean()), 4) if ious.size else None,
            "score_diff_max": round(float(diffs.max()), 4) if diffs.size else None,
            "score_diff_mean": round(float(diffs.mean()), 5) if diffs.size else None,
        }


def pair_boxes(reference: Detections, other: Detections) -> tuple[list[float], list[float], bool]:
    """Pair each reference box (highest score first) with the unpaired box of the same class
    that overlaps it most: the pairs' IoUs and score differences, and whether every
    reference box found a partner."""
    ious: list[float] = []
    diffs: list[float] = []
    if len(reference) == 0 or len(other) == 0:
        return ious, diffs, len(reference) == 0
    overlap = box_iou(reference.xyxy, other.xyxy)
    free = np.ones(len(other), dtype=bool)
    paired = True
    for i in np.argsort(-reference.score, kind="stable"):
        candidates = free & (other.class_id == reference.class_id[i])
        if not candidates.any():
            paired = False
            continue
        j = int(np.argmax(np.where(candidates, overlap[i], -1.0)))
        free[j] = False
        ious.append(float(overlap[i, j]))
        diffs.append(abs(float(reference.score[i]) - float(other.score[j])))
    return ious, diffs, paired
