"""``vidpipe bench --counting``: how far vidpipe's line counts are from the truth on the
counting set (``models/counting_data.py``: objects that bounce, stop on the line, cross in
groups, pass behind bars, at speeds up to 3 sizes a frame), per detector quality, split and
detection interval; and what each counting rule changes, replayed on the boxes the same runs
recorded (``pipelines/analytics/replay.py``), so every rule is judged on the same detections.

Qualities: the shipped FP32 shapes model, its pruned INT8, a weak detector — the FP32 model
on the same clips under strong noise and defocus — and a perfect one, the truth's boxes
(``app/bench/perfect.py``): what is left to the tracker and the counter. Each run's boxes are
also counted with the truth's identities in place of the tracker's (``app/bench/true_ids.py``):
what is left to the detector and the counter. The count error of a set is the sum over
clips, lines and directions of |found - truth|, over the true crossings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.bench.occluded import occluded_tracking
from app.bench.perfect import replayed_run, write_truth_run
from app.bench.true_ids import true_id_error
from app.recipes.track_eval import score_tracking
from app.run.sources import stream_ids
from models.counting_data import (
    HELD_OUT_SEEDS,
    LINES,
    TUNE_SEEDS,
    ZONE,
    counting_set,
    counts_path,
)
from models.counting_truth import count_error
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings, ZoneConfig
from pipelines.analytics.replay import recorded_streams, replay, stream_fps
from pipelines.options import PipelineOptions

CLIPS_DIR = Path("build/counting")
FP32 = "models/zoo/shapes-yolo/model.onnx"
INT8 = "models/zoo/shapes-yolo/model.pruned50.int8.onnx"
PERFECT = "perfect"  # no model: the truth's boxes, FP32's card (its classes) to name them
QUALITIES = {"fp32": (FP32, False), "int8": (INT8, False), "weak": (FP32, True),
             PERFECT: (FP32, False)}
SPLITS = {"tune": TUNE_SEEDS, "held-out": HELD_OUT_SEEDS}

Rule = Callable[[AnalyticsConfig], AnalyticsConfig]


def _lines(**update: Any) -> Rule:
    return lambda a: a.model_copy(update={"lines": [x.model_copy(update=update)
                                                    for x in a.lines]})


def _track(**update: Any) -> Rule:
    return lambda a: a.model_copy(update={"track": a.track.model_copy(update=update)
                                          if a.track is not None else None})


# The rules measured: each against the defaults, on the same recorded boxes.
RULES: dict[str, Rule] = {
    "defaults": lambda a: a,
    "jitter_band 0, relink_frames 0 (before)": _lines(jitter_band=0.0, relink_frames=0),
    "jitter_band 0": _lines(jitter_band=0.0),
    "relink_frames 0": _lines(relink_frames=0),
    "stitch_frames 0": _track(stitch_frames=0),
    "stitch_frames 0, relink_frames 0": lambda a: _track(stitch_frames=0)(
        _lines(relink_frames=0)(a)),
    "bytetrack, no fast objects (before)": _track(kind="bytetrack", fast_objects=False),
    "no fast objects": _track(fast_objects=False),
    "duplicate_iou 0": _track(duplicate_iou=0.0),
    "confirm 2 detections (before)": lambda a: _track(confirm_frames=2 * a.detect_every)(a),
    "confirm_frames 2": _track(confirm_frames=2),
    "confirm_frames 4": _track(confirm_frames=4),
    "lost_frames 60": _track(lost_frames=60),
    "hysteresis 0.3": _lines(hysteresis=0.3),
    "smoothing 0.5": _lines(smoothing=0.5),
    "settle_frames 3": _lines(settle_frames=3),
    "max_jump 0.8": _lines(max_jump=0.8),
    "once_per_track": _lines(once_per_track=True),
}


def analytics(every: int = 1) -> AnalyticsConfig:
    """The set's lines and zone, the default tracker, the model on one frame in ``every``."""
    return AnalyticsConfig(
        track=TrackerSettings(),
        lines=[LineConfig(name=name, points=points) for name, points in LINES],
        zones=[ZoneConfig(name=ZONE[0], polygon=list(ZONE[1]))], detect_every=every)


def clips_of(split: str, noisy: bool, folder: Path = CLIPS_DIR) -> list[Path]:
    return counting_set(folder, SPLITS[split], noisy=noisy)


def truths(clips: list[Path]) -> dict[str, dict[str, Any]]:
    return {sid: json.loads(counts_path(c).read_text())
            for sid, c in zip(stream_ids(clips), clips, strict=True)}


