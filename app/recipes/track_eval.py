"""Scoring tracking: run the pipeline with a tracker over clips with MOT truth, and score the
tracks with HOTA, MOTA and IDF1 (``trackers.eval``, which follows TrackEval's matching), and
a counting line's counts against the same line walked by the true objects.

The run keeps the model's card threshold: the tracker's thresholds follow it, and a tracker
is judged on the boxes it would be given in use. Only confirmed tracks are scored (a box with
no track id is not a track). The truth's line count walks each true object's box through the
same ``LineCounter`` — so a count is exact when every crossing is tracked.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.run.runner import run_files
from app.run.sources import stream_ids
from models.spec import ModelSpec
from models.tracking_data import mot_truth_path
from pipelines.analytics.config import AnalyticsConfig, LineConfig
from pipelines.analytics.lines import LineCounter
from pipelines.analytics.replay import RecordedFrame, replay, stream_fps
from pipelines.errors import ConfigError
from pipelines.options import PipelineOptions

METRICS = ("HOTA", "DetA", "AssA", "MOTA", "IDF1", "IDSW")


@dataclass
class TrackScores:
    overall: dict[str, float]
    per_clip: dict[str, dict[str, float]]
    # line -> clip -> {"found": {"in", "out"}, "truth": {"in", "out"}}
    lines: dict[str, dict[str, dict[str, dict[str, int]]]] = field(default_factory=dict)
    frames: int = 0
    predicted_frames: int = 0
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"overall": self.overall, "per_clip": self.per_clip, "lines": self.lines,
                "frames": self.frames, "predicted_frames": self.predicted_frames,
                "wall_s": round(self.wall_s, 3),
                "fps": round(self.frames / self.wall_s, 2) if self.wall_s else None}


def score_tracking(model_path: Path, spec: ModelSpec, clips: Sequence[Path], out: Path,
                   options: PipelineOptions, *,
                   on_progress: Callable[[int, int | None], None] | None = None,
                   ) -> TrackScores:
    """Run, write MOT files of the tracks under ``out/mot``, and score them."""
    analytics = options.analytics
    if analytics is None or analytics.track is None:
        raise ConfigError("tracking is scored with a tracker: give --track")
    truths = [mot_truth_path(c) for c in clips]
    missing = [str(t) for t in truths if not t.is_file()]
    if missing:
        raise ConfigError(f"no MOT truth beside the clip: {', '.join(missing)} (make tracking "
                          "clips with `vidpipe model clips --tracking`)")
    _, pipeline, outputs = run_files(clips, model_path, spec, out, options,
                                     on_progress=on_progress)
    gt_dir, found_dir = out / "mot" / "gt", out / "mot" / "tracks"
    for folder in (gt_dir, found_dir):
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.txt"):  # an earlier run's clips would be scored too
            stale.unlink()
    ids = stream_ids(clips)
    tracks = _mot_tracks(outputs.detections)
    for sid, truth in zip(ids, truths, strict=True):
        (gt_dir / f"{sid}.txt").write_text(truth.read_text())
        (found_dir / f"{sid}.txt").write_text("".join(tracks.get(sid, [])))
    from trackers.eval import evaluate_mot_sequences

    result = evaluate_mot_sequences(gt_dir, found_dir, metrics=["CLEAR", "HOTA", "Identity"])
    summary = json.loads(outputs.summary.read_text())
    scores = TrackScores(mot_figures(result.aggregate),
                         {sid: mot_figures(r) for sid, r in result.sequences.items()},
                         wall_s=pipeline.wall_s or 0.0)
    for sid in ids:
        stream = summary["streams"][sid]
        scores.frames += stream["outcomes"].get("processed", 0)
        scores.predicted_frames += stream.get("analytics", {}).get("predicted_frames", 0)
    for line in analytics.lines:
        scores.lines[line.name] = {
            sid: {"found": summary["streams"][sid]["analytics"]["lines"][line.name],
                  "truth": truth_crossings(truth, line)}
            for sid, truth in zip(ids, truths, strict=True)}
    return scores


def evaluate_rows(truth: dict[str, str], tracks: dict[str, str]) -> Any:
    """``trackers.eval``'s result for MOT rows held in memory (sequence -> text), written to a
    folder of their own that goes with the call."""
    from trackers.eval import evaluate_mot_sequences

    with tempfile.TemporaryDirectory() as folder:
        truth_dir, found_dir = Path(folder) / "gt", Path(folder) / "tracks"
        for directory, rows in ((truth_dir, truth), (found_dir, tracks)):
            directory.mkdir()
            for name, text in rows.items():
                (directory / f"{name}.txt").write_text(text)
        return evaluate_mot_sequences(truth_dir, found_dir, metrics=["CLEAR", "HOTA", "Identity"])


def replay_scored(streams: dict[str, list[RecordedFrame]], clips: Sequence[Path],
                  config: AnalyticsConfig, spec: ModelSpec) -> tuple[dict[str, Any], Any]:
    """Recorded streams replayed under ``config``: each clip's counts, and ``trackers.eval``'s
    result for their tracks against the clips' MOT truth."""
    counts, truth, tracks = {}, {}, {}
    for sid, clip in zip(stream_ids(clips), clips, strict=True):
        rows: list[str] = []
        frames = streams.get(sid, [])
        counts[sid] = replay(frames, sid, config, spec, stream_fps(frames), mot=rows).counts
        truth[sid], tracks[sid] = mot_truth_path(clip).read_text(), "".join(rows)
    return counts, evaluate_rows(truth, tracks)


def mot_figures(result: Any) -> dict[str, float]:
    hota, clear, identity = result.HOTA, result.CLEAR, result.Identity
    return {"HOTA": round(100 * hota.HOTA, 2), "DetA": round(100 * hota.DetA, 2),
            "AssA": round(100 * hota.AssA, 2), "MOTA": round(100 * clear.MOTA, 2),
            "IDF1": round(100 * identity.IDF1, 2), "IDSW": int(clear.IDSW)}


def _mot_tracks(detections: Path) -> dict[str, list[str]]:
    """detections.jsonl -> per stream, MOT rows of its confirmed tracks (1-based)."""
    rows: dict[str, list[str]] = {}
    for text in detections.read_text().splitlines():
        record = json.loads(text)
        out = rows.setdefault(record["stream"], [])
        for d in record["detections"]:
            if d.get("track_id") is None:
                continue
            x1, y1, x2, y2 = d["box"]
            out.append(f"{record['frame'] + 1},{d['track_id'] + 1},{x1},{y1},{x2 - x1},"
                       f"{y2 - y1},{d['score']},-1,-1,-1\n")
    return rows


def truth_crossings(truth: Path, line: LineConfig) -> dict[str, int]:
    """The line's counts when the clip's true objects walk through it (every row, the
    hidden ones too: the object is there)."""
    frames: dict[int, list[list[float]]] = {}
    for text in truth.read_text().splitlines():
        f, oid, x, y, w, h, *_ = (float(v) for v in text.split(","))
        frames.setdefault(int(f), []).append([x, y, x + w, y + h, oid])
    counter = LineCounter(line)
    for f in sorted(frames):
        rows = np.asarray(frames[f], np.float64)
        counter.update(rows[:, :4], rows[:, 4].astype(int), np.zeros(len(rows), int))
    return dict(counter.counts)
