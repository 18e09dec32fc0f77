"""The occluded tracking clips in ``vidpipe bench --counting``: HOTA, IDF1 and identity switches
of the tracker as shipped at ``a1c290c`` (ByteTrack alone), without stitching, confirming
on two detections (``ad8619b``), and as now — each replayed on the same recorded boxes
(``pipelines/analytics/replay.py``), so only the tracker differs. The clips: lanes of shapes
with bars sweeping in front (``occluded-0``, ``occluded-1`` of ``vidpipe bench
--tracking``), truth in MOT form beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.bench.tracking import MIDDLE, tracking_clips
from app.recipes.track_eval import mot_figures, replay_scored, score_tracking
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.analytics.replay import recorded_streams
from pipelines.options import PipelineOptions

MODELS = {"fp32": "models/zoo/shapes-yolo/model.onnx",
          "int8": "models/zoo/shapes-yolo/model.pruned50.int8.onnx"}
# per tracker, its settings at one detection in N frames: before ``confirm_frames`` was a
# time, trackers confirmed a track on 2 detections at every N
TRACKERS: dict[str, Callable[[int], TrackerSettings]] = {
    "a1c290c (ByteTrack alone)": lambda n: TrackerSettings(
        kind="bytetrack", duplicate_iou=0.0, fast_objects=False, stitch_frames=0,
        confirm_frames=2 * n),
    "stitch_frames 0, confirm 2 detections": lambda n: TrackerSettings(
        stitch_frames=0, confirm_frames=2 * n),
    "confirm 2 detections (ad8619b)": lambda n: TrackerSettings(confirm_frames=2 * n),
    "defaults": lambda n: TrackerSettings(),
}


def occluded_tracking(out: Path, everys: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    """Per model, N and tracker: the overall and per-clip scores on the occluded clips."""
    clips = [c for c in tracking_clips() if c.stem.startswith("occluded")]
    report: dict[str, Any] = {}
    for quality, model in MODELS.items():
        path, spec = resolve_model(model)
        for every in everys:
            run = out / "occluded" / f"{quality}-{every}"
            analytics = AnalyticsConfig(track=TrackerSettings(), lines=[MIDDLE],
                                        detect_every=every)
            score_tracking(path, spec, clips, run, PipelineOptions(analytics=analytics))
            streams = recorded_streams(run / "detections.jsonl")
            for name, tracker in TRACKERS.items():
                config = analytics.model_copy(update={"track": tracker(every)})
                report[f"{quality} N={every} {name}"] = _scored(streams, clips, config, spec)
    return report


def _scored(streams: dict[str, Any], clips: list[Path], config: AnalyticsConfig,
            spec: Any) -> dict[str, Any]:
    """The recorded streams replayed under ``config``, their tracks scored against the
    clips' MOT truth."""
    _, result = replay_scored(streams, clips, config, spec)
    return {"overall": mot_figures(result.aggregate),
            "per_clip": {sid: mot_figures(r) for sid, r in result.sequences.items()}}
