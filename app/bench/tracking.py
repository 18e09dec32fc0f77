"""``vidpipe bench --tracking``: what tracking and ``--detect-every N`` cost and buy, side by
side in one run, on held-out tracking clips (lanes of shapes, with and without occlusion).

Per model and N, interleaved over repetitions: fps (frames over wall time, the pipeline with
ByteTrack writing its outputs), HOTA / IDF1 against the clips' MOT truth, mAP@0.5 of the boxes
of every frame (the predicted ones too) against their labels, and the analytics stage's share
of the pipeline's work. Then the tracker alone on 50 boxes a frame, and the seed's combined
recipe: the hand-written loop with the FP32 model against vidpipe with the pruned INT8 model,
tracking and the best N.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from app.bench.handloop import measure_hand_loop
from app.recipes.evaluate import read_detections, read_truth
from app.recipes.track_eval import score_tracking
from app.run.sources import stream_ids
from models.data import boxes_path
from models.evaluate import mean_average_precision
from models.tracking_data import make_tracking_clip
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings
from pipelines.analytics.tracking import StreamTracker
from pipelines.frame import Detections
from pipelines.options import PipelineOptions

CLIPS_DIR = Path("build/tracking")
MODELS = ("models/zoo/shapes-yolo/model.onnx", "models/zoo/shapes-yolo/model.pruned50.int8.onnx")
MIDDLE = LineConfig(name="middle", points=(320, 0, 320, 384))


def tracking_clips(folder: Path = CLIPS_DIR, frames: int = 300) -> list[Path]:
    """Two clips without occlusion and two with, made once (held out: seed 2000)."""
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for occluded in (False, True):
        for k in range(2):
            path = folder / f"{'occluded' if occluded else 'clear'}-{k}.mp4"
            if not path.is_file() or not path.with_suffix(".mot.txt").is_file():
                make_tracking_clip(path, clip=k, frames=frames, occluded=occluded)
            clips.append(path)
    return clips


def tracker_cost(boxes: int = 50, frames: int = 300) -> float:
    """Median ms per frame of ByteTrack on ``boxes`` boxes moving a few pixels a frame."""
    rng = np.random.default_rng(0)
    start = rng.uniform(0, 1800, (boxes, 2))
    speed = rng.uniform(-4, 4, (boxes, 2))
    tracker = StreamTracker(TrackerSettings(), 0.25, 30.0)
    times = []
    for k in range(frames):
        xy = start + speed * k
        xyxy = np.concatenate([xy, xy + 40], axis=1).astype(np.float32)
        detections = Detections(xyxy, rng.uniform(0.3, 1.0, boxes), np.zeros(boxes, int))
        began = time.perf_counter()
        tracker.update(detections, k / 30)
        times.append(time.perf_counter() - began)
    return float(np.median(times) * 1000)


def _map50(detections: Path, clips: list[Path], spec: Any) -> float:
    found = read_detections(detections)
    truths, predictions = [], []
    for clip, sid in zip(clips, stream_ids(clips), strict=True):
        truth = read_truth(boxes_path(clip), spec)
        frames = found.get(sid, {})
        truths += truth
        predictions += [frames.get(i, np.zeros((0, 6), np.float32)) for i in range(len(truth))]
    return float(mean_average_precision(truths, predictions, spec.classes).map50)


def _share(summary: dict[str, Any], stage: str) -> float:
    """A stage's share of all stages' work time over the run."""
    work = {s["stage"]: s["busy"] * s["threads"] for s in summary["stages"]}
    total = sum(work.values())
    return work.get(stage, 0.0) / total if total else 0.0


def measure(model: str, every: int, clips: list[Path], out: Path) -> dict[str, Any]:
    path, spec = resolve_model(model)
    analytics = AnalyticsConfig(track=TrackerSettings(), detect_every=every, lines=[MIDDLE])
    scores = score_tracking(path, spec, clips, out, PipelineOptions(analytics=analytics))
    summary = json.loads((out / "summary.json").read_text())
    truth = {sid: c["truth"] for sid, c in scores.lines["middle"].items()}
    found = {sid: c["found"] for sid, c in scores.lines["middle"].items()}
    return {"model": path.name, "detect_every": every, "frames": scores.frames,
            "fps": scores.frames / scores.wall_s, "HOTA": scores.overall["HOTA"],
            "IDF1": scores.overall["IDF1"], "MOTA": scores.overall["MOTA"],
            "mAP50": _map50(out / "detections.jsonl", clips, spec),
            "analytics_share": _share(summary, "analytics"),
            "line_errors": sum(abs(found[s][d] - truth[s][d]) for s in truth
                               for d in ("in", "out")),
            "line_crossings": sum(truth[s][d] for s in truth for d in ("in", "out")),
            "per_clip": {sid: figures | {"line": {"found": found[sid], "truth": truth[sid]}}
                         for sid, figures in scores.per_clip.items()}}


def _median_rows(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(runs[0])
    row["fps"] = float(np.median([r["fps"] for r in runs]))
    row["fps_runs"] = [round(r["fps"], 1) for r in runs]
    return row


def bench_tracking(console: Console, everys: list[int], reps: int, out: Path,
                   models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    clips = tracking_clips()
    rows, hand = _interleaved(console, models, everys, clips, reps)
    report = _compared(rows, hand, models) | {"clips": [str(c) for c in clips], "reps": reps,
                                               "tracker_ms_at_50_boxes": tracker_cost()}
    console.print(_table(report))
    c = report["combined"]
    console.print(f"tracker alone: {report['tracker_ms_at_50_boxes']:.2f} ms a frame at 50 "
                  f"boxes; the hand-written loop (FP32, no tracking): "
                  f"{report['hand_loop_fp32']['fps']:.1f} fps; vidpipe {c['model']} + "
                  f"ByteTrack + detect every {c['detect_every']}: {c['fps']:.1f} fps = "
                  f"{c['ratio']:.2f}x, mAP@0.5 {c['mAP50_loss_points']:.2f} points below the "
                  "FP32 model's", highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return report


def _interleaved(console: Console, models: tuple[str, ...], everys: list[int],
                 clips: list[Path], reps: int) -> tuple[list[dict[str, Any]], list[float]]:
    """Every model at every N, and the hand-written FP32 loop, ``reps`` times in turn: the
    rows (medians) and the hand loop's fps of each rep."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    hand: list[float] = []
    fp32_path, fp32_spec = resolve_model(models[0])
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for model in models:
                for every in everys:
                    console.print(f"rep {rep + 1}/{reps}: {Path(model).name}, detect every "
                                  f"{every}", highlight=False)
                    runs.setdefault((model, every), []).append(
                        measure(model, every, clips, Path(tmp) / f"{rep}-{len(runs)}"))
            frames = seconds = 0.0
            for clip in clips:
                m = measure_hand_loop("fp32", clip, fp32_path, fp32_spec, threads=2)
                frames, seconds = frames + m.frames, seconds + m.wall_s
            hand.append(frames / seconds)
    return [_median_rows(r) for r in runs.values()], hand


