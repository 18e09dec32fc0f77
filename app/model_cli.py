"""``vidpipe model``: train the shapes detector, and score any model on labelled clips.

    vidpipe model train --out build/shapes               train, export, score on held-out clips
    vidpipe model clips --out build/clips --seed 1000    make labelled clips (H.264 + boxes)
    vidpipe model evaluate shapes-yolo --video c.mp4     mAP@0.5 and @0.5:0.95 via the pipeline
    vidpipe model prune build/shapes --ratio 0.5         L1 channel pruning + fine-tuning
    vidpipe model prune build/shapes --ratio 0.7 --from 0.5    ... on from the 50% network
    vidpipe model quantize build/shapes --calib c.mp4    INT8 QDQ, best calibration method kept
    vidpipe model optimize build/shapes --calib c.mp4    all of it, one table, a loss gate
    vidpipe model build-engine build/shapes --precision int8    TensorRT engine, cached

Mounted in ``app.cli`` with ``cli.add_typer(model, name="model")``. Bad input (a model that is
not ONNX, an unreadable video, labels that do not fit) exits 2 with one line, like ``run``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import numpy as np
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

from app.model_eval import ClipScores, LabelsError, reference_truth, score_against, score_clips
from app.progress import RunProgress
from models.data import CLIP_SIZE, boxes_path, make_clip
from models.detector import ACTIVATIONS, count_parameters
from models.errors import ModelError
from models.evaluate import Accuracy
from models.prune import ratio_checked
from models.train import TrainConfig
from models.zoo import read_graph, resolve_model, variant_label
from pipelines.errors import VidpipeError
from pipelines.options import PipelineOptions

console = Console(stderr=True)
log = logging.getLogger("vidpipe")
model = typer.Typer(
    name="model", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="Train the shapes detector, make labelled clips, score models on them, and make "
    "them fast: prune, quantize to INT8, build TensorRT engines.",
)
DEFAULTS = TrainConfig()


def _fail(message: str) -> NoReturn:
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
        _fail(f"--activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    try:
        config = TrainConfig(steps=steps, batch_size=batch_size, scenes=scenes, seed=seed,
                             minutes=minutes, activation=activation)  # type: ignore[arg-type]
    except ValueError as e:
        _fail(str(e))
    _train_and_score(config, out, name, eval_clips, eval_frames,
                     seed + 1000 if eval_seed is None else eval_seed)


def _train_and_score(config: TrainConfig, out: Path, name: str, eval_clips: int,
                     eval_frames: int, eval_seed: int) -> None:
    from app.model_train import TrainRun  # torch training code only when training

    run = TrainRun(config, out, name, console)
    with _train_progress() as progress:
        rendered, step = _render_then_steps(progress, "training", config.steps)
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
        except (VidpipeError, ModelError, LabelsError) as e:
            _fail(str(e))
        if scores is not None:
            print_scores(scores)
    for path in run.finish(result, scores):
        console.print(f"wrote {path}")


def _render_then_steps(progress: Progress, title: str, steps: int,
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


def _train_progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[loss]}"), TimeElapsedColumn(),
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
    reference: Annotated[str | None, typer.Option(
        "--reference", help="Without labels: the model whose detections (at its card's "
        "threshold) count as truth; default: the FP32 model of MODEL's card.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the run's outputs and "
                                      "accuracy.json.")] = Path("out/evaluate"),
    batch_size: Annotated[int, typer.Option("--batch-size", "-b")] = 4,
) -> None:
    """Run MODEL over clips through the pipeline; print mAP@0.5 and mAP@0.5:0.95 against the
    clips' labels, or, for footage without labels, agreement mAP against a reference model's
    detections (what an INT8 or pruned variant costs on your own video)."""
    logging.basicConfig(level="WARNING", format="%(message)s", force=True)
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
    except (VidpipeError, ModelError, LabelsError) as e:
        _fail(str(e))
    print_scores(scores)
    path = out / "accuracy.json"
    path.write_text(json.dumps({"model": spec.name, "scored_against": "reference detections"
                                if agreement else "labels", **scores.as_dict()}, indent=2)
                    + "\n")
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


# -- prune, quantize, optimize, build-engine -------------------------------------------------

CalibVideo = Annotated[Path, typer.Option(
    "--calib", help="Video whose frames calibrate INT8 (the user's own footage).")]
ScoringClips = Annotated[list[Path] | None, typer.Option(
    "--video", help="Clip(s) every variant is scored on (labels beside them: mAP; none: "
    "agreement with FP32). Default: held-out clips beside the model, else --calib.")]

def _checkpoint_beside(model_path: Path) -> Path:
    """The trained weights (model.pt) of an FP32 ONNX model, which pruning needs."""
    if variant_label(model_path) is not None:
        _fail(f"{model_path.name} is an optimised variant; prune and optimize start from the "
              f"FP32 model (model.onnx)")
    checkpoint = model_path.with_suffix(".pt")
    if not checkpoint.is_file():
        _fail(f"{model_path}: no {checkpoint.name} beside it; pruning needs the trained "
              f"weights (vidpipe model train writes them)")
    return checkpoint


def _resolve(model_name: str) -> tuple[Path, Any]:
    try:
        model_path, spec = resolve_model(model_name)
        read_graph(model_path)
    except (VidpipeError, ModelError) as e:
        _fail(str(e))
    return model_path, spec


def _allocation_checked(allocation: str) -> None:
    from models.prune import ALLOCATIONS

    if allocation not in ALLOCATIONS:
        _fail(f"--allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}")


def _ratios(text: str) -> list[float]:
    try:
        return [ratio_checked(float(v)) for v in text.split(",") if v.strip()]
    except ValueError as e:
        _fail(str(e) if "--ratio" in str(e) else f"--ratio must be numbers like 0.5,0.7, "
              f"got {text!r}")
    return []


def _scorer(spec: Any, model_path: Path, videos: list[Path] | None, fallback: Path | None,
            out: Path) -> Any:
    from app.model_optimize import Scorer

    clips = list(videos or [])
    if not clips:
        heldout = sorted((model_path.parent / "heldout").glob("clip-*.mp4"))
        clips = heldout or ([fallback] if fallback is not None else [])
    if not clips:
        _fail("give --video: clips to score the variants on")
    missing = [str(c) for c in clips if not c.is_file()]
    if missing:
        _fail(f"--video: no such file: {', '.join(missing)}")
    return Scorer(spec, clips, out, model_path)


def _load_network(model_path: Path) -> Any:
    """The trained torch network beside an FP32 ONNX model (model.pt)."""
    from models.checkpoint import load_checkpoint

    try:
        return load_checkpoint(_checkpoint_beside(model_path))
    except ValueError as e:
        _fail(str(e))


Distill = Annotated[bool, typer.Option(
    "--distill/--no-distill", help="Fine-tune towards the unpruned model's outputs as well as "
    "the labels (measured: 0.23 points of mAP back at 50%, for 1.7x the time per step).")]
Allocation = Annotated[str, typer.Option(
    "--allocation", help="How the ratio is shared among the layers. deep-first: the stem, the "
    "stride-4 and stride-8 stages, the neck and the head lose at most half their channels, "
    "the stride-16 and stride-32 stages the rest (measured at 70%, same fine-tuning: 4.2 "
    "points of mAP@0.5 lost against 7.5 uniform); uniform: every layer loses the ratio. The "
    "same up to 0.5.")]


def _prune_one(model_path: Path, network: Any, ratio: float, prune_steps: int | None,
               distill: bool = True, allocation: str = "deep-first",
               start: Any = None) -> tuple[Path, Any]:
    """Prune ``network`` (or ``start``, a pruned network of it, distilling from
    ``network``) to ``ratio``; writes the variant's .onnx, .pt and .json beside the model."""
    from models.prune import PruneConfig, channel_summary, prune, save_pruned

    source = network if start is None else start
    config = PruneConfig(ratio=ratio, distill=distill, allocation=allocation)
    if prune_steps:
        config = dataclasses.replace(config, final_steps=prune_steps,
                                     round_steps=prune_steps // 8)
    with _train_progress() as progress:
        rendered, step = _render_then_steps(progress, f"pruning {ratio:.0%} + fine-tuning",
                                            config.total_steps)
        try:
            result = prune(source, config, lambda r: step(r.step, r.loss), rendered,
                           teacher=network)
        except ValueError as e:
            _fail(str(e))
    from app.model_optimize import export_pruned

    path = export_pruned(result.model, model_path.parent, ratio)
    save_pruned(result, path.with_suffix(".pt"))
    path.with_suffix(".json").write_text(json.dumps(result.log(), indent=1) + "\n")
    before, after = result.parameters
    console.print(f"pruned {result.channels_removed:.1%} of the channels ({allocation}) in "
                  f"{result.wall_s / 60:.1f} min: "
                  f"{before:,} -> {after:,} parameters, {result.macs[0] / 1e9:.3f} -> "
                  f"{result.macs[1] / 1e9:.3f} GMAC per image; channels "
                  f"{channel_summary(source)} -> {channel_summary(result.model)}")
    console.print(f"wrote {path}")
    return path, result


def _pruned_start(model_path: Path, network: Any, start_ratio: float) -> Any:
    """The pruned network of ``start_ratio`` beside ``model_path`` (model.prunedNN.pt),
    checked to be a pruned form of ``network``."""
    from models.checkpoint import load_checkpoint
    from models.zoo import variant_file

    path = model_path.parent / Path(variant_file(start_ratio, int8=False)).with_suffix(".pt")
    if not path.is_file():
        _fail(f"--from {start_ratio:g}: no {path.name} beside {model_path.name} (vidpipe model "
              f"prune --ratio {start_ratio:g} writes it)")
    try:
        start = load_checkpoint(path)
    except ValueError as e:
        _fail(str(e))
    if start.config != network.config:
        _fail(f"--from {start_ratio:g}: {path.name} was pruned from another network than "
              f"{model_path.name}")
    return start


@model.command()
def prune(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="A trained model: folder with card.yaml, model.onnx, model.pt.")],
    ratio: Annotated[float, typer.Option(
        "--ratio", help="Fraction of the channels to remove, e.g. 0.5 or 0.7.")] = 0.5,
    steps: Annotated[int | None, typer.Option(
        "--steps", help="Fine-tuning steps after the last pruning round (default 800; "
        "an eighth of it after each earlier round).")]
    = None,
    distill: Distill = True,
    allocation: Allocation = "deep-first",
    start_from: Annotated[float | None, typer.Option(
        "--from", help="Start from the pruned network of this ratio beside the model (0.5: "
        "model.pruned50.pt) and prune on to --ratio; distillation still learns from the "
        "unpruned model (measured at 70%, about as many steps: 2.8 points lost, against "
        "4.2 from the unpruned network).")] = None,
) -> None:
    """L1-norm structured channel pruning (torch-pruning), in rounds with fine-tuning between
    them (distilling the unpruned model); writes model.prunedNN.onnx and .pt beside it."""
    _ratios(str(ratio))
    _allocation_checked(allocation)
    if start_from is not None and not (math.isfinite(start_from) and 0 < start_from < ratio):
        _fail(f"--from must be a ratio below --ratio {ratio:g}, got {start_from:g}")
    model_path, _ = _resolve(model_name)
    network = _load_network(model_path)
    start = None if start_from is None else _pruned_start(model_path, network, start_from)
    _prune_one(model_path, network, ratio, steps, distill, allocation, start)


