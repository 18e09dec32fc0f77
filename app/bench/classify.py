"""``vidpipe bench --classify``: what a classifier on tracked objects buys and costs, in one
run.

- **Accuracy per track**, on the held-out tracking clips (build/tracking; their objects'
  fill patterns are the scenes' own): the pipeline (the detector, BoT-SORT, the classifier)
  writes its results; each track's answer is the majority of the answers its frames carry,
  its truth the pattern of the object it overlaps most (IoU >= 0.5 with the MOT truth, by
  majority over its frames). Per variant of the classifier (FP32, INT8).
- **Cost**, on a crowd clip of about 50 boxes a frame (``make_crowd_clip``): the pipeline's
  fps tracking only, tracking on full pictures (what a classifier needs: the decoder no
  longer shrinks them), and tracking with the classifier, interleaved over ``reps``; the
  classifier's model calls and crops per second and per track.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from app.bench.tracking import CLIPS_DIR, tracking_clips
from app.run.runner import run_files
from app.run.sources import stream_ids
from models.classifier_zoo import resolve_classifier
from models.data import CLIP_SIZE
from models.tracking_data import TRACKING_SEED, make_crowd_clip, scene_patterns
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.analytics.stage import AnalyticsStage
from pipelines.classify.config import ClassifierConfig
from pipelines.options import PipelineOptions

CLASSIFIER = "shapes-pattern"
DETECTOR = "shapes-yolo"
MATCH_IOU = 0.5


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def _mot_truth(clip: Path) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per frame (0-based): the scored truth boxes (x1, y1, x2, y2) and their object ids."""
    rows: dict[int, list[tuple[int, list[float]]]] = {}
    for line in clip.with_suffix(".mot.txt").read_text().splitlines():
        frame, oid, x, y, w, h, _, kind, _ = (float(v) for v in line.split(","))
        if int(kind) == 1:
            rows.setdefault(int(frame) - 1, []).append((int(oid), [x, y, x + w, y + h]))
    return {f: (np.asarray([b for _, b in r], np.float64), np.asarray([i for i, _ in r]))
            for f, r in rows.items()}


def track_accuracy(detections: Path, clips: list[Path], head: str) -> dict[str, Any]:
    """Per track and per frame, the classifier's answers against the objects' patterns."""
    ids = dict(zip(stream_ids(clips), clips, strict=True))
    truths = {sid: _mot_truth(c) for sid, c in ids.items()}
    labels = ("solid", "shaded", "striped")
    answers: dict[tuple[str, int], list[str]] = {}
    objects: dict[tuple[str, int], Counter[int]] = {}
    for line in detections.read_text().splitlines():
        record = json.loads(line)
        sid = record["stream"]
        boxes, oids = truths[sid].get(record["frame"], (np.zeros((0, 4)), np.zeros(0)))
        for d in record["detections"]:
            said = (d.get("attributes") or {}).get(head)
            if d.get("track_id") is None or said is None:
                continue
            key = (sid, d["track_id"])
            answers.setdefault(key, []).append(said[0])
            if len(boxes):
                overlap = _iou(np.asarray(d["box"], np.float64), boxes)
                if overlap.max() >= MATCH_IOU:
                    objects.setdefault(key, Counter())[int(oids[overlap.argmax()])] += 1
    patterns = {sid: scene_patterns(TRACKING_SEED, int(c.stem.split("-")[1]), CLIP_SIZE,
                                    occluded=c.stem.startswith("occluded"))
                for sid, c in ids.items()}
    by_part: dict[str, list[int]] = {"clear": [0, 0], "occluded": [0, 0]}
    frames = [0, 0]
    for key, said in answers.items():
        if key not in objects:
            continue
        truth = labels[patterns[key[0]][objects[key].most_common(1)[0][0] - 1]]
        part = by_part["occluded" if ids[key[0]].stem.startswith("occluded") else "clear"]
        part[0] += Counter(said).most_common(1)[0][0] == truth
        part[1] += 1
        frames[0] += sum(s == truth for s in said)
        frames[1] += len(said)
    right, tracks = sum(p[0] for p in by_part.values()), sum(p[1] for p in by_part.values())
    return {"tracks": tracks, "track_accuracy": right / tracks if tracks else None,
            **{f"{part}_tracks": p[1] for part, p in by_part.items()},
            **{f"{part}_accuracy": p[0] / p[1] if p[1] else None for part, p in by_part.items()},
            "frames": frames[1], "frame_accuracy": frames[0] / frames[1] if frames[1] else None}


