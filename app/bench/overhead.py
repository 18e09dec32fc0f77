"""``vidpipe bench --overhead``: the engine's own cost per frame, with the model out of the way.

A null detector (``overhead_parts.null_model``: every candidate scored 0, so no box) runs
behind every stage of ``vidpipe run``'s pipeline — decode, preprocess, inference, box
decoding, tracking (ByteTrack), the JSON lines sink and the metrics — over 1 to 256 streams
of a quiet 640x360@15 camera's clip (an empty scene with sensor noise, made once in
build/overhead). Each row is a process-wide figure: frames through every stage a second, and
CPU milliseconds a frame by part, from each thread's CPU time (decode threads, which also
measure motion and choose the frames, the event loop that hands frames between stages, each
stage's worker; a stage's light calls run on the event loop are counted as the stage's), with
the metrics' own calls and the motion gate timed apart. Sources:

- ``memory``: the clip decoded once, its pictures replayed (nothing is decoded: the engine's
  ceiling);
- ``file``: the clip decoded by each stream (FFmpeg, one thread a stream), beside the hand
  loop: the same decoding, and nothing else.

Modes: ``detect`` (every frame to the null detector) and ``gated`` (motion gating, ``auto``:
the quiet scene's frames are skipped but for the heartbeat's).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.bench.overhead_parts import (
    MemoryDecoder,
    MemorySource,
    ThreadClock,
    decode_once,
    null_model,
)
from app.bench.overhead_timing import TimedMetrics, time_gates
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.backends.cpu import host_backends
from pipelines.build import wire_pipeline
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.sinks.jsonl import JsonlSink
from pipelines.sources.file import FileSource
from pipelines.synthetic.quiet import make_quiet_clip

FOLDER = Path("build/overhead")
CLIP_S = 20.0  # the quiet camera's clip: 300 frames at 15 fps, replayed as often as needed
STREAMS = (1, 8, 64, 256)
MODES = ("detect", "gated")
SOURCES = ("memory", "file")
BATCH_SIZE = PipelineOptions().batch_size  # what users get
FRAMES = 6000  # frames a row, over all its streams (at least two seconds' of each stream)


def quiet_clip() -> Path:
    """The empty scene (no visitor, no clock: nothing moves but the sensor's noise), made once."""
    path = FOLDER / "quiet-640x360-15.mp4"
    if not path.exists():
        FOLDER.mkdir(parents=True, exist_ok=True)
        make_quiet_clip(path, seconds=CLIP_S, fps=15, size=(640, 360), seed=1, active=0.0,
                        clock=False)
    return path


def options_for(mode: str, batch_size: int) -> PipelineOptions:
    """``vidpipe run --track bytetrack`` (and ``--motion auto`` when gated)."""
    analytics = AnalyticsConfig(track=TrackerSettings(kind="bytetrack"),
                                motion="auto" if mode == "gated" else "off")
    return PipelineOptions(analytics=analytics, batch_size=batch_size)


def engine_row(source_kind: str, mode: str, streams: int, frames: int, clip: Path,
               model: tuple[Path, ModelSpec], memory: dict[bool, Any], batch_size: int,
               out: Path) -> dict[str, Any]:
    """One run of the engine: ``streams`` streams of ``frames`` frames in all."""
    path, spec = model
    per_stream = max(frames // streams, 30)
    gated = mode == "gated"
    if source_kind == "memory":
        pictures, fps, size = memory[gated]
        sources: list[Any] = [MemorySource(f"s{i}", pictures, fps, size, per_stream)
                              for i in range(streams)]
        decoder_for: Any = MemoryDecoder
    else:
        sources = [FileSource(clip, f"s{i}") for i in range(streams)]
        scale = ScaleTo.for_input(spec.input)
        decoder_for = lambda s: PyAVDecoder(s.video, threads=1, scale=scale)  # noqa: E731
    options = options_for(mode, batch_size).replace(frame_limit=per_stream)
    backends = host_backends(decoder_for, OnnxRuntimeBackend(path, threads=1), spec)
    metrics = TimedMetrics()
    sink = JsonlSink(out / f"{source_kind}-{mode}-{streams}.jsonl", spec)
    pipeline = wire_pipeline(sources, backends, spec, [sink], metrics, options, batch_size)
    gates = time_gates(pipeline)
    with ThreadClock() as clock:
        close = pipeline.close

        def sampled_close() -> None:  # every thread's CPU read before the stages end them
            clock.sample()
            close()
        pipeline.close = sampled_close  # type: ignore[method-assign]
        cpu0, t0 = time.process_time(), time.perf_counter()
        asyncio.run(pipeline.run())
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    sink.close()
    (out / f"{source_kind}-{mode}-{streams}.jsonl").unlink(missing_ok=True)
    done = sum(sum(metrics.outcomes[s.stream_id].values()) for s in sources)
    parts = _by_part(clock, pipeline)
    parts["metrics (within the above)"] = metrics.seconds
    parts["gate (within the above)"] = gates.seconds
    per_frame = {k: round(v * 1000 / max(done, 1), 4) for k, v in sorted(parts.items())}
    return {"source": source_kind, "mode": mode, "streams": streams, "frames": done,
            "wall_s": round(wall, 3), "fps": round(done / wall, 1),
            "cpu_ms_per_frame": round(cpu * 1000 / max(done, 1), 4),
            "skipped": sum(metrics.outcomes[s.stream_id]["skipped_idle"] for s in sources),
            "by_part_ms": per_frame}


def _by_part(clock: ThreadClock, pipeline: Pipeline) -> dict[str, float]:
    """CPU seconds by part: each thread's, a stage's calls run on the event loop moved from
    the loop to the stage."""
    parts = clock.totals()
    for stage in pipeline.stages:
        parts[stage.name] = parts.get(stage.name, 0.0) + stage.cpu_here_s
        parts["event loop"] -= stage.cpu_here_s
    return parts


def hand_loop_row(clip: Path, spec: ModelSpec, gated: bool) -> dict[str, Any]:
    """The clip decoded as the engine's decoder does it (shrunk to the letterbox; with the
    codec's vectors when gated), one thread, nothing else: CPU ms a frame."""
    with FileSource(clip, "hand") as source:
        decoder = PyAVDecoder(source.video, threads=1, scale=ScaleTo.for_input(spec.input))
        if gated:
            decoder.export_motion(True)
        cpu0, t0, count = time.process_time(), time.perf_counter(), 0
        for packet in source.packets():
            count += len(decoder.decode(packet))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        decoder.close()
    return {"source": "hand loop (decode only)", "mode": "gated" if gated else "detect",
            "streams": 1, "frames": count, "wall_s": round(wall, 3),
            "fps": round(count / wall, 1), "cpu_ms_per_frame": round(cpu * 1000 / count, 4)}


def bench_overhead(console: Console, streams: list[int], frames: int, out: Path,
                   sources: list[str], batch_size: int = BATCH_SIZE,
                   against: tuple[str, Path] | None = None) -> dict[str, Any]:
    """Every (source, mode, streams) row, the hand loop's beside them; prints the table,
    writes OUT/overhead.json. ``against`` (a label and another tree): each row also on that
    code, each in a fresh process, the order alternating (``overhead_row``)."""
    out.mkdir(parents=True, exist_ok=True)
    clip = quiet_clip()
    model = null_model(FOLDER / "null")
    memory = {g: decode_once(clip, model[1], g) for g in (False, True)} \
        if "memory" in sources and against is None else {}
    rows = []
    if "file" in sources:
        rows += [hand_loop_row(clip, model[1], gated) for gated in (False, True)]
    k = 0
    for kind in sources:
        for mode in MODES:
            for count in streams:
                if against is None:
                    made = [engine_row(kind, mode, count, frames, clip, model, memory,
                                       batch_size, out)]
                else:
                    made = _rows_apart(kind, mode, count, frames, clip, FOLDER / "null",
                                       batch_size, against, k)
                    k += 1
                for row in made:
                    console.print(f"{row.get('code', 'this')} {kind} {mode} x{count}: "
                                  f"{row['fps']:.0f} frames/s, "
                                  f"{row['cpu_ms_per_frame']:.3f} CPU ms a frame")
                rows += made
    report = {"clip": str(clip), "null_model": f"{model[1].input.width}x"
              f"{model[1].input.height}", "batch_size": batch_size, "rows": rows}
    _print(console, rows)
    (out / "overhead.json").write_text(json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {out / 'overhead.json'}")
    return report


def _rows_apart(kind: str, mode: str, count: int, frames: int, clip: Path, null: Path,
                batch_size: int, against: tuple[str, Path], k: int) -> list[dict[str, Any]]:
    """One row on this code and on ``against``'s (the null model in ``null``), each in a
    fresh process, this code first on even ``k``."""
    from app.bench import overhead_row
    from app.bench.service import run_in_tree

    args = [kind, mode, str(count), str(frames), str(batch_size), str(clip.resolve()),
            str(null.resolve())]
    codes: list[tuple[str, Path | None]] = [("this", None), against]
    if k % 2:
        codes.reverse()
    return [run_in_tree(Path(overhead_row.__file__), args, tree, 600) | {"code": label}
            for label, tree in codes]


def _print(console: Console, rows: list[dict[str, Any]]) -> None:
    parts = sorted({p for r in rows for p in r.get("by_part_ms", {})})
    table = Table(title="The engine's own cost (null detector): CPU ms a frame")
    for column in ("code", "source", "mode", "streams", "frames/s", "CPU ms", *parts):
        table.add_column(column)
    for r in rows:
        by = r.get("by_part_ms", {})
        table.add_row(r.get("code", "this"), r["source"], r["mode"], str(r["streams"]),
                      f"{r['fps']:.0f}",
                      f"{r['cpu_ms_per_frame']:.3f}",
                      *(f"{by[p]:.3f}" if p in by else "" for p in parts))
    console.print(table)