@model.command()
def quantize(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx with a card beside it.")],
    calib: CalibVideo,
    video: ScoringClips = None,
    method: Annotated[str, typer.Option(
        "--method", help=f"all, or one of {', '.join(('minmax', 'entropy', 'percentile'))}.")]
    = "all",
    frames: Annotated[int, typer.Option("--frames", help="Calibration frames.")] = 64,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for scoring runs.")]
    = Path("out/quantize"),
) -> None:
    """INT8 QDQ quantization for ONNX Runtime (per-channel symmetric weights, UINT8
    activations; the first conv and the output head stay float): tries each calibration
    method, scores each on the clips, keeps the most accurate as MODEL.int8.onnx."""
    from app.model_optimize import CalibrationError, calibration_frames, quantize_best
    from models.quantize import METHODS

    methods = list(METHODS) if method == "all" else [method]
    if any(m not in METHODS for m in methods):
        _fail(f"--method must be all or one of {', '.join(METHODS)}, got {method!r}")
    model_path, spec = _resolve(model_name)
    fp32 = model_path.parent / spec.file
    try:
        calibration = calibration_frames(calib, spec.input, frames)
        scorer = _scorer(spec, fp32, video, calib, out)
        with RunProgress(console, "scoring") as progress:
            scorer.on_progress = progress.update
            path, best, _, _ = quantize_best(model_path, calibration, scorer, methods,
                                             console.print)
    except (VidpipeError, ModelError, LabelsError, CalibrationError) as e:
        _fail(str(e))
    console.print(f"kept {best} ({scorer.kind}); wrote {path}")


