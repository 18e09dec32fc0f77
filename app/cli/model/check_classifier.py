"""``vidpipe model check CLASSIFIER``: the pipeline's crops and answers against the
classifier run directly on the same crops (``app.recipes.check_classifier``), as a table;
``--json`` prints the figures as its last line. Exits 1 below ``--min-agreement``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from app.cli.console import console, styled
from app.cli.progress import RunProgress
from app.recipes.check_classifier import CONFIDENCE_MATCH, check_classifier
from models.classifier_zoo import resolve_classifier
from models.zoo import resolve_model
from pipelines.options import PipelineOptions


def run_check(model: str, video: Path, frames: int, output_format: str | None,
              classes: Path | None, detector: str, options: PipelineOptions, *,
              as_json: bool, min_agreement: float) -> None:
    """Check the classifier ``model`` on ``video``'s boxes found by ``detector``."""
    path, spec = resolve_classifier(model, output_format=output_format, classes=classes)
    model_arg = model if output_format is None else str(path)
    if output_format is not None:
        model_arg = f"{path};format={output_format}" + (f";classes={classes}" if classes
                                                        else "")
    detector_path, detector_spec = resolve_model(detector)
    with RunProgress(console, "frames checked") as progress:
        report = check_classifier(path, spec, model_arg, video,
                                  (detector_path, detector_spec), options, frames=frames,
                                  on_progress=progress.update)
    table = Table(title=f"{report['file']} ({report['classifier']}) on boxes of "
                        f"{report['detector']} in {video.name}: pipeline against the "
                        f"model run directly")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("crops classified", str(report["crops"]))
    table.add_row(f"agreement (every head's label, confidence ± {CONFIDENCE_MATCH})",
                  str(report["agreement"]))
    table.add_row("crop input difference, max (grey levels)", f"{report['max_input_diff']:g}")
    table.add_row("confidence difference, max", f"{report['max_confidence_diff']:g}")
    table.add_row("answers (reference)", ", ".join(f"{k}: {v}"
                                                   for k, v in report["labels"].items()))
    console.print(table)
    if as_json:
        print(json.dumps(report))
    agreement = report["agreement"]
    if agreement is None or agreement < min_agreement:
        console.print(styled(("check failed:", "red"), f" agreement {agreement} is under "
                             f"{min_agreement:g}" if agreement is not None else
                             " no crop was classified (no tracked object in the frames)"),
                      highlight=False)
        raise typer.Exit(1)
