"""What the ``vidpipe model`` commands share: the console, one-line failures, progress bars
for training and pruning, and the accuracy table."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

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

from app.model_eval import ClipScores
from models.evaluate import Accuracy
from models.zoo import read_graph, resolve_model
from pipelines.errors import VidpipeError

console = Console(stderr=True)
log = logging.getLogger("vidpipe")


def fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def resolve_checked(model_name: str) -> tuple[Path, Any]:
    try:
        model_path, spec = resolve_model(model_name)
        read_graph(model_path)
    except VidpipeError as e:
        fail(str(e))
    return model_path, spec


def render_then_steps(progress: Progress, title: str, steps: int,
                       ) -> tuple[Callable[[int, int], None], Callable[[int, float], None]]:
    """Two bars: scenes rendered, then ``steps`` optimiser steps (started once rendering is
    done, so its ETA counts steps only); returns the callbacks that move them."""
    scenes = progress.add_task("rendering scenes", total=None, loss="")  # no loss to show
    task = progress.add_task(title, total=steps, loss="loss -", start=False)

    def rendered(done: int, total: int) -> None:
        progress.update(scenes, completed=done, total=total)
        if done == total:
            progress.start_task(task)

    def step(done: int, loss: float) -> None:
        progress.update(task, completed=done, loss=f"loss {loss:.3f}")

    return rendered, step


def train_progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[loss]}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)


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


def print_variants(rows: list[Any], kind: str, max_loss: float) -> None:
    table = Table(title=f"Variants ({kind}; ONNX Runtime on this CPU, batch 1)")
    for column in ("variant", "params", "GFLOPs", "ms 1T", "ms 2T", "speed-up", "mAP@0.5",
                   "mAP@.5:.95", "loss pts", "verdict"):
        table.add_column(column, justify="left" if column in ("variant", "verdict") else "right")
    for r in rows:
        table.add_row(r.label, f"{r.parameters:,}", f"{r.gflops:.3f}", f"{r.latency_ms:.2f}",
                      f"{r.latency_2t_ms:.2f}", f"{r.speedup:.2f}x",
                      f"{r.accuracy.map50:.4f}", f"{r.accuracy.map50_95:.4f}",
                      f"{r.loss_points:+.2f}",
                      "[red]refused[/red]" if r.refused else
                      ("baseline" if r.label == "fp32" else f"kept (<= {max_loss:g})"))
    console.print(table)