@model.command()
def optimize(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="A trained model folder (card.yaml, model.onnx, model.pt).")],
    calib: CalibVideo,
    video: ScoringClips = None,
    ratio: Annotated[str, typer.Option(
        "--ratio", help="Pruning ratio(s), comma-separated; each after the first is pruned "
        "on from the one before (like prune --from).")] = "0.5,0.7",
    max_loss: Annotated[float, typer.Option(
        "--max-loss", help="Largest mAP@0.5 loss, in points, a variant may cost; one that "
        "costs more is refused (its files removed, exit 1).")] = 1.5,
    prune_steps: Annotated[int | None, typer.Option(
        "--prune-steps", help="Fine-tuning steps after the last pruning round.")] = None,
    distill: Distill = True,
    allocation: Allocation = "deep-first",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for scoring runs and "
                                      "optimize.json.")] = Path("out/optimize"),
) -> None:
    """Prune -> fine-tune -> quantize -> evaluate in one command; prints params, GFLOPs, ONNX
    Runtime latency, mAP and the loss against FP32 for every variant, and refuses any that
    loses more than --max-loss points."""
    from app.model_optimize import (
        CalibrationError,
        VariantRow,
        apply_gate,
        calibration_frames,
        measure_latencies,
        quantize_best,
        write_report,
    )
    from models.prune import count_macs
    from models.quantize import METHODS

    ratios = _ratios(ratio)
    _allocation_checked(allocation)
    if max_loss < 0:
        _fail(f"--max-loss must be >= 0, got {max_loss:g}")
    model_path, spec = _resolve(model_name)
    network = _load_network(model_path)
    try:
        calibration = calibration_frames(calib, spec.input)  # fail before the long work
    except CalibrationError as e:
        _fail(str(e))
    rows: list[VariantRow] = []
    methods: dict[str, Any] = {}
    try:
        scorer = _scorer(spec, model_path, video, calib, out)

        def record(label: str, path: Path, torch_model: Any, scores: ClipScores) -> None:
            rows.append(VariantRow(label, path.name, count_parameters(torch_model),
                                   round(2 * count_macs(torch_model) / 1e9, 3),
                                   scores.overall))

        with RunProgress(console, "scoring fp32") as progress:
            scorer.on_progress = progress.update
            record("fp32", model_path, network, scorer.score(model_path, "fp32"))
        with RunProgress(console, "quantizing fp32") as progress:
            scorer.on_progress = progress.update
            int8, best, tried, failed = quantize_best(model_path, calibration, scorer,
                                                      METHODS, console.print)
        methods["fp32"] = {**{m: s.overall.as_dict() for m, s in tried.items()},
                           **{m: {"failed": why} for m, why in failed.items()}}
        record("int8", int8, network, tried[best])
        start = None  # each ratio after the first is pruned on from the one before
        for r in sorted(set(ratios)):
            pruned_path, result = _prune_one(model_path, network, r, prune_steps, distill,
                                             allocation, start)
            start = result.model
            label = f"pruned{round(r * 100)}"
            with RunProgress(console, f"scoring {label}") as progress:
                scorer.on_progress = progress.update
                record(label, pruned_path, result.model, scorer.score(pruned_path, label))
            with RunProgress(console, f"quantizing {label}") as progress:
                scorer.on_progress = progress.update
                q_path, q_best, q_tried, _ = quantize_best(pruned_path, calibration,
                                                           scorer, [best], console.print)
            methods[label] = {m: s.overall.as_dict() for m, s in q_tried.items()}
            record(f"{label}+int8", q_path, result.model, q_tried[q_best])
        console.print(f"timing {len(rows)} variants side by side (ONNX Runtime, 1 and 2 "
                      f"threads)")
        measure_latencies(rows, model_path.parent)
    except (VidpipeError, ModelError, LabelsError, CalibrationError) as e:
        _fail(str(e))
    apply_gate(rows, max_loss)
    print_variants(rows, scorer.kind, max_loss)
    report = write_report(out / "optimize.json", rows, {
        "model": str(model_path), "scored_by": scorer.kind,
        "clips": [str(c) for c in scorer.clips], "calibration": str(calib),
        "calibration_method": best, "calibration_methods": methods, "max_loss": max_loss})
    console.print(f"wrote {report}")
    shown_calib = calib.name if calib.is_absolute() else str(calib)
    flags = f" --ratio {ratio}" + (f" --prune-steps {prune_steps}" if prune_steps else "") \
        + ("" if distill else " --no-distill") \
        + ("" if allocation == "deep-first" else f" --allocation {allocation}")
    card = record_variants(model_path.parent / "card.yaml", rows, scorer.kind,
                           [c.name for c in scorer.clips], best, shown_calib, max_loss,
                           flags)
    console.print(f"wrote the kept variants' figures into {card}")
    refused = [r for r in rows if r.refused]
    for row in refused:
        for path in (model_path.parent / row.file, (model_path.parent / row.file)
                     .with_suffix(".pt")):
            path.unlink(missing_ok=True)
        console.print(f"[red]refused:[/red] {row.label} loses {row.loss_points:.2f} points "
                      f"of mAP@0.5 (more than --max-loss {max_loss:g}); {row.file} removed",
                      highlight=False)
    if refused:
        raise typer.Exit(1)