def record(quality: str, split: str, every: int, out: Path) -> dict[str, Any]:
    """One pipeline run over a split's clips with the quality's model (the perfect one's: its
    truth boxes written as a run and replayed): its tracking scores and count error; its boxes
    kept in ``out`` for the rules' replays."""
    model, noisy = QUALITIES[quality]
    path, spec = resolve_model(model)
    clips = clips_of(split, noisy)
    fps = None
    if quality == PERFECT:
        counts, scores = replayed_run(write_truth_run(clips, every, out), clips,
                                      analytics(every), spec)
    else:
        run = score_tracking(path, spec, clips, out, PipelineOptions(analytics=analytics(every)))
        summary = json.loads((out / "summary.json").read_text())
        counts = {sid: s["analytics"] for sid, s in summary["streams"].items()}
        scores, fps = run.overall, round(run.frames / run.wall_s, 1)
    truth = truths(clips)
    zone_errors = sum(abs(counts[sid]["zones"][ZONE[0]][k] - t[k])
                      for sid, c in truth.items() for k in ("entered", "exited")
                      for t in [c["zones"][ZONE[0]]])
    found = {sid: c["lines"] for sid, c in counts.items()}
    return {"quality": quality, "split": split, "detect_every": every,
            "HOTA": scores["HOTA"], "IDF1": scores["IDF1"], "IDSW": scores["IDSW"],
            "fps": fps, "zone_errors": zone_errors, **count_error(found, truth),
            "true_ids": true_id_error(out, truth, analytics(every), spec), "run": str(out)}


def replayed_error(run: Path, quality: str, split: str, rule: Rule,
                   every: int = 1) -> dict[str, Any]:
    """The count error of a recorded run's boxes replayed under ``rule``'s analytics."""
    model, noisy = QUALITIES[quality]
    _, spec = resolve_model(model)
    config = rule(analytics(every))
    found = {}
    for sid, frames in recorded_streams(run / "detections.jsonl").items():
        found[sid] = replay(frames, sid, config, spec, stream_fps(frames)).counts["lines"]
    return count_error(found, truths(clips_of(split, noisy)))


def bench_counting(console: Console, everys: list[int], out: Path,
                   rules: dict[str, Rule] | None = None) -> dict[str, Any]:
    """Every quality, split and N recorded once; then each rule replayed on every record."""
    rows = []
    for quality in QUALITIES:
        for split in SPLITS:
            for every in everys:
                console.print(f"{quality}, {split}, detect every {every}", highlight=False)
                rows.append(record(quality, split, every,
                                   out / "runs" / f"{quality}-{split}-{every}"))
    report: dict[str, Any] = {"rows": rows, "rules": {}}
    for name, rule in (rules or {}).items():
        report["rules"][name] = [
            {"quality": r["quality"], "split": r["split"], "detect_every": r["detect_every"],
             **replayed_error(Path(r["run"]), r["quality"], r["split"], rule,
                              r["detect_every"])} for r in rows]
    report["occluded_tracking"] = occluded_tracking(out)
    console.print(_table(rows))
    if report["rules"]:
        console.print(_rules_table(report["rules"]))
    console.print(_occluded_table(report["occluded_tracking"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return report


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Counting on the counting set (count error: sum |found - truth| over "
                        "the true crossings)")
    for column in ("detector", "split", "N", "count error", "errors", "with true ids",
                   "zone errors", "HOTA", "IDF1", "ID switches"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["quality"], r["split"], str(r["detect_every"]), f"{r['error']:.1%}",
                      f"{r['errors']}/{r['crossings']}",
                      f"{r['true_ids']['errors']} ({r['true_ids']['error']:.1%})",
                      str(r["zone_errors"]), f"{r['HOTA']:.1f}", f"{r['IDF1']:.1f}",
                      str(r["IDSW"]))
    return table


def _rules_table(rules: dict[str, list[dict[str, Any]]]) -> Table:
    """Per rule, errors over the true crossings of every N, per detector and split."""
    table = Table(title="Counting rules replayed on the same boxes (errors over all N)")
    keys = sorted({(r["quality"], r["split"]) for rows in rules.values() for r in rows},
                  key=lambda k: (list(QUALITIES).index(k[0]), list(SPLITS).index(k[1])))
    table.add_column("rule")
    for quality, split in keys:
        table.add_column(f"{quality} {split}", justify="right")
    for name, rows in rules.items():
        cells = []
        for key in keys:
            chosen = [r for r in rows if (r["quality"], r["split"]) == key]
            errors = sum(r["errors"] for r in chosen)
            crossings = sum(r["crossings"] for r in chosen)
            cells.append(f"{errors}/{crossings} ({errors / crossings:.1%})" if crossings else "-")
        table.add_row(name, *cells)
    return table


def _occluded_table(scores: dict[str, Any]) -> Table:
    table = Table(title="The occluded tracking clips, replayed per tracker (HOTA / IDF1 / "
                        "ID switches)")
    for column in ("model, N, tracker", "both clips", "occluded-0", "occluded-1"):
        table.add_column(column, justify="right")
    for name, s in scores.items():
        cells = [s["overall"], *(s["per_clip"][c] for c in ("occluded-0", "occluded-1"))]
        table.add_row(name, *(f"{c['HOTA']:.1f} / {c['IDF1']:.1f} / {c['IDSW']}"
                              for c in cells))
    return table
