"""``vidpipe model``: train the shapes detector, make labelled clips, score models on them,
and make them fast (prune, quantize, build TensorRT engines), and check what the pipeline
feeds a model.

    vidpipe model train --out build/shapes               train, export, score on held-out clips
    vidpipe model clips --out build/clips --seed 1000    make labelled clips (H.264 + boxes)
    vidpipe model evaluate shapes-yolo --video c.mp4     mAP@0.5 and @0.5:0.95 via the pipeline
    vidpipe model prune build/shapes --ratio 0.5         L1 channel pruning + fine-tuning
    vidpipe model quantize build/shapes --calib c.mp4    INT8 QDQ, best calibration method kept
    vidpipe model optimize build/shapes --calib c.mp4    all of it, one table, a loss gate
    vidpipe model build-engine build/shapes --precision int8    TensorRT engine, cached
    vidpipe model check ssdlite-person --video c.mp4    pipeline input and boxes vs reference
    vidpipe model tune-tracker shapes-yolo --video c.mp4    the tracker's settings, to the card
    vidpipe model train-classifier --out build/pattern   the classifier run on tracked shapes

Each command lives in a module of this package, imported when the command is asked for
(they load torch and the training code). Bad input exits 2 with one line, like ``run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from app.cli.console import fail
from app.cli.lazy import LazyGroup


class ModelCommands(LazyGroup):
    lazy = {
        "train": "app.cli.model.train:train",
        "clips": "app.cli.model.train:clips",
        "evaluate": "app.cli.model.evaluate:evaluate",
        "prune": "app.cli.model.speed:prune",
        "quantize": "app.cli.model.speed:quantize",
        "optimize": "app.cli.model.speed:optimize",
        "check": "app.cli.model.check:check",
        "build-engine": "app.cli.model.engine:build_engine",
        "tune-tracker": "app.cli.model.tune:tune_tracker",
        "train-classifier": "app.cli.model.classifier:train_classifier",
    }


model = typer.Typer(
    name="model", cls=ModelCommands, no_args_is_help=True, add_completion=False,
    rich_markup_mode=None,
    help="Train the shapes detector (and the classifier run on its tracked objects), make "
    "labelled clips, score models on them, and make them fast: prune, quantize to INT8, "
    "build TensorRT engines.",
)


def resolve_checked(model_name: str) -> tuple[Path, Any]:
    """The model's ONNX file and card, the file read as ONNX; one line and exit 2 if not."""
    from models.zoo import read_graph, resolve_model
    from pipelines.errors import VidpipeError

    try:
        model_path, spec = resolve_model(model_name)
        read_graph(model_path)
    except VidpipeError as e:
        fail(str(e))
    return model_path, spec
