"""Decoding of raw detector outputs into Detections, one per frame, in source pixels.

Each output format (see ``OutputSpec.format``) has its own layout; they all end the same way:
score threshold, NMS where the model has none inside, at most ``max_detections`` boxes, and
the boxes mapped from model-input pixels back to the source frame through that frame's
Letterbox. A layout that does not match the model card raises ModelError saying what was
expected, because a wrong card otherwise yields plausible-looking garbage boxes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from models.spec import OutputSpec
from pipelines.errors import ModelError
from pipelines.frame import Detections
from pipelines.geometry import Letterbox
from pipelines.postprocess.nms import nms


def decode_outputs(
    outputs: Mapping[str, np.ndarray],
    letterboxes: Sequence[Letterbox],
    spec: OutputSpec,
    input_size: tuple[int, int],
    num_classes: int,
) -> list[Detections]:
    """Decode a batch's raw outputs by ``spec.format``; ``input_size`` is the model's (w, h)."""
    if spec.format in ("yolov8", "yolov5"):
        if len(outputs) != 1:
            raise ModelError(
                f"{spec.format} model must have exactly one output, got {sorted(outputs)}"
            )
        (pred,) = outputs.values()
        decode = decode_yolov8 if spec.format == "yolov8" else decode_yolov5
        return decode(pred, letterboxes, spec, num_classes)
    if spec.format == "ssd":
        boxes, scores, classes = (_named_output(outputs, spec, k)
                                  for k in ("boxes", "scores", "classes"))
        count = _named_output(outputs, spec, "count") if "count" in spec.names else None
        return decode_ssd(boxes, scores, classes, count, letterboxes, spec, input_size)
    raise ModelError(f"unknown output format {spec.format!r}; expected yolov8, yolov5 or ssd")


def decode_yolov8(
    pred: np.ndarray, letterboxes: Sequence[Letterbox], spec: OutputSpec, num_classes: int
) -> list[Detections]:
    """[B, 4+C, N]: rows cx, cy, w, h (input pixels), then one score per class, no objectness."""
    pred = np.asarray(pred)
    _check_num_classes(num_classes)
    if pred.ndim != 3 or pred.shape[1] != 4 + num_classes:
        raise ModelError(f"yolov8 output must be [B, 4+C, N] with C={num_classes} classes, "
                         f"got {pred.shape}")
    _check_batch("yolov8", pred.shape[0], letterboxes)
    found = []
    for item, letterbox in zip(pred, letterboxes, strict=True):
        class_scores = item[4:]
        best = class_scores.max(axis=0)
        keep = best >= spec.score_threshold
        if not keep.any():  # no candidate: nothing to decode (most frames of a quiet scene)
            found.append(Detections.empty())
            continue
        # argmax only over the few candidates: the full [C, N] pass above is the costly part
        class_id = class_scores[:, keep].argmax(axis=0)
        found.append(_finish(item[:4, keep].T, best[keep], class_id, letterbox, spec))
    return found


def decode_yolov5(
    pred: np.ndarray, letterboxes: Sequence[Letterbox], spec: OutputSpec, num_classes: int
) -> list[Detections]:
    """[B, N, 5+C]: cx, cy, w, h (input pixels), objectness, class scores; score = obj * cls."""
    pred = np.asarray(pred)
    _check_num_classes(num_classes)
    if pred.ndim != 3 or pred.shape[2] != 5 + num_classes:
        raise ModelError(f"yolov5 output must be [B, N, 5+C] with C={num_classes} classes, "
                         f"got {pred.shape}")
    _check_batch("yolov5", pred.shape[0], letterboxes)
    found = []
    for item, letterbox in zip(pred, letterboxes, strict=True):
        # class scores are sigmoids (<= 1), so obj * cls >= t implies obj >= t: a cheap first cut
        rows = item[item[:, 4] >= spec.score_threshold]
        if not len(rows):  # no candidate: nothing to decode
            found.append(Detections.empty())
            continue
        class_scores = rows[:, 5:] * rows[:, 4:5]
        class_id = class_scores.argmax(axis=1)
        score = np.take_along_axis(class_scores, class_id[:, None], axis=1)[:, 0]
        keep = score >= spec.score_threshold
        found.append(_finish(rows[keep, :4], score[keep], class_id[keep], letterbox, spec))
    return found


def decode_ssd(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    count: np.ndarray | None,
    letterboxes: Sequence[Letterbox],
    spec: OutputSpec,
    input_size: tuple[int, int],
) -> list[Detections]:
    """TF-style SSD outputs, NMS already applied inside the model.

    ``boxes`` [B, K, 4] as (ymin, xmin, ymax, xmax) normalised to the model input, ``scores``
    and ``classes`` [B, K], ``count`` [B] valid entries per item (None: all K are valid).
    """
    boxes, scores, classes = np.asarray(boxes), np.asarray(scores), np.asarray(classes)
    _check_ssd_shapes(boxes, scores, classes, count)
    _check_batch("ssd", boxes.shape[0], letterboxes)
    k = boxes.shape[1]
    counts = [k] * boxes.shape[0] if count is None else np.asarray(count).reshape(-1)
    in_w, in_h = input_size
    scale = np.array([in_h, in_w, in_h, in_w], dtype=np.float32)
    found = []
    for b, letterbox in enumerate(letterboxes):
        n = int(np.clip(counts[b], 0, k))
        score = scores[b, :n].astype(np.float32)
        keep = np.flatnonzero(score >= spec.score_threshold)
        # keep the best max_detections; a stable sort keeps the model's order among ties
        keep = keep[np.argsort(-score[keep], kind="stable")[: spec.max_detections]]
        yxyx = boxes[b, keep].astype(np.float32) * scale
        # classes may be floats (TF exports): round so 0.9999997 reads as class 1, not 0
        class_id = np.rint(classes[b, keep]).astype(np.int32) - spec.class_offset
        xyxy = yxyx[:, [1, 0, 3, 2]]
        found.append(Detections(letterbox.to_source(xyxy), score[keep], class_id))
    return found


def _finish(
    cxcywh: np.ndarray,
    score: np.ndarray,
    class_id: np.ndarray,
    letterbox: Letterbox,
    spec: OutputSpec,
) -> Detections:
    """NMS in input pixels, then the survivors mapped to source pixels.

    NMS runs before the mapping because IoU does not change under the letterbox's per-axis
    scale and shift, and fewer boxes are left to map.
    """
    xyxy = _cxcywh_to_xyxy(cxcywh.astype(np.float32))
    kept = nms(xyxy, score, spec.iou_threshold, class_id, max_keep=spec.max_detections)
    return Detections(letterbox.to_source(xyxy[kept]), score[kept], class_id[kept])


def _cxcywh_to_xyxy(cxcywh: np.ndarray) -> np.ndarray:
    half = cxcywh[:, 2:4] * 0.5
    return np.concatenate([cxcywh[:, :2] - half, cxcywh[:, :2] + half], axis=1)


def _named_output(outputs: Mapping[str, np.ndarray], spec: OutputSpec, role: str) -> np.ndarray:
    name = spec.names[role]
    if name not in outputs:
        raise ModelError(
            f"ssd output {role!r} is named {name!r} in the model card, but the model's outputs "
            f"are {sorted(outputs)}"
        )
    return outputs[name]


def _check_num_classes(num_classes: int) -> None:
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1 (ModelSpec.num_classes), got {num_classes}")


def _check_batch(fmt: str, batch: int, letterboxes: Sequence[Letterbox]) -> None:
    if batch != len(letterboxes):
        raise ModelError(
            f"{fmt} output holds {batch} batch items, but the batch had {len(letterboxes)} frames"
        )


def _check_ssd_shapes(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, count: np.ndarray | None
) -> None:
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise ModelError(f"ssd boxes must be [B, K, 4] (ymin, xmin, ymax, xmax), "
                         f"got {boxes.shape}")
    b, k = boxes.shape[:2]
    for role, array in (("scores", scores), ("classes", classes)):
        if array.shape != (b, k):
            raise ModelError(f"ssd {role} must be [B, K] = {[b, k]} to match the boxes, "
                             f"got {array.shape}")
    if count is not None and np.size(count) != b:
        raise ModelError(f"ssd count must hold one number per batch item ({b}), "
                         f"got shape {np.shape(count)}")
