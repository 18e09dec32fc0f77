"""``vidpipe model``: train the shapes detector, and score any model on labelled clips.

    vidpipe model train --out build/shapes               train, export, score on held-out clips
    vidpipe model clips --out build/clips --seed 1000    make labelled clips (H.264 + boxes)
    vidpipe model evaluate shapes-yolo --video c.mp4     mAP@0.5 and @0.5:0.95 via the pipeline
    vidpipe model prune build/shapes --ratio 0.5         L1 channel pruning + fine-tuning
    vidpipe model prune build/shapes --ratio 0.7 --from 0.5    ... on from the 50% network
    vidpipe model quantize build/shapes --calib c.mp4    INT8 QDQ, best calibration method kept
    vidpipe model optimize build/shapes --calib c.mp4    all of it, one table, a loss gate
    vidpipe model build-engine build/shapes --precision int8    TensorRT engine, cached
    vidpipe model check ssdlite-person --video c.mp4    pipeline input and boxes vs reference

Mounted in ``app.cli`` with ``cli.add_typer(model, name="model")``; the commands that make a
model fast are in ``app.model_speed_cli`` and ``app.model_engine_cli``. Bad input (a model
that is not ONNX, an unreadable video, labels that do not fit) exits 2 with one line, like
``run``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from app.model_check_cli import check
from app.model_common import console, fail, print_scores, render_then_steps, train_progress
from app.model_engine_cli import build_engine
from app.model_eval import LabelsError, reference_truth, score_against, score_clips
from app.model_speed_cli import optimize, prune, quantize
from app.progress import RunProgress
from app.track_eval import METRICS, score_tracking
from models.data import CLIP_SIZE, boxes_path, make_clip
from models.detector import ACTIVATIONS, count_parameters
from models.tracking_data import TRACKING_SEED, make_tracking_clip
from models.train import TrainConfig
from models.zoo import resolve_model
from pipelines.analytics.config import from_flags
from pipelines.errors import VidpipeError
from pipelines.options import PipelineOptions

model = typer.Typer(
    name="model", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="Train the shapes detector, make labelled clips, score models on them, and make "
    "them fast: prune, quantize to INT8, build TensorRT engines.",
)
DEFAULTS = TrainConfig()


@model.command()
def train(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for model.pt, model.onnx, "
                                      "card.yaml, train_log.json and the held-out run.")],
    minutes: Annotated[float, typer.Option(
        "--minutes", help="Safety cap on training wall time; the step count sets the "
        "schedule, so a run cut short is marked as such.")] = DEFAULTS.minutes,
    seed: Annotated[int, typer.Option("--seed", help="Seed of weights and training data.")]
    = DEFAULTS.seed,
    steps: Annotated[int, typer.Option("--steps", help="Optimiser steps.")] = DEFAULTS.steps,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per step.")]
    = DEFAULTS.batch_size,
    scenes: Annotated[int, typer.Option(
        "--scenes", help="Scenes rendered up front (on every core) and drawn from, flipped, "
        "by every step.")] = DEFAULTS.scenes,
    activation: Annotated[str, typer.Option(
        "--activation", help=f"One of {', '.join(ACTIVATIONS)}.")] = DEFAULTS.activation,
    eval_clips: Annotated[int, typer.Option(
        "--eval-clips", help="Held-out clips to score the model on afterwards (0: none).")] = 8,
    eval_frames: Annotated[int, typer.Option("--eval-frames", help="Frames per held-out clip.")]
    = 75,
    eval_seed: Annotated[int | None, typer.Option(
        "--eval-seed", help="Seed of the held-out clips (default: seed + 1000).")] = None,
    name: Annotated[str, typer.Option("--name", help="Model name in the card.")]
    = "shapes-yolo",
) -> None:
    """Train ShapesYOLO on rendered scenes (CPU), export ONNX and its card, and score it on
    held-out clips of another seed through the real pipeline; the card records the figures."""
    if activation not in ACTIVATIONS:
        fail(f"--activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    try:
        config = TrainConfig(steps=steps, batch_size=batch_size, scenes=scenes, seed=seed,
                             minutes=minutes, activation=activation)  # type: ignore[arg-type]
    except ValueError as e:
        fail(str(e))
    _train_and_score(config, out, name, eval_clips, eval_frames,
                     seed + 1000 if eval_seed is None else eval_seed)


def _train_and_score(config: TrainConfig, out: Path, name: str, eval_clips: int,
                     eval_frames: int, eval_seed: int) -> None:
    from app.model_train import TrainRun  # torch training code only when training

    run = TrainRun(config, out, name, console)
    with train_progress() as progress:
        rendered, step = render_then_steps(progress, "training", config.steps)
        result = run.train(lambda r: step(r.step, r.loss), rendered)
    console.print(f"trained {result.steps_done} steps in {result.wall_s / 60:.1f} min "
                  f"(CPU {result.cpu_s / 60:.1f} min; {count_parameters(result.model):,} "
                  f"parameters)"
                  + (" [yellow]stopped early by --minutes[/yellow]" if result.stopped_early
                     else ""))
    scores = None
    if eval_clips > 0:
        clips = run.make_heldout(eval_clips, eval_frames, eval_seed)
        try:
            with RunProgress(console, "held-out clips") as frames:
                scores = run.evaluate(clips, frames.update)
        except VidpipeError as e:
            fail(str(e))
        if scores is not None:
            print_scores(scores)
    for path in run.finish(result, scores):
        console.print(f"wrote {path}")


@model.command()
def clips(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the clips.")],
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed; training uses 0 (default: 1000, 2000 with --tracking).")] = None,
    count: Annotated[int, typer.Option("--count", help="How many clips.")] = 4,
    frames: Annotated[int, typer.Option("--frames", help="Frames per clip.")] = 150,
    size: Annotated[str, typer.Option("--size", help="WxH, even.")]
    = f"{CLIP_SIZE[0]}x{CLIP_SIZE[1]}",
    tracking: Annotated[bool, typer.Option(
        "--tracking", help="Clips for scoring tracking: shapes moving along lanes, with "
        "their identities in clip-K.mot.txt (MOT truth). Seed default 2000.")] = False,
    occluded: Annotated[bool, typer.Option(
        "--occluded", help="With --tracking: lanes overlapping and bars sweeping in front, "
        "so objects pass behind others.")] = False,
) -> None:
    """Make labelled clips of moving shapes: clip-K.mp4 (H.264) and clip-K.boxes.json (and,
    with --tracking, clip-K.mot.txt)."""
    try:
        width, height = (int(v) for v in size.lower().split("x"))
        out.mkdir(parents=True, exist_ok=True)
        for k in range(count):
            if tracking:
                path = make_tracking_clip(out / f"clip-{k}.mp4",
                                          seed=TRACKING_SEED if seed is None else seed,
                                          clip=k, frames=frames, size=(width, height),
                                          occluded=occluded)
            else:
                path = make_clip(out / f"clip-{k}.mp4", seed=1000 if seed is None else seed,
                                 clip=k, frames=frames, size=(width, height))
            console.print(f"wrote {path}")
    except (ValueError, OSError) as e:
        fail(f"cannot make clips: {e}")


@model.command()
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
    batch_size: Annotated[int, typer.Option("--batch-size", "-b")] = 4,
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
    try:
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
    except VidpipeError as e:
        fail(str(e))
    print_scores(scores)
    path = out / "accuracy.json"
    path.write_text(json.dumps({"model": spec.name, "scored_against": "reference detections"
                                if agreement else "labels", **scores.as_dict()}, indent=2)
                    + "\n")
    console.print(f"wrote {path}")


def _evaluate_tracking(model_name: str, video: list[Path], out: Path, batch_size: int,
                       track: str | None, detect_every: int, lines: list[str]) -> None:
    try:
        analytics = from_flags(track, lines, [], detect_every)
        options = PipelineOptions(batch_size=batch_size, analytics=analytics)
        model_path, spec = resolve_model(model_name)
        with RunProgress(console) as progress:
            scores = score_tracking(model_path, spec, video, out, options,
                                    on_progress=progress.update)
    except VidpipeError as e:
        fail(str(e))
    kind = analytics.track.kind if analytics and analytics.track else "bytetrack"
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


for command in (prune, quantize, optimize, check):
    model.command()(command)
model.command("build-engine")(build_engine)
