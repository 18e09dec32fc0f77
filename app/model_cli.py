"""``vidpipe model``: train the shapes detector, and score any model on labelled clips.

    vidpipe model train --out build/shapes               train, export, score on held-out clips
    vidpipe model clips --out build/clips --seed 1000    make labelled clips (H.264 + boxes)
    vidpipe model evaluate shapes-yolo --video c.mp4     mAP@0.5 and @0.5:0.95 via the pipeline

Mounted in ``app.cli`` with ``cli.add_typer(model, name="model")``. Bad input (a model that is
not ONNX, an unreadable video, labels that do not fit) exits 2 with one line, like ``run``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from app.model_eval import ClipScores, LabelsError, score_clips
from app.progress import RunProgress
from models.data import CLIP_SIZE, make_clip
from models.detector import ACTIVATIONS, count_parameters
from models.errors import ModelError
from models.evaluate import Accuracy
from models.train import StepReport, TrainConfig
from models.zoo import resolve_model
from pipelines.build import PipelineOptions
from pipelines.errors import VidpipeError

console = Console(stderr=True)
log = logging.getLogger("vidpipe")
model = typer.Typer(
    name="model", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="Train the shapes detector, make labelled clips, and score models on them.",
)
DEFAULTS = TrainConfig()


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


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
    activation: Annotated[str, typer.Option(
        "--activation", help=f"One of {', '.join(ACTIVATIONS)}.")] = DEFAULTS.activation,
    eval_clips: Annotated[int, typer.Option(
        "--eval-clips", help="Held-out clips to score the model on afterwards (0: none).")] = 4,
    eval_frames: Annotated[int, typer.Option("--eval-frames", help="Frames per held-out clip.")]
    = 150,
    eval_seed: Annotated[int | None, typer.Option(
        "--eval-seed", help="Seed of the held-out clips (default: seed + 1000).")] = None,
    name: Annotated[str, typer.Option("--name", help="Model name in the card.")]
    = "shapes-yolo",
) -> None:
    """Train ShapesYOLO on rendered scenes (CPU), export ONNX and its card, and score it on
    held-out clips of another seed through the real pipeline; the card records the figures."""
    from app.model_train import TrainRun  # torch training code only when training

    if activation not in ACTIVATIONS:
        _fail(f"--activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    try:
        config = TrainConfig(steps=steps, batch_size=batch_size, seed=seed, minutes=minutes,
                             activation=activation)  # type: ignore[arg-type]
    except ValueError as e:
        _fail(str(e))
    run = TrainRun(config, out, name, console)
    with _train_progress() as progress:
        task = progress.add_task("training", total=config.steps, loss=float("nan"))

        def show(report: StepReport) -> None:
            progress.update(task, completed=report.step, loss=report.loss)

        result = run.train(show)
    console.print(f"trained {result.steps_done} steps in {result.wall_s / 60:.1f} min "
                  f"(CPU {result.cpu_s / 60:.1f} min; {count_parameters(result.model):,} "
                  f"parameters)"
                  + (" [yellow]stopped early by --minutes[/yellow]" if result.stopped_early
                     else ""))
    scores = None
    if eval_clips > 0:
        clips = run.make_heldout(eval_clips, eval_frames,
                                 seed + 1000 if eval_seed is None else eval_seed)
        try:
            with RunProgress(console, "held-out clips") as frames:
                scores = run.evaluate(clips, frames.update)
        except (VidpipeError, ModelError, LabelsError) as e:
            _fail(str(e))
        if scores is not None:
            print_scores(scores)
    for path in run.finish(result, scores):
        console.print(f"wrote {path}")


def _train_progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)


@model.command()
def clips(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the clips.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed; training uses 0.")] = 1000,
    count: Annotated[int, typer.Option("--count", help="How many clips.")] = 4,
    frames: Annotated[int, typer.Option("--frames", help="Frames per clip.")] = 150,
    size: Annotated[str, typer.Option("--size", help="WxH, even.")]
    = f"{CLIP_SIZE[0]}x{CLIP_SIZE[1]}",
) -> None:
    """Make labelled clips of moving shapes: clip-K.mp4 (H.264) and clip-K.boxes.json."""
    try:
        width, height = (int(v) for v in size.lower().split("x"))
        out.mkdir(parents=True, exist_ok=True)
        for k in range(count):
            path = make_clip(out / f"clip-{k}.mp4", seed=seed, clip=k, frames=frames,
                             size=(width, height))
            console.print(f"wrote {path}")
    except (ValueError, OSError) as e:
        _fail(f"cannot make clips: {e}")


@model.command()
def evaluate(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx with a card beside it.")],
    video: Annotated[list[Path], typer.Option(
        "--video", help="Labelled clip; repeat for several (run together, scored together).")],
    labels: Annotated[list[Path] | None, typer.Option(
        "--labels", help="Boxes file per --video (default: CLIP.boxes.json beside it).")]
    = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the run's outputs and "
                                      "accuracy.json.")] = Path("out/evaluate"),
    batch_size: Annotated[int, typer.Option("--batch-size", "-b")] = 4,
) -> None:
    """Run MODEL over labelled clips through the pipeline; print mAP@0.5 and mAP@0.5:0.95."""
    logging.basicConfig(level="WARNING", format="%(message)s", force=True)
    try:
        model_path, spec = resolve_model(model_name)
        with RunProgress(console) as progress:
            scores = score_clips(model_path, spec, video, labels, out,
                                 options=PipelineOptions(batch_size=batch_size),
                                 on_progress=progress.update)
    except (VidpipeError, ModelError, LabelsError) as e:
        _fail(str(e))
    print_scores(scores)
    path = out / "accuracy.json"
    path.write_text(json.dumps({"model": spec.name, **scores.as_dict()}, indent=2) + "\n")
    console.print(f"wrote {path}")


def print_scores(scores: ClipScores) -> None:
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
