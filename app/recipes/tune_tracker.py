"""Fitting the tracker to a model (``vidpipe model tune-tracker``): the model runs once over a
labelled clip; then its recorded boxes are tracked again (``pipelines/analytics/replay.py``)
under each candidate setting, scored with HOTA and IDF1 against the clip's MOT truth, one
setting at a time from the model's current ones, keeping what raises HOTA (IDF1 breaks a
tie), for two passes. The thresholds to try come from the model's own scores on the clip
(their first quartile and median) beside its card's threshold. With the clip's truth counts
beside it (``clip.counts.json``, the counting set's), each evaluation also reports the count
error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from app.recipes.track_eval import evaluate_rows, mot_figures
from app.run.runner import run_files
from models.counting_truth import count_error
from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings
from pipelines.analytics.replay import RecordedFrame, recorded_streams, replay, stream_fps
from pipelines.analytics.tracking import fitted
from pipelines.errors import ConfigError
from pipelines.options import PipelineOptions

SEARCH: dict[str, tuple[Any, ...]] = {
    "lost_frames": (10, 20, 30, 60, 90),
    "confirm_frames": (1, 2, 3, 4, 6),
    "min_iou": (0.05, 0.1, 0.2, 0.3),
    "duplicate_iou": (0.0, 0.5, 0.6, 0.8),
    "stitch_frames": (0, 30, 60, 90),
}
PASSES = 2


def tune(model_path: Path, spec: ModelSpec, video: Path, truth: Path, out: Path, *,
         detect_every: int = 1,
         on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The search's report: the settings before and after, their figures, and what changed;
    the model on one frame in ``detect_every`` (the tracker's boxes between, as a stream
    running at that interval gets them)."""
    if not truth.is_file():
        raise ConfigError(f"--truth {truth}: no such file (MOT rows: frame, id, x, y, w, h, ...)")
    frames = _record(model_path, spec, video, out, detect_every)
    counts = _truth_counts(truth)
    scorer = _Scorer(frames, spec, truth, counts)
    start = fitted(TrackerSettings(), spec.tracker).model_dump()  # what the model runs with
    current = dict(start)
    before = scorer.score(current)
    best = before
    search = dict(SEARCH) | _thresholds(frames, spec.output.score_threshold)
    for _ in range(PASSES):
        for key, values in search.items():
            for value in values:
                if value == current[key]:
                    continue
                figures = scorer.score(current | {key: value})
                if (figures["HOTA"], figures["IDF1"]) > (best["HOTA"], best["IDF1"]):
                    best, current = figures, current | {key: value}
                    if on_step is not None:
                        on_step(f"{key} = {value}: HOTA {best['HOTA']:.1f}, IDF1 "
                                f"{best['IDF1']:.1f}")
    changed = {k: v for k, v in current.items() if v != start[k]}
    return {"video": str(video), "truth": str(truth), "detect_every": detect_every,
            "before": before, "after": best,
            "settings": current, "changed": changed, "evaluations": scorer.evaluations}


def _record(model_path: Path, spec: ModelSpec, video: Path, out: Path,
            detect_every: int) -> list[RecordedFrame]:
    """The model's boxes on the frames of ``video`` it sees (one pipeline run, in ``out``)."""
    options = PipelineOptions(analytics=AnalyticsConfig(track=TrackerSettings(),
                                                        detect_every=detect_every))
    run_files([video], model_path, spec, out, options)
    (frames,) = recorded_streams(out / "detections.jsonl").values()
    return frames


def _thresholds(frames: list[RecordedFrame], card: float) -> dict[str, tuple[float, ...]]:
    """Activation and high thresholds to try: the card's, and the first quartile and the
    median of the model's scores on the clip (at or above the card's: lower boxes were never
    reported)."""
    scores = np.concatenate([f.detections.score for f in frames]) if frames else np.zeros(0)
    points = {round(card, 3)} | {round(float(q), 3) for q in np.percentile(scores, (25, 50))
                                 if len(scores)}
    values = tuple(sorted(v for v in points if v >= card))
    return {"activation": values, "high": values}


def _truth_counts(truth: Path) -> dict[str, Any] | None:
    counts = truth.with_name(truth.name.replace(".mot.txt", ".counts.json"))
    if not counts.is_file() or counts == truth:
        return None
    try:
        found = json.loads(counts.read_text())
    except ValueError as e:
        raise ConfigError(f"{counts}: not JSON ({e})") from None
    if not isinstance(found, dict) or not {"lines", "lines_at"} <= found.keys():
        raise ConfigError(f"{counts}: not the counting set's truth counts (lines, lines_at)")
    return found


class _Scorer:
    """HOTA and IDF1 (and the count error, with truth counts) of one tracker setting."""

    def __init__(self, frames: list[RecordedFrame], spec: ModelSpec, truth: Path,
                 counts: dict[str, Any] | None) -> None:
        self.frames, self.spec, self.counts = frames, spec, counts
        self.truth_rows = truth.read_text()
        self.fps = stream_fps(frames)
        self.lines = [] if counts is None else \
            [LineConfig(name=n, points=tuple(p)) for n, p in counts["lines_at"].items()]
        self.evaluations = 0

    def score(self, settings: dict[str, Any]) -> dict[str, Any]:
        self.evaluations += 1
        config = AnalyticsConfig(track=TrackerSettings.model_validate(settings),
                                 lines=self.lines)
        rows: list[str] = []
        replayed = replay(self.frames, "clip", config, self.spec, self.fps, mot=rows)
        result = evaluate_rows({"clip": self.truth_rows}, {"clip": "".join(rows)})
        figures: dict[str, Any] = {k: v for k, v in mot_figures(result.aggregate).items()
                                   if k in ("HOTA", "IDF1", "IDSW")}
        if self.counts is not None:
            error = count_error({"clip": replayed.counts["lines"]}, {"clip": self.counts})
            figures["count_errors"] = f"{error['errors']}/{error['crossings']}"
        return figures


def write_card(card: Path, settings: dict[str, Any], note: str) -> None:
    """The card's ``tracker:`` block replaced by ``settings`` (the rest of the file as it
    was, comments included)."""
    kept, skipping = [], False
    for line in card.read_text().splitlines():
        if line.startswith("tracker:"):
            skipping = True
            continue
        if skipping and (line.startswith((" ", "\t")) or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    block = yaml.safe_dump({"tracker": settings}, default_flow_style=False, sort_keys=False)
    header, _, body = block.partition("\n")
    text = "\n".join([*kept, f"{header}  # {note}"]) + "\n" + body
    partial = card.with_name(card.name + ".partial")
    partial.write_text(text)
    partial.replace(card)  # whole or not at all