def _compared(rows: list[dict[str, Any]], hand: list[float],
              models: tuple[str, ...]) -> dict[str, Any]:
    """Each row against its model at N = 1, and the combined recipe: the fastest N of the
    leanest model within 2 mAP points of the FP32 model (else its most accurate N), against
    the hand-written FP32 loop."""
    base = {row["model"]: row for row in rows if row["detect_every"] == 1}
    for row in rows:
        first = base[row["model"]]
        row["fps_ratio"] = row["fps"] / first["fps"]
        row["HOTA_loss"] = first["HOTA"] - row["HOTA"]
        row["mAP50_loss_points"] = 100 * (first["mAP50"] - row["mAP50"])
    hand_fps = float(np.median(hand))
    fp32_map = base[Path(models[0]).name]["mAP50"]
    lean = [r for r in rows if r["model"] == Path(models[-1]).name]
    within = [r for r in lean if 100 * (fp32_map - r["mAP50"]) <= 2.0]
    best = max(within, key=lambda r: r["fps"]) if within else \
        max(lean, key=lambda r: r["mAP50"])
    return {"rows": rows,
            "hand_loop_fp32": {"fps": hand_fps, "fps_runs": [round(f, 1) for f in hand],
                               "mAP50": fp32_map},
            "combined": {"model": best["model"], "detect_every": best["detect_every"],
                         "fps": best["fps"], "ratio": best["fps"] / hand_fps,
                         "mAP50_loss_points": 100 * (fp32_map - best["mAP50"]),
                         "HOTA": best["HOTA"]}}


def _table(report: dict[str, Any]) -> Table:
    table = Table(title="Tracking and --detect-every, side by side (medians)")
    for column in ("model", "N", "fps", "x N=1", "HOTA", "loss", "IDF1", "mAP@0.5",
                   "analytics share", "line errors"):
        table.add_column(column, justify="right")
    for r in report["rows"]:
        table.add_row(r["model"], str(r["detect_every"]), f"{r['fps']:.1f}",
                      f"{r['fps_ratio']:.2f}", f"{r['HOTA']:.1f}", f"{r['HOTA_loss']:+.1f}",
                      f"{r['IDF1']:.1f}", f"{r['mAP50']:.3f}", f"{r['analytics_share']:.1%}",
                      f"{r['line_errors']}/{r['line_crossings']}")
    return table
