"""The three measurements of ``vidpipe bench``: the hand loop against vidpipe per model variant,
the live run with a paced camera, and scaling over streams.

Absolute times on a shared machine drift, so variants run interleaved (A B A B ...) within one
process and the tables report medians and ratios.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.alone import StagesAlone, measure_alone
from app.bench.handloop import measure_hand_loop
from app.bench.measure import CORES, LatencySink, Measurement, measure_pipeline
from models.spec import ModelSpec
from pipelines.options import PipelineOptions
from pipelines.sources.paced import PacedFileSource


def _median(runs: list[Measurement]) -> Measurement:
    """The run with the median fps (a real run, so its other figures belong together)."""
    ranked = sorted(runs, key=lambda m: m.fps)
    return ranked[len(ranked) // 2]


def _row(m: Measurement) -> dict[str, Any]:
    return {"variant": m.variant, "frames": m.frames, "fps": m.fps,
            "p50_ms": m.latency_ms(0.5), "p99_ms": m.latency_ms(0.99),
            "cpu_util": m.cpu_util, "busy": m.busy, "drops": m.drops, "threads": m.threads}


def compare(clip: Path, variants: dict[str, tuple[Path, ModelSpec]], options: PipelineOptions,
            *, reps: int, frame_limit: int | None,
            progress: Any = None) -> list[dict[str, Any]]:
    """Per model variant: the hand loop (best of 1 thread and all cores) and vidpipe."""
    runs: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    alone: dict[str, list[StagesAlone]] = defaultdict(list)
    thread_counts = sorted({1, CORES})
    options = options.replace(frame_limit=frame_limit)
    for _ in range(reps):
        for label, (path, spec) in variants.items():
            for threads in thread_counts:
                name = f"hand loop, {threads} thread{'s' if threads > 1 else ''}"
                runs[(label, name)].append(measure_hand_loop(
                    name, clip, path, spec, threads=threads, frame_limit=frame_limit))
                _advance(progress)
            ours = measure_pipeline("vidpipe", [clip], path, spec, options)
            runs[(label, "vidpipe")].append(ours)
            plan = ours.threads or {"decode": 1, "infer": CORES}
            alone[label].append(measure_alone(
                clip, path, spec, decode_threads=plan["decode"], infer_threads=plan["infer"],
                batch_size=options.batch_size, frame_limit=frame_limit,
                infer_workers=plan.get("infer_workers", 1)))
            _advance(progress)
    return _compare_rows(variants, runs, alone)


def _compare_rows(variants: dict[str, tuple[Path, ModelSpec]],
                  runs: dict[tuple[str, str], list[Measurement]],
                  alone: dict[str, list[StagesAlone]]) -> list[dict[str, Any]]:
    """Rows of the hand loop (its faster thread setting) and vidpipe per variant; vidpipe's
    carries its stages' rates alone (median over reps) and its efficiency against the slower
    (the median over reps of each rep's fps over the stages alone measured after it)."""
    rows = []
    baseline_fp32 = None
    for label in variants:
        hands = {k: _median(runs[(lb, k)]) for (lb, k) in runs
                 if lb == label and k != "vidpipe"}
        hand_key = max(hands, key=lambda k: hands[k].fps)
        hand = hands[hand_key]
        ours = _median(runs[(label, "vidpipe")])
        baseline_fp32 = baseline_fp32 or hand
        for m, key in ((hand, hand_key), (ours, "vidpipe")):
            row = _row(m) | {"model": label, "reps": len(runs[(label, "vidpipe")]),
                             "fps_each_rep": [r.fps for r in runs[(label, key)]]}
            row["ratio_to_hand_loop"] = m.fps / hand.fps
            row["ratio_to_fp32_hand_loop"] = m.fps / baseline_fp32.fps
            if m is ours and alone.get(label):
                stages = StagesAlone.median(alone[label])
                row["alone"] = stages.as_dict()
                # each rep against the stages alone measured right after it, as the reps
                # themselves are interleaved: the machine's drift cancels within a rep
                each = [r.fps / a.slowest_fps
                        for r, a in zip(runs[(label, "vidpipe")], alone[label], strict=True)]
                row["efficiency_each_rep"] = each
                row["efficiency"] = float(statistics.median(each))
                # the stages share the cores: their CPU time alone, summed, bounds fps too
                row["cpu_ceiling_fps"] = stages.cpu_ceiling_fps(CORES)
                row["efficiency_vs_ceiling"] = m.fps / min(stages.slowest_fps,
                                                           row["cpu_ceiling_fps"])
            rows.append(row)
    return rows


def live(clip: Path, path: Path, spec: ModelSpec, options: PipelineOptions, *,
         duration_s: float, windows: int = 10) -> dict[str, Any]:
    """vidpipe on a camera paced at the clip's frame rate, for ``duration_s``."""
    # one camera: no one to batch with, and every queued frame is latency
    options = options.replace(capacity=1, batch_size=1, batch_timeout_ms=0.0)
    sink = LatencySink()

    def open_paced(p: Path, sid: str) -> PacedFileSource:
        return PacedFileSource(p, sid, duration_s=duration_s, loop=True)

    m = measure_pipeline("vidpipe live", [clip], path, spec, options, open_source=open_paced,
                         sink=sink)
    times = np.array([t for t, _ in sink.samples])
    lat = np.array([lat for _, lat in sink.samples]) * 1000
    edges: list[float] = []
    if times.size:
        edges = np.linspace(times.min(), times.max() + 1e-9, windows + 1).tolist()
    table = []
    for i in range(len(edges) - 1):
        window = lat[(times >= edges[i]) & (times < edges[i + 1])]
        if window.size:
            table.append({"from_s": float(edges[i] - edges[0]), "frames": int(window.size),
                          "p50_ms": float(np.quantile(window, 0.5)),
                          "p99_ms": float(np.quantile(window, 0.99))})
    slope = 0.0
    if len(table) >= 2:
        xs = [w["from_s"] / 60 for w in table]
        slope = float(np.polyfit(xs, [w["p99_ms"] for w in table], 1)[0])
    return _row(m) | {"duration_s": duration_s, "windows": table,
                      "p99_trend_ms_per_min": slope}


def scaling(clip: Path, path: Path, spec: ModelSpec, options: PipelineOptions, *,
            streams: Sequence[int], frame_limit: int | None,
            progress: Any = None) -> list[dict[str, Any]]:
    """Total fps, fps per core and memory per stream for 1..N copies of the clip at once."""
    rows = []
    for n in streams:
        m = measure_pipeline(f"{n} streams", [clip] * n, path, spec,
                             options.replace(frame_limit=frame_limit))
        rows.append(_row(m) | {"streams": n, "fps_per_core": m.fps / CORES,
                               "rss_per_stream_mb": m.peak_rss_delta / n / 2**20})
        _advance(progress)
    return rows


def _advance(progress: Any) -> None:
    if progress is not None:
        progress()