def _run(clips: list[Path], out: Path, classifier: str | None,
         full: bool = False) -> dict[str, Any]:
    """One pipeline run (the detector, BoT-SORT, and ``classifier`` where given; ``full``:
    the decoder keeps full pictures without one); its fps and the classifier's calls."""
    path, spec = resolve_model(DETECTOR)
    analytics = AnalyticsConfig(track=TrackerSettings(), classifiers=[
        ClassifierConfig(model=classifier)] if classifier else [])
    options = PipelineOptions(analytics=analytics, decode_scaled=not full)
    _, pipeline, _ = run_files(clips, path, spec, out, options)
    summary = json.loads((out / "summary.json").read_text())
    frames = sum(s["received"] for s in summary["streams"].values())
    loaded = [c for stage in pipeline.stages if isinstance(stage, AnalyticsStage)
              and stage.classifiers is not None for c in stage.classifiers.loaded.values()]
    return {"fps": frames / summary["wall_s"], "wall_s": summary["wall_s"], "frames": frames,
            "calls": sum(c.calls for c in loaded), "crops": sum(c.crops for c in loaded)}


def bench_classify(console: Console, reps: int, out: Path) -> dict[str, Any]:
    clips = tracking_clips(CLIPS_DIR)
    variants = {"fp32": CLASSIFIER, "int8": str(resolve_classifier(CLASSIFIER)[0].parent /
                                                "model.int8.onnx")}
    head = resolve_classifier(CLASSIFIER)[1].heads[0].name
    report: dict[str, Any] = {"classifier": CLASSIFIER, "detector": DETECTOR,
                              "clips": [str(c) for c in clips], "accuracy": {}, "reps": reps}
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in variants.items():
            _run(clips, Path(tmp) / label, model)
            report["accuracy"][label] = track_accuracy(Path(tmp) / label / "detections.jsonl",
                                                       clips, head)
        crowd = Path(tmp) / "crowd.mp4"
        make_crowd_clip(crowd)
        runs: dict[str, list[dict[str, Any]]] = {"tracking": [], "full_pictures": [],
                                                 "classifier": []}
        for rep in range(reps):
            console.print(f"cost, rep {rep + 1}/{reps}", highlight=False)
            runs["tracking"].append(_run([crowd], Path(tmp) / f"t{rep}", None))
            runs["full_pictures"].append(_run([crowd], Path(tmp) / f"f{rep}", None, full=True))
            runs["classifier"].append(_run([crowd], Path(tmp) / f"c{rep}", CLASSIFIER))
            runs["classifier"][-1]["tracks"] = _tracks(Path(tmp) / f"c{rep}" /
                                                       "detections.jsonl")
    report["cost"] = _cost(runs)
    console.print(_table(report))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return report


def _tracks(detections: Path) -> int:
    return len({d["track_id"] for line in detections.read_text().splitlines()
                for d in json.loads(line)["detections"] if d.get("track_id") is not None})


def _cost(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    fps = {k: float(np.median([r["fps"] for r in v])) for k, v in runs.items()}
    last = runs["classifier"][-1]
    seconds = last["wall_s"]
    return {"fps": fps, "fps_runs": {k: [round(r["fps"], 1) for r in v]
                                     for k, v in runs.items()},
            "slower_with_classifier": 1 - fps["classifier"] / fps["tracking"],
            "slower_full_pictures": 1 - fps["full_pictures"] / fps["tracking"],
            "calls_per_s": last["calls"] / seconds, "crops_per_s": last["crops"] / seconds,
            "crops_per_track": last["crops"] / max(last["tracks"], 1),
            "tracks": last["tracks"], "frames": last["frames"]}


def _table(report: dict[str, Any]) -> Table:
    table = Table(title=f"{report['classifier']} on {report['detector']}'s tracks")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, a in report["accuracy"].items():
        table.add_row(f"{label}: per-track accuracy (clear / occluded, tracks)",
                      f"{a['track_accuracy']:.3f} ({a['clear_accuracy']:.3f} / "
                      f"{a['occluded_accuracy']:.3f}, {a['tracks']})")
        table.add_row(f"{label}: per-frame accuracy", f"{a['frame_accuracy']:.3f}")
    c = report["cost"]
    table.add_row("fps at ~50 boxes: tracking / full pictures / + classifier",
                  " / ".join(f"{c['fps'][k]:.1f}" for k in ("tracking", "full_pictures",
                                                             "classifier")))
    table.add_row("slower with the classifier (of which full pictures)",
                  f"{c['slower_with_classifier']:.1%} ({c['slower_full_pictures']:.1%})")
    table.add_row("classifier calls / crops a second; crops per track",
                  f"{c['calls_per_s']:.1f} / {c['crops_per_s']:.1f}; "
                  f"{c['crops_per_track']:.2f}")
    return table
