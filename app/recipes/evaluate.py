"""Scoring a model on labelled clips through the real pipeline.

``score_clips`` runs ``app.run.runner.run_files`` (decode, letterbox, ONNX Runtime, yolov8
decoding, NMS, JSONL: the path a user's run takes) and compares detections.jsonl with each
clip's boxes file (``models.data`` documents the format) by ``models.evaluate``. The
pipeline's score threshold is lowered for the run (``EVAL_SCORE_THRESHOLD``): mAP integrates
the whole precision/recall curve, which a 0.25 operating threshold would cut short.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.run.runner import run_files
from app.run.sources import stream_ids
from models.data import boxes_path, load_boxes
from models.evaluate import Accuracy, FrameTruth, mean_average_precision
from models.spec import ModelSpec
from pipelines.errors import VidpipeError
from pipelines.options import PipelineOptions

EVAL_SCORE_THRESHOLD = 0.01


class LabelsError(VidpipeError, ValueError):
    """A boxes file is missing, unreadable, or does not fit the clip or the model."""


@dataclass(frozen=True, slots=True)
class ClipScores:
    overall: Accuracy
    per_clip: dict[str, Accuracy]
    detections: Path
    wall_s: float  # the pipeline run, all clips at once

    def as_dict(self) -> dict[str, Any]:
        return {"overall": self.overall.as_dict(), "wall_s": round(self.wall_s, 2),
                "clips": {k: v.as_dict() for k, v in self.per_clip.items()}}


def labels_for(clips: Sequence[Path], labels: Sequence[Path] | None) -> list[Path]:
    """The boxes file of each clip: as given (one per clip), else the one beside the clip."""
    if labels:
        if len(labels) != len(clips):
            raise LabelsError(f"give one --labels per --video: {len(clips)} videos, "
                              f"{len(labels)} labels")
        return list(labels)
    found = [boxes_path(c) for c in clips]
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise LabelsError(f"no boxes file beside the clip: {', '.join(missing)} "
                          f"(give --labels)")
    return found


def read_truth(path: Path, spec: ModelSpec) -> list[FrameTruth]:
    """Per-frame truth of a boxes file whose classes are the model's (same names, same order)."""
    try:
        record = load_boxes(path)
    except ValueError as e:
        raise LabelsError(str(e)) from e
    classes = record.get("classes")
    if classes is not None and list(classes) != list(spec.classes):
        raise LabelsError(f"{path}: labels name classes {classes}, the model {spec.name} has "
                          f"{spec.classes}")
    return [FrameTruth(np.asarray(kept, np.float32).reshape(-1, 5),
                       np.asarray(hidden, np.float32).reshape(-1, 5))
            for kept, hidden in zip(record["frames"], record["ignore"], strict=True)]


def score_clips(model_path: Path, spec: ModelSpec, clips: Sequence[Path],
                labels: Sequence[Path] | None, out: Path, *,
                options: PipelineOptions | None = None,
                score_threshold: float = EVAL_SCORE_THRESHOLD,
                on_progress: Callable[[int, int | None], None] | None = None) -> ClipScores:
    """Run the pipeline over ``clips`` and score its detections against their labels."""
    truths = {sid: read_truth(p, spec) for sid, p in
              zip(stream_ids(clips), labels_for(clips, labels), strict=True)}
    return score_against(model_path, spec, clips, truths, out, options=options,
                         score_threshold=score_threshold, on_progress=on_progress)


def reference_truth(reference: tuple[Path, ModelSpec], clips: Sequence[Path], out: Path, *,
                    options: PipelineOptions | None = None,
                    on_progress: Callable[[int, int | None], None] | None = None,
                    ) -> dict[str, list[FrameTruth]]:
    """Labels for footage that has none: the reference model's own detections at its card's
    operating threshold (score_threshold), per stream and frame. Scoring another model
    against them gives *agreement* mAP: 1.0 means it finds what the reference finds."""
    path, spec = reference
    _, _, outputs = run_files(clips, path, spec, out, options or PipelineOptions(),
                              on_progress=on_progress)
    found = read_detections(outputs.detections)
    truths = {}
    for sid in stream_ids(clips):
        frames = found.get(sid, {})
        count = max(frames, default=-1) + 1
        rows = [frames.get(i, np.zeros((0, 6), np.float32)) for i in range(count)]
        truths[sid] = [FrameTruth(r[:, [0, 1, 2, 3, 5]].copy(), np.zeros((0, 5), np.float32))
                       for r in rows]
    return truths


def score_against(model_path: Path, spec: ModelSpec, clips: Sequence[Path],
                  truths: dict[str, list[FrameTruth]], out: Path, *,
                  options: PipelineOptions | None = None,
                  score_threshold: float = EVAL_SCORE_THRESHOLD,
                  on_progress: Callable[[int, int | None], None] | None = None) -> ClipScores:
    """Run the pipeline over ``clips`` and score its detections against ``truths``."""
    output = spec.output.model_copy(update={"score_threshold": score_threshold})
    run_spec = spec.model_copy(update={"output": output})
    _, pipeline, outputs = run_files(clips, model_path, run_spec, out,
                                     options or PipelineOptions(), on_progress=on_progress)
    found = read_detections(outputs.detections)
    per_clip, all_truth, all_found = {}, [], []
    for sid, truth in truths.items():
        frames = found.get(sid, {})
        extra = [i for i in frames if i >= len(truth)]
        if extra:
            raise LabelsError(f"clip {sid}: the labels cover {len(truth)} frames, the clip "
                              f"has at least {max(extra) + 1}; wrong labels for this clip?")
        predictions = [frames.get(i, np.zeros((0, 6), np.float32)) for i in range(len(truth))]
        per_clip[sid] = mean_average_precision(truth, predictions, spec.classes)
        all_truth += truth
        all_found += predictions
    overall = mean_average_precision(all_truth, all_found, spec.classes)
    return ClipScores(overall, per_clip, outputs.detections, pipeline.wall_s or 0.0)


def read_detections(path: Path) -> dict[str, dict[int, np.ndarray]]:
    """detections.jsonl as stream -> frame -> (K, 6) rows x1, y1, x2, y2, score, class_id."""
    found: dict[str, dict[int, np.ndarray]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        rows = [[*d["box"], d["score"], d["class_id"]] for d in record["detections"]]
        found.setdefault(record["stream"], {})[int(record["frame"])] = \
            np.asarray(rows, np.float32).reshape(-1, 6)
    return found
