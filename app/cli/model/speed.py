"""``vidpipe model prune | quantize | optimize``: the commands that make a trained model
fast, each with what it costs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.console import console, fail, failing_cleanly, styled
from app.cli.model import resolve_checked
from app.cli.progress import RunProgress, render_then_steps, train_progress
from models.prune import ratio_checked
from models.zoo import variant_label

CalibVideo = Annotated[Path, typer.Option(
    "--calib", help="Video whose frames calibrate INT8 (the user's own footage).")]
ScoringClips = Annotated[list[Path] | None, typer.Option(
    "--video", help="Clip(s) every variant is scored on (labels beside them: mAP; none: "
    "agreement with FP32). Default: held-out clips beside the model, else --calib.")]


def _checkpoint_beside(model_path: Path) -> Path:
    """The trained weights (model.pt) of an FP32 ONNX model, which pruning needs."""
    if variant_label(model_path) is not None:
        fail(f"{model_path.name} is an optimised variant; prune and optimize start from the "
              f"FP32 model (model.onnx)")
    checkpoint = model_path.with_suffix(".pt")
    if not checkpoint.is_file():
        fail(f"{model_path}: no {checkpoint.name} beside it; pruning needs the trained "
              f"weights (vidpipe model train writes them)")
    return checkpoint


def _allocation_checked(allocation: str) -> None:
    from models.prune import ALLOCATIONS

    if allocation not in ALLOCATIONS:
        fail(f"--allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}")


def _ratios(text: str) -> list[float]:
    try:
        return [ratio_checked(float(v)) for v in text.split(",") if v.strip()]
    except ValueError as e:
        fail(str(e) if "--ratio" in str(e) else f"--ratio must be numbers like 0.5,0.7, "
              f"got {text!r}")
    return []


def _scorer(spec: Any, model_path: Path, videos: list[Path] | None, fallback: Path | None,
            out: Path) -> Any:
    from app.recipes.optimize import Scorer

    clips = list(videos or [])
    if not clips:
        heldout = sorted((model_path.parent / "heldout").glob("clip-*.mp4"))
        clips = heldout or ([fallback] if fallback is not None else [])
    if not clips:
        fail("give --video: clips to score the variants on")
    missing = [str(c) for c in clips if not c.is_file()]
    if missing:
        fail(f"--video: no such file: {', '.join(missing)}")
    return Scorer(spec, clips, out, model_path)


def _load_network(model_path: Path) -> Any:
    """The trained torch network beside an FP32 ONNX model (model.pt)."""
    from models.checkpoint import load_checkpoint

    try:
        return load_checkpoint(_checkpoint_beside(model_path))
    except ValueError as e:
        fail(str(e))


Distill = Annotated[bool, typer.Option(
    "--distill/--no-distill", help="Fine-tune towards the unpruned model's outputs as well as "
    "the labels: a little accuracy back for a teacher pass per step (docs/MODELS.md).")]
Allocation = Annotated[str, typer.Option(
    "--allocation", help="How the ratio is shared among the layers. deep-first: the stem, the "
    "stride-4 and stride-8 stages, the neck and the head lose at most half their channels, "
    "the stride-16 and stride-32 stages the rest; uniform: every layer loses the ratio. The "
    "same up to 0.5; above it deep-first loses much less (docs/MODELS.md).")]


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
    with train_progress(console) as progress:
        rendered, step = render_then_steps(progress, f"pruning {ratio:.0%} + fine-tuning",
                                            config.total_steps)
        try:
            result = prune(source, config, lambda r: step(r.step, r.loss), rendered,
                           teacher=network)
        except ValueError as e:
            fail(str(e))
    from app.recipes.optimize import export_pruned

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
        fail(f"--from {start_ratio:g}: no {path.name} beside {model_path.name} (vidpipe model "
              f"prune --ratio {start_ratio:g} writes it)")
    try:
        start = load_checkpoint(path)
    except ValueError as e:
        fail(str(e))
    if start.config != network.config:
        fail(f"--from {start_ratio:g}: {path.name} was pruned from another network than "
              f"{model_path.name}")
    return start


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
        "unpruned model. At high ratios this loses less than pruning the unpruned network "
        "at once (docs/MODELS.md).")] = None,
) -> None:
    """L1-norm structured channel pruning (torch-pruning), in rounds with fine-tuning between
    them (distilling the unpruned model); writes model.prunedNN.onnx and .pt beside it."""
    _ratios(str(ratio))
    _allocation_checked(allocation)
    if start_from is not None and not (math.isfinite(start_from) and 0 < start_from < ratio):
        fail(f"--from must be a ratio below --ratio {ratio:g}, got {start_from:g}")
    model_path, _ = resolve_checked(model_name)
    network = _load_network(model_path)
    start = None if start_from is None else _pruned_start(model_path, network, start_from)
    _prune_one(model_path, network, ratio, steps, distill, allocation, start)


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
    from app.recipes.optimize import calibration_frames, quantize_best
    from models.quantize import METHODS

    methods = list(METHODS) if method == "all" else [method]
    if any(m not in METHODS for m in methods):
        fail(f"--method must be all or one of {', '.join(METHODS)}, got {method!r}")
    model_path, spec = resolve_checked(model_name)
    fp32 = model_path.parent / spec.file
    with failing_cleanly():
        calibration = calibration_frames(calib, spec.input, frames)
        scorer = _scorer(spec, fp32, video, calib, out)
        with RunProgress(console, "scoring") as progress:
            scorer.on_progress = progress.update
            path, best, _, _ = quantize_best(model_path, calibration, scorer, methods,
                                             console.print)
    console.print(f"kept {best} ({scorer.kind}); wrote {path}")


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
    from app.recipes.optimize import calibration_frames, optimise_variants

    ratios = _ratios(ratio)
    _allocation_checked(allocation)
    if max_loss < 0:
        fail(f"--max-loss must be >= 0, got {max_loss:g}")
    model_path, spec = resolve_checked(model_name)
    network = _load_network(model_path)
    with failing_cleanly():
        calibration = calibration_frames(calib, spec.input)  # fail before the long work
        scorer = _scorer(spec, model_path, video, calib, out)
        done = optimise_variants(
            model_path, network, calibration, scorer, ratios,
            lambda r, start: _prune_one(model_path, network, r, prune_steps, distill,
                                        allocation, start),
            lambda title: RunProgress(console, title), console.print)
    flags = f" --ratio {ratio}" + (f" --prune-steps {prune_steps}" if prune_steps else "") \
        + ("" if distill else " --no-distill") \
        + ("" if allocation == "deep-first" else f" --allocation {allocation}")
    _report_variants(model_path, done, scorer, calib, max_loss, flags, out)


def _report_variants(model_path: Path, done: Any, scorer: Any, calib: Path, max_loss: float,
                     flags: str, out: Path) -> None:
    """Gate, print and record the variants; remove the refused ones' files (exit 1 then)."""
    from models.variants import apply_gate, record_variants, write_report

    rows, best = done.rows, done.method
    apply_gate(rows, max_loss)
    print_variants(rows, scorer.kind, max_loss)
    report = write_report(out / "optimize.json", rows, {
        "model": str(model_path), "scored_by": scorer.kind,
        "clips": [str(c) for c in scorer.clips], "calibration": str(calib),
        "calibration_method": best, "calibration_methods": done.methods,
        "max_loss": max_loss})
    console.print(f"wrote {report}")
    shown_calib = calib.name if calib.is_absolute() else str(calib)
    card = record_variants(model_path.parent / "card.yaml", rows, scorer.kind,
                           [c.name for c in scorer.clips], best, shown_calib, max_loss,
                           flags)
    console.print(f"wrote the kept variants' figures into {card}")
    refused = [r for r in rows if r.refused]
    for row in refused:
        for path in (model_path.parent / row.file, (model_path.parent / row.file)
                     .with_suffix(".pt")):
            path.unlink(missing_ok=True)
        console.print(styled(("refused:", "red"), f" {row.label} loses "
                             f"{row.loss_points:.2f} points of mAP@0.5 (more than --max-loss "
                             f"{max_loss:g}); {row.file} removed"), highlight=False)
    if refused:
        raise typer.Exit(1)


def print_variants(rows: list[Any], kind: str, max_loss: float) -> None:
    """The variants' table: size, speed, accuracy, loss against FP32, and the verdict."""
    table = Table(title=f"Variants ({kind}; ONNX Runtime on this CPU, batch 1)")
    for column in ("variant", "params", "GFLOPs", "ms 1T", "ms 2T", "speed-up", "mAP@0.5",
                   "mAP@.5:.95", "loss pts", "verdict"):
        table.add_column(column, justify="left" if column in ("variant", "verdict") else "right")
    for r in rows:
        verdict = (styled(("refused", "red")) if r.refused else
                   "baseline" if r.label == "fp32" else f"kept (<= {max_loss:g})")
        table.add_row(r.label, f"{r.parameters:,}", f"{r.gflops:.3f}", f"{r.latency_ms:.2f}",
                      f"{r.latency_2t_ms:.2f}", f"{r.speedup:.2f}x",
                      f"{r.accuracy.map50:.4f}", f"{r.accuracy.map50_95:.4f}",
                      f"{r.loss_points:+.2f}", verdict)
    console.print(table)
