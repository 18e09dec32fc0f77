"""The ``bench`` and ``profile`` commands."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress

from app.bench.compare import compare, live, scaling
from app.bench.machine import core_speed_all_busy, machine
from app.bench.profile import profile as run_profile
from app.bench.tables import (
    against_table,
    compare_table,
    live_table,
    profile_table,
    runtimes_table,
    scaling_table,
    service_table,
)
from app.run.demo import ensure_demo_clip
from models.zoo import model_variants, resolve_model
from pipelines.errors import ConfigError
from pipelines.options import PipelineOptions
from pipelines.synthetic.demo import make_demo_clip


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected numbers like 1,2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"expected positive numbers like 1,2,4,8, got {text!r}")
    return values


def bench(
    console: Console,
    quick: bool, source: Path | None, model: str | None, streams: str, reps: int,
    frames: int | None, live_seconds: float, out: Path,
) -> dict[str, Any]:
    clip = source or ensure_demo_clip(Path("build/demo/clip.mp4"), console)
    variants = model_variants(model)
    stream_counts = _ints(streams)
    if quick:
        reps, frames, stream_counts = 1, frames or 90, [n for n in stream_counts if n <= 2]
    options = PipelineOptions()
    report: dict[str, Any] = {"machine": machine() | {"core_speed_all_busy":
                                                      core_speed_all_busy()},
                              "clip": str(clip), "reps": reps,
                              "frames_per_run": frames,
                              "threads": "chosen by each vidpipe run from measured stage "
                                         "costs: see the rows"}
    runs = reps * len(variants) * (1 + len({1, os.cpu_count() or 1})) + len(stream_counts)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring (interleaved runs)", total=runs)

        def advance() -> None:
            progress.advance(task)

        report["compare"] = compare(clip, variants, options, reps=reps, frame_limit=frames,
                                    progress=advance)
        path, spec = variants[leanest(list(variants))]
        report["scaling_model"] = path.name
        report["scaling"] = scaling(clip, path, spec, options, streams=stream_counts,
                                    frame_limit=frames, progress=advance)
    console.print(compare_table(report["compare"]))
    speed = report["machine"]["core_speed_all_busy"]
    console.print(f"With all {speed['cores']} cores busy each ran a fixed loop at "
                  f"{speed['ratio']:.2f}x its speed alone: stages that share the cores run "
                  f"slower than their rates alone.")
    console.print(scaling_table(report["scaling"]))
    if live_seconds > 0:
        camera = camera_clip(console) if source is None else clip
        report["live"] = live(camera, path, spec, options, duration_s=live_seconds)
        console.print(live_table(report["live"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {out / 'bench.json'}")
    return report


CAMERA_CLIP = Path("build/demo/clip-camera.mp4")


def camera_clip(console: Console) -> Path:
    """The demo clip encoded as a camera sends it (no B-frames, a key frame every 2 s)."""
    if not CAMERA_CLIP.is_file():
        with console.status(f"making {CAMERA_CLIP} (the demo clip, encoded as a camera's)"):
            make_demo_clip(CAMERA_CLIP, camera_like=True)
    return CAMERA_CLIP


def bench_service(console: Console, counts: str, source: Path | None, model: str | None,
                  seconds: float, out: Path, against: str | None = None,
                  detect_fps: float | None = None) -> list[dict[str, Any]]:
    """``vidpipe bench --service``: one row per stream count (``app.bench.service``), and
    per count a row of the commit ``against`` too; ``detect_fps``: each stream's."""
    from app.bench.service import run as run_service
    from app.bench.service import worktree

    clip = source or camera_clip(console)
    name = model or "ssdlite-person"
    resolve_model(name)  # a bad model is one line here, not a failure in a subprocess
    what = f"the service with {counts} streams of {clip.name}, {seconds:g} s each" + (
        "" if detect_fps is None else f", detect_fps {detect_fps:g}")
    with ExitStack() as stack:
        other = None if against is None else stack.enter_context(worktree(against))
        with console.status(what + ("" if other is None else f", against {other[0]}")):
            rows = run_service(_ints(counts), name, clip, seconds, other, detect_fps)
    console.print(service_table(rows, cores=os.cpu_count() or 1))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"machine": machine(), "clip": str(clip),
                                                "service": rows}, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return rows


