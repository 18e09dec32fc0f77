"""The counting bench's perfect detector: each clip's truth boxes (the objects at least
``VISIBLE_MIN`` visible, the boxes the shapes models are trained to give, score 1) written as
a run's ``detections.jsonl`` — the model on one frame in N, as a recorded run has it — then
tracked and counted by the same replay as every rule. Its count error is the tracker's and
the counter's own, with no detector's misses, so it says how much of the error is left to
them and how much to the detectors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.recipes.track_eval import mot_figures, replay_scored
from app.run.sources import stream_ids
from models.data import boxes_path
from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.analytics.replay import recorded_streams


def write_truth_run(clips: list[Path], every: int, out: Path) -> Path:
    """``out/detections.jsonl`` of the clips' truth boxes, the frames between the model's
    marked ``predicted`` (their boxes are the tracker's in a replay, as in a run)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "detections.jsonl"
    with path.open("w", encoding="utf-8") as lines:
        for sid, clip in zip(stream_ids(clips), clips, strict=True):
            truth = json.loads(boxes_path(clip).read_text())
            fps = float(truth["fps"])
            for index, boxes in enumerate(truth["frames"]):
                record: dict[str, Any] = {
                    "stream": sid, "frame": index, "pts": round(index / fps, 6),
                    "detections": [{"box": box[:4], "score": 1.0, "class_id": int(box[4])}
                                   for box in boxes]}
                if index % every:
                    record |= {"predicted": True, "detections": []}
                lines.write(json.dumps(record) + "\n")
    return path


def replayed_run(path: Path, clips: list[Path], config: AnalyticsConfig,
                 spec: ModelSpec) -> tuple[dict[str, Any], dict[str, float]]:
    """A recorded run replayed under ``config``: each stream's counts, and its tracks' MOT
    scores against the clips' truth."""
    counts, result = replay_scored(recorded_streams(path), clips, config, spec)
    return counts, mot_figures(result.aggregate)
