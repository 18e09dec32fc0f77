"""``vidpipe model train-classifier``: the shapes' fill-pattern classifier trained on crops of
rendered scenes, exported as ONNX (FP32 and INT8) with its card, and scored on held-out
crops (``models.classifier_train``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.console import console, fail
from app.cli.progress import render_then_steps, train_progress
from models.classifier_train import PatternTrainConfig

DEFAULTS = PatternTrainConfig()


def train_classifier(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for model.onnx, "
                                      "model.int8.onnx and card.yaml.")],
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimiser steps.")]
    = DEFAULTS.steps,
    scenes: Annotated[int, typer.Option("--scenes", min=10, help="Scenes rendered (640x384) "
                                        "whose objects are cropped to train on.")]
    = DEFAULTS.scenes,
    seed: Annotated[int, typer.Option("--seed", help="Seed of weights and scenes (the "
                                      "held-out crops are always seed 5001).")]
    = DEFAULTS.seed,
    heldout: Annotated[int, typer.Option("--heldout-scenes", min=10, help="Held-out scenes "
                                         "to score on.")] = 400,
) -> None:
    """Train the fill-pattern classifier (solid, shaded, striped) that `vidpipe run
    --classify` runs on tracked shapes; write it with its INT8 variant and card, and print
    both variants' held-out accuracy (recorded in the card)."""
    from models.classifier_train import ship

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: not a folder")
    config = PatternTrainConfig(steps=steps, scenes=scenes, seed=seed)
    with train_progress(console) as progress:
        rendered, step = render_then_steps(progress, "training", steps)
        measured = ship(out, config, heldout_scenes=heldout, on_step=step, on_render=rendered)
    for label, figures in measured["heldout"].items():
        if isinstance(figures, dict):
            recall = ", ".join(f"{k} {v:.3f}" for k, v in figures["recall"].items())
            console.print(f"{label}: held-out accuracy {figures['accuracy']:.3f} on "
                          f"{figures['crops']} crops (recall: {recall})", highlight=False)
    for name in ("model.onnx", "model.int8.onnx", "card.yaml"):
        console.print(f"wrote {out / name}")
