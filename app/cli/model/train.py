"""``vidpipe model train`` and ``vidpipe model clips``: the shapes detector trained, and
labelled clips to score models on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.console import console, fail, failing_cleanly, styled
from app.cli.model.evaluate import print_scores
from app.cli.progress import RunProgress, render_then_steps, train_progress
from models.data import CLIP_SIZE, make_clip
from models.detector import ACTIVATIONS, count_parameters
from models.tracking_data import TRACKING_SEED, make_tracking_clip
from models.train import TrainConfig

DEFAULTS = TrainConfig()


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
    from app.recipes.train import TrainRun

    run = TrainRun(config, out, name, console)
    with train_progress(console) as progress:
        rendered, step = render_then_steps(progress, "training", config.steps)
        result = run.train(lambda r: step(r.step, r.loss), rendered)
    console.print(styled(f"trained {result.steps_done} steps in {result.wall_s / 60:.1f} min "
                         f"(CPU {result.cpu_s / 60:.1f} min; "
                         f"{count_parameters(result.model):,} parameters)",
                         (" stopped early by --minutes" if result.stopped_early else "",
                          "yellow")))
    scores = None
    if eval_clips > 0:
        clips = run.make_heldout(eval_clips, eval_frames, eval_seed)
        with failing_cleanly(), RunProgress(console, "held-out clips") as frames:
            scores = run.evaluate(clips, frames.update)
        if scores is not None:
            print_scores(scores)
    for path in run.finish(result, scores):
        console.print(f"wrote {path}")


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