def bench_cluster(console: Console, counts: str, workers: int, source: Path | None,
                  model: str | None, seconds: float, reps: int, out: Path,
                  ) -> list[dict[str, Any]]:
    """``vidpipe bench --service N --workers W``: one process against W Ray workers, same
    streams, alternating (``app.bench.cluster``)."""
    from rich.table import Table

    from app.bench.cluster import compare

    clip = source or camera_clip(console)
    name = model or "ssdlite-person"
    resolve_model(name)
    rows = []
    for streams in _ints(counts):
        with console.status(f"{streams} streams of {clip.name}: one process against "
                            f"{workers} workers, {reps} times each, {seconds:g} s each"):
            rows += compare(streams, workers, name, clip, seconds, reps)
    table = Table(title=f"One process against {workers} Ray workers (runs alternating)")
    for column in ("streams", "kind", "fps total (runs)", "per stream min-max", "RSS MB (runs)"):
        table.add_column(column, justify="right")
    for streams in _ints(counts):
        for kind in ("one process", f"{workers} workers"):
            mine = [r for r in rows if r["streams"] == streams and r["kind"] == kind]
            table.add_row(str(streams), kind,
                          " ".join(f"{r['fps_total']:.1f}" for r in mine),
                          " ".join(f"{r['fps_per_stream_min']:.1f}-"
                                   f"{r['fps_per_stream_max']:.1f}" for r in mine),
                          " ".join(f"{r['rss_mb']:.0f}" for r in mine))
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"machine": machine(), "clip": str(clip),
                                                "cluster": rows}, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return rows


def bench_against(console: Console, against: str, source: Path | None, model: str | None,
                  reps: int, frames: int | None, out: Path) -> list[dict[str, Any]]:
    """``vidpipe bench --against REV``: the default pipeline of this code and of REV, side by
    side per variant of the model (``app.bench.against``)."""
    from app.bench.against import compare_codes
    from app.bench.service import worktree

    clip = source or ensure_demo_clip(Path("build/demo/clip.mp4"), console)
    name = model or "ssdlite-person"
    variants = list(model_variants(name))
    with worktree(against) as other, console.status(
            f"vidpipe run's default pipeline on {clip.name}: this code and {other[0]}, "
            f"{reps} runs each, {', '.join(variants)}"):
        rows = compare_codes(name, clip, variants, other, reps=reps, frames=frames)
    console.print(against_table(rows))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"machine": machine(), "clip": str(clip),
                                                "model": name, "reps": reps,
                                                "against": rows}, indent=2, default=str))
    console.print(f"wrote {out / 'bench.json'}")
    return rows


def leanest(labels: list[str]) -> str:
    """The most optimised variant found: pruned + INT8, else pruned, else INT8, else FP32."""
    for wanted in (lambda k: k.startswith("pruned") and k.endswith("+int8"),
                   lambda k: k.startswith("pruned"), lambda k: k == "int8"):
        found = [k for k in labels if wanted(k)]
        if found:
            return found[0]
    return "fp32"


def profile(console: Console, sources: list[str], model: str | None, seconds: float,
            batch_size: int, infer_threads: int | None,
            decode_threads: int | None = None) -> dict[str, Any]:
    path, spec = resolve_model(model)
    options = PipelineOptions(batch_size=batch_size, infer_threads=infer_threads,
                              decode_threads=decode_threads)
    report = run_profile(sources, path, spec, options, seconds=seconds)
    console.print(profile_table(report))
    occupancy = ", ".join(f"{k} {v:.0%}" for k, v in report["queue_occupancy"].items())
    console.print(f"queue occupancy (mean fill): {occupancy}")
    for tip in report["advice"]:
        console.print(f"- {tip}")
    return report


def bench_runtimes(console: Console, models: str | None, source: Path | None, reps: int,
                   frames: int | None, ultralytics_python: Path | None,
                   out: Path) -> dict[str, Any]:
    """``vidpipe bench --runtimes``: every variant of each model (comma-separated, default
    the zoo's) under ONNX Runtime and OpenVINO, alone, checked and end to end
    (``app.bench.runtimes``)."""
    from models.backends.openvino import openvino_version

    if openvino_version() is None:
        raise ConfigError("--runtimes needs OpenVINO: pip install 'vidpipe[openvino]'")
    from app.bench.runtimes import CHECK_FRAMES, agreement, end_to_end, model_alone

    clip = source or ensure_demo_clip(Path("build/demo/clip.mp4"), console)
    names = [m.strip() for m in (models or "ssdlite-person,shapes-yolo").split(",") if m.strip()]
    variants = {f"{name} {label}" if len(model_variants(name)) > 1 else name: found
                for name in names for label, found in model_variants(name).items()}
    report: dict[str, Any] = {"machine": machine(), "clip": str(clip), "reps": reps,
                              "frames_per_run": frames, "openvino": openvino_version(),
                              "models": []}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("runtimes: alone, checked, end to end",
                                 total=len(variants) * (2 + reps))
        for label, (path, spec) in variants.items():
            row: dict[str, Any] = {"model": label, "file": str(path)}
            row["alone"] = model_alone(path, spec)
            progress.advance(task)
            row["check"] = agreement(path, spec, clip, min(frames or CHECK_FRAMES,
                                                           CHECK_FRAMES))
            progress.advance(task)
            row["end_to_end"] = end_to_end(label, path, spec, clip, reps=reps, frames=frames,
                                           ultralytics_python=ultralytics_python,
                                           progress=lambda: progress.advance(task))
            report["models"].append(row)
    console.print(runtimes_table(report["models"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {out / 'bench.json'}")
    return report
