"""``vidpipe model evaluate``: a model scored on clips through the pipeline (mAP against the
clips' labels, or agreement with a reference model's detections), or its tracking (HOTA,
MOTA, IDF1, line counts)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from app.cli.console import console, failing_cleanly
from app.cli.options import DEFAULTS, BatchOpt
from app.cli.progress import RunProgress
from app.recipes.evaluate import LabelsError, reference_truth, score_against, score_clips
from app.recipes.track_eval import METRICS, score_tracking
from models.data import boxes_path
from models.zoo import resolve_model
from pipelines.analytics.config import DEFAULT_TRACKER, from_flags
from pipelines.options import PipelineOptions

if TYPE_CHECKING:
    from app.recipes.evaluate import ClipScores
    from models.evaluate import Accuracy


def evaluate(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx with a card beside it.")],
    video: Annotated[list[Path], typer.Option(
        "--video", help="Labelled clip; repeat for several (run together, scored together).")],
    labels: Annotated[list[Path] | None, typer.Option(
        "--labels", help="Boxes file per --video (default: CLIP.boxes.json beside it).")]
    = None,
    reference: Annotated[str | None, typer.Option(
        "--reference", help="Without labels: the model whose detections (at its card's "
        "threshold) count as truth; default: the FP32 model of MODEL's card.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the run's outputs and "
                                      "accuracy.json.")] = Path("out/evaluate"),
    batch_size: BatchOpt = DEFAULTS.batch_size,
    track: Annotated[str | None, typer.Option(
        "--track", metavar="TRACKER", help="Score tracking instead: HOTA, MOTA, IDF1 of this "
        "tracker (bytetrack, botsort, ocsort, sort) against the clips' MOT truth "
        "(CLIP.mot.txt, `vidpipe model clips --tracking`); writes tracking.json.")] = None,
    detect_every: Annotated[int, typer.Option(
        "--detect-every", min=1, max=30, help="With --track: the detector on one frame in N, "
        "the tracker between.")] = 1,
    line: Annotated[list[str] | None, typer.Option(
        "--line", metavar="NAME=x1,y1,x2,y2", help="With --track: a counting line; its "
        "counts per direction against the true objects' (repeatable).")] = None,
) -> None:
    """Run MODEL over clips through the pipeline; print mAP@0.5 and mAP@0.5:0.95 against the
    clips' labels, or, for footage without labels, agreement mAP against a reference model's
    detections (what an INT8 or pruned variant costs on your own video). With --track, score
    tracking instead."""
    logging.basicConfig(level="WARNING", format="%(message)s", force=True)
    if track is not None or detect_every > 1 or line:
        _evaluate_tracking(model_name, video, out, batch_size, track, detect_every, line or [])
        return
    options = PipelineOptions(batch_size=batch_size)
    agreement = not labels and not all(boxes_path(v).is_file() for v in video)
    with failing_cleanly():
        model_path, spec = resolve_model(model_name)
        with RunProgress(console) as progress:
            if agreement:
                ref_path, ref_spec = (resolve_model(reference) if reference is not None
                                      else (model_path.parent / spec.file, spec))
                if list(ref_spec.classes) != list(spec.classes):
                    raise LabelsError(f"--reference {ref_spec.name} has classes "
                                      f"{ref_spec.classes}, {spec.name} has {spec.classes}")
                console.print(f"no labels beside the clips: scoring agreement with "
                              f"{ref_path.name}'s detections at score >= "
                              f"{ref_spec.output.score_threshold:g}", highlight=False)
                truths = reference_truth((ref_path, ref_spec), video, out / "reference",
                                         options=options, on_progress=progress.update)
                scores = score_against(model_path, spec, video, truths, out, options=options,
                                       on_progress=progress.update)
            else:
                scores = score_clips(model_path, spec, video, labels, out, options=options,
                                     on_progress=progress.update)
    print_scores(scores)
    path = out / "accuracy.json"
    path.write_text(json.dumps({"model": spec.name, "scored_against": "reference detections"
                                if agreement else "labels", **scores.as_dict()}, indent=2)
                    + "\n")
    console.print(f"wrote {path}")


def _evaluate_tracking(model_name: str, video: list[Path], out: Path, batch_size: int,
                       track: str | None, detect_every: int, lines: list[str]) -> None:
    with failing_cleanly():
        analytics = from_flags(track, lines, [], detect_every)
        options = PipelineOptions(batch_size=batch_size, analytics=analytics)
        model_path, spec = resolve_model(model_name)
        with RunProgress(console) as progress:
            scores = score_tracking(model_path, spec, video, out, options,
                                    on_progress=progress.update)
    kind = analytics.track.kind if analytics and analytics.track else DEFAULT_TRACKER
    console.print(f"{spec.name} + {kind}, detector on 1 frame in {detect_every}, "
                  f"{scores.frames} frames ({scores.predicted_frames} predicted), "
                  f"{scores.frames / scores.wall_s:.1f} fps", highlight=False)
    console.print("  clip      " + "".join(f"{m:>8}" for m in METRICS), highlight=False)
    for name, figures in [*scores.per_clip.items(), ("all", scores.overall)]:
        console.print(f"  {name:<10}" + "".join(f"{figures[m]:>8}" for m in METRICS),
                      highlight=False)
    for name, per_clip in scores.lines.items():
        for sid, counts in per_clip.items():
            console.print(f"  line {name} on {sid}: in {counts['found']['in']} (truth "
                          f"{counts['truth']['in']}), out {counts['found']['out']} (truth "
                          f"{counts['truth']['out']})", highlight=False)
    path = out / "tracking.json"
    path.write_text(json.dumps({"model": spec.name, "tracker": kind,
                                "detect_every": detect_every, **scores.as_dict()}, indent=2)
                    + "\n")
    console.print(f"wrote {path}")


def print_scores(scores: ClipScores) -> None:
    """The accuracy table: per clip and over all, then AP@0.5 per class."""
    table = Table(title="Accuracy (COCO, pycocotools)")
    for column in ("clip", "frames", "objects", "detections", "mAP@0.5", "mAP@0.5:0.95"):
        table.add_column(column, justify="left" if column == "clip" else "right")
    rows: list[tuple[str, Accuracy]] = [*scores.per_clip.items(), ("all", scores.overall)]
    for clip, acc in rows:
        table.add_row(clip, str(acc.frames), str(acc.objects), str(acc.detections),
                      f"{acc.map50:.3f}", f"{acc.map50_95:.3f}")
    console.print(table)
    per_class = ", ".join(f"{k} {v:.3f}" for k, v in scores.overall.ap50_per_class.items())
    console.print(f"AP@0.5 per class: {per_class}")