def record_variants(card_path: Path, rows: list[Any], kind: str, clips: list[str],
                    method: str, calib: str, max_loss: float, flags: str = "") -> Path:
    """Write the measured table of the kept variants under ``measured.variants`` in the card."""
    from models.export import write_card
    from models.spec import load_card

    spec = load_card(card_path)
    measured = dict(spec.measured)
    measured["variants"] = {
        "scored_by": kind, "clips": clips, "calibration": f"{method} on {calib}",
        "max_loss_points": max_loss,
        "latency": "ONNX Runtime median per image, batch 1, all variants side by side, on "
                   "the machine in training.machine",
        "command": f"vidpipe model optimize {card_path.parent} --calib {calib}{flags} "
                   f"--max-loss {max_loss:g}",
        "rows": {r.label: {"file": r.file, "parameters": r.parameters, "gflops": r.gflops,
                           "ms_1_thread": r.latency_ms, "ms_2_threads": r.latency_2t_ms,
                           "speedup": r.speedup, "mAP@0.5": round(r.accuracy.map50, 4),
                           "mAP@0.5:0.95": round(r.accuracy.map50_95, 4),
                           "loss_points": r.loss_points}
                 for r in rows if not r.refused},
    }
    return write_card(spec.model_copy(update={"measured": measured}), card_path)


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


