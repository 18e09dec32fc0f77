"""``vidpipe model check``: the pipeline's model input and detections against the reference
path's (``app.recipes.check``), printed as a table; ``--json`` prints the figures as its last
line. Exits 1 when fewer frames agree than ``--min-agreement``, 2 on bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.console import console, fail, failing_cleanly, styled
from app.cli.model.check_classifier import run_check
from app.cli.options import DEFAULTS, BatchOpt, RuntimeOpt
from app.cli.progress import RunProgress
from app.recipes.check import DEFAULT_FRAMES, check_model
from models.classifier_zoo import names_classifier
from models.spec import DEFAULT_MODEL
from models.zoo import resolve_model
from pipelines.options import PipelineOptions
from pipelines.postprocess.agreement import MATCH_IOU, MATCH_SCORE


def check(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx (with a card beside "
        "it, or --format and --classes).")],
    video: Annotated[Path, typer.Option("--video", help="Clip to check on: your own footage "
                                        "is the best test.")],
    frames: Annotated[int, typer.Option("--frames", min=1, help="Frames to check, from the "
                                        "start.")] = DEFAULT_FRAMES,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as one JSON line "
                                          "(the last line of output).")] = False,
    output_format: Annotated[str | None, typer.Option(
        "--format", help="Output format of an ONNX without a card: yolov8, yolov5, ssd; a "
        "classifier's: imagenet, ultralytics-cls.")]
    = None,
    classes: Annotated[Path | None, typer.Option(
        "--classes", help="Class names file (one per line) for an ONNX without a card.")]
    = None,
    device: Annotated[str, typer.Option("--device", help="Where the pipeline runs: cpu or "
                                        "cuda[:N]; the reference always runs on the CPU.")]
    = "cpu",
    batch_size: BatchOpt = DEFAULTS.batch_size,
    runtime: RuntimeOpt = DEFAULTS.runtime,
    ffmpeg_resize: Annotated[bool, typer.Option(
        "--ffmpeg-resize", help="Check pictures shrunk in FFmpeg's scaler, as `vidpipe run "
        "--ffmpeg-resize` does.")] = False,
    min_agreement: Annotated[float, typer.Option(
        "--min-agreement", min=0.0, max=1.0, help="Exit 1 below this frame agreement.")]
    = 0.99,
    detector: Annotated[str, typer.Option(
        "--detector", help="For a classifier: the detector whose tracked boxes it is run "
        "on.")] = DEFAULT_MODEL,
) -> None:
    """Run MODEL directly on reference inputs (full-size decode, the card's resize filter,
    pad, normalisation) and through the pipeline with your options, on the same frames;
    report how far the pipeline's model input is from the reference's (grey levels, max and
    mean) and the fraction of frames whose detections agree (same count, IoU >= 0.9, score
    within 0.02). A variant (INT8, pruned) is also compared with its FP32 model.

    A classifier (its card says kind: classifier, or --format imagenet | ultralytics-cls)
    is checked on the crops of the boxes --detector finds and the default tracker follows:
    the pipeline's crops and answers against the model run directly on crops cut by the
    card plainly (the fraction of crops whose every label agrees)."""
    logging.basicConfig(level="WARNING", format="%(message)s", force=True)
    with failing_cleanly():
        options = PipelineOptions(device=device, batch_size=batch_size,
                                  ffmpeg_resize=ffmpeg_resize, runtime=runtime)
        if names_classifier(model_name, output_format):
            if not video.is_file():
                fail(f"--video {video}: no such file")
            run_check(model_name, video, frames, output_format, classes, detector, options,
                      as_json=as_json, min_agreement=min_agreement)
            return
        model_path, spec = resolve_model(model_name, output_format=output_format,
                                         classes=classes)
        if not video.is_file():
            fail(f"--video {video}: no such file")
        with RunProgress(console, "frames checked") as progress:
            report = check_model(model_path, spec, video, options, frames=frames,
                                 on_progress=progress.update)
    console.print(report_table(report))
    agreement = report["frame_agreement"]
    if as_json:
        print(json.dumps(report))
    if agreement is None or agreement < min_agreement:
        console.print(styled(("check failed:", "red"), f" frame agreement {agreement} is "
                             f"under {min_agreement:g}"), highlight=False)
        raise typer.Exit(1)


def report_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"{report['file']} ({report['model']}, {report['interpolation']}) on "
                        f"{Path(report['clip']).name}: pipeline against the reference path")
    table.add_column("figure")
    table.add_column("pipeline vs reference", justify="right")
    fp32 = report.get("fp32")
    if fp32 is not None:
        table.add_column(f"pipeline vs {fp32['file']} (FP32)", justify="right")

    def row(name: str, value: Any, fp32_value: Any = "") -> None:
        table.add_row(name, _cell(value), *([_cell(fp32_value)] if fp32 is not None else []))

    other = fp32 or {}
    if report.get("runtime"):
        row("pipeline's runtime", report["runtime"])
    row("frames", report["frames"], other.get("frames"))
    row(f"frame agreement (count, IoU >= {MATCH_IOU}, score ± {MATCH_SCORE})",
        report["frame_agreement"], other.get("frame_agreement"))
    row("boxes: reference / pipeline", f"{report['boxes_reference']} / "
        f"{report['boxes_pipeline']}",
        f"{other['boxes_reference']} / {other['boxes_pipeline']}" if fp32 else "")
    row("model input difference, max / mean (grey levels)",
        f"{report['max_input_diff']:g} / {report['mean_input_diff']:g}")
    row("paired boxes: lowest IoU", report["box_iou_min"], other.get("box_iou_min"))
    row("paired boxes: largest score difference", report["score_diff_max"],
        other.get("score_diff_max"))
    return table


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