@model.command("build-engine")
def build_engine(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx (a QDQ one for int8).")],
    precision: Annotated[str, typer.Option(
        "--precision", help="fp16, int8 (from a QDQ model) or fp32.")] = "fp16",
    batch: Annotated[int, typer.Option("--batch", help="Largest batch the engine takes.")] = 8,
    cache: Annotated[Path | None, typer.Option(
        "--cache", help="Engine cache (default: $VIDPIPE_ENGINE_CACHE or "
        "~/.cache/vidpipe/engines).")] = None,
    beside: Annotated[bool, typer.Option(
        "--beside/--cache-only", help="Also copy the engine beside the ONNX it was built from "
        "(same name, .engine), where vidpipe run --device cuda finds it.")] = True,
    calib: Annotated[Path | None, typer.Option(
        "--calib", help="int8 from an FP32 model: video to calibrate the symmetric INT8 QDQ "
        "model that TensorRT takes (written beside it as model.int8.tensorrt.onnx).")] = None,
) -> None:
    """Build (or reuse from the cache) a TensorRT engine for MODEL. Needs a CUDA GPU and the
    tensorrt package; an engine whose model, GPU, TensorRT, batch or precision changed is
    rebuilt, never reused."""
    from models.engine import PRECISIONS, ensure_engine, record_path
    from models.runtime.torch import DeviceUnavailable

    if precision not in PRECISIONS:
        _fail(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if batch < 1:
        _fail(f"--batch must be >= 1, got {batch}")
    model_path, spec = _resolve(model_name)
    if precision == "int8":
        model_path = _tensorrt_qdq(model_path, spec, calib)
    try:
        with console.status(f"building the {precision} engine (batch <= {batch})"):
            result = ensure_engine(model_path, precision, batch, cache)
    except (DeviceUnavailable, ModelError) as e:
        _fail(str(e))
    console.print(f"{'built' if result.built else 'reused'} {result.path} ({result.reason})")
    if beside:
        target = model_path.with_name(model_path.name[:-len(".onnx")] + ".engine")
        shutil.copyfile(result.path, target)
        shutil.copyfile(record_path(result.path), record_path(target))
        console.print(f"wrote {target}")


def _tensorrt_qdq(model_path: Path, spec: Any, calib: Path | None) -> Path:
    """The symmetric INT8 QDQ model TensorRT builds from: MODEL itself when it is one, else
    quantized from the FP32 MODEL on --calib frames (``models.quantize``, target tensorrt)."""
    import onnx
    from onnx import numpy_helper

    from app.model_optimize import CalibrationError, calibration_frames
    from models.quantize import quantize_model

    graph = onnx.load(str(model_path))
    initial = {i.name: i for i in graph.graph.initializer}
    points = [numpy_helper.to_array(initial[n.input[2]]) for n in graph.graph.node
              if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in initial]
    if points:
        if any(p.dtype != np.int8 or p.any() for p in points):
            _fail(f"{model_path.name} is quantized for ONNX Runtime on the CPU (UINT8 "
                  f"activations); TensorRT takes symmetric INT8 only: give the FP32 model "
                  f"and --calib VIDEO")
        return model_path
    if calib is None:
        _fail("--precision int8 from an FP32 model needs --calib VIDEO (frames to calibrate "
              "the INT8 ranges on)")
    target = model_path.with_name(model_path.name[:-len(".onnx")] + ".int8.tensorrt.onnx")
    try:
        with console.status("calibrating symmetric INT8 for TensorRT"):
            quantize_model(model_path, target, calibration_frames(calib, spec.input),
                           "percentile", target="tensorrt")
    except (CalibrationError, ModelError) as e:
        _fail(str(e))
    console.print(f"wrote {target}")
    return target
