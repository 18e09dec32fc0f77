"""The tables ``vidpipe run`` prints after a run: where the time went, and what was dropped."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipelines.metrics import OUTCOMES

DROP_CAUSES = tuple(o for o in OUTCOMES if o not in ("processed", "decode_error"))


def _ms(q: dict[str, float | None]) -> str:
    """'p50 / p95 / p99' in ms, '-' where there were no samples."""
    return " / ".join(_num(q[k]) for k in ("p50", "p95", "p99"))


def _num(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def stage_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Per-stage latency, ms (p50 / p95 / p99)", title_justify="left",
                  box=box.SIMPLE_HEAD,
                  caption="* busiest stage: the bottleneck. busy = work time / wall time "
                          "per thread; wait = time in the stage's input queue")
    for col in ("stage", "threads", "items", "busy", "work", "queue wait"):
        table.add_column(col, justify="left" if col == "stage" else "right", no_wrap=True)
    slowest = max(summary["stages"], key=lambda s: s["busy"], default=None)
    for s in summary["stages"]:
        table.add_row(s["stage"] + (" *" if s is slowest else ""), str(s["threads"]),
                      str(s["items"]), f"{s['busy']:.0%}", _ms(s["work_ms"]), _ms(s["wait_ms"]))
    return table


def stream_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Streams", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="dropped: " + " / ".join(c.removeprefix("dropped_") for c in DROP_CAUSES)
                          + "; dec.err: decode_error; e2e: decode to result written, ms "
                          "(p50 / p95 / p99)")
    for col in ("stream", "frames", "processed", "dropped", "dec.err", "fps", "e2e"):
        table.add_column(col, justify="left" if col == "stream" else "right", no_wrap=True)
    for sid, s in summary["streams"].items():
        o = s["outcomes"]
        dropped = "/".join(str(o.get(c, 0)) for c in DROP_CAUSES)
        table.add_row(sid, str(s["received"]), str(o.get("processed", 0)), dropped,
                      str(o.get("decode_error", 0)), f"{s['fps']:.1f}", _ms(s["latency_ms"]))
    return table


def print_report(console: Console, summary: dict[str, Any]) -> None:
    console.print(stage_table(summary))
    console.print(stream_table(summary))
    sizes = summary["batch_sizes"]
    if sizes:
        hist = ", ".join(f"{k}: {v}" for k, v in sizes.items())
        console.print(f"Inference batches by size: {hist}   wall time {summary['wall_s']:.1f} s")
    for sid, s in summary["streams"].items():
        errors = s["outcomes"].get("decode_error", 0)
        if errors:
            console.print(Text(f"{sid}: {errors} of {s['received']} frames could not be "
                               "decoded (decode_error)", style="yellow"))


def print_shadow(console: Console, shadow: dict[str, Any]) -> None:
    """``--shadow``: the candidate against the run's model, side by side."""
    a = shadow["agreement"]
    candidate_name = f"{shadow['candidate']} ({shadow['candidate_file']})"
    table = Table(title=f"--shadow: the candidate beside the model, on {a['frames']} frames "
                        f"(share {shadow['share']:g})")
    table.add_column("figure")
    table.add_column(f"model: {shadow['current']}", justify="right")
    table.add_column(f"candidate: {candidate_name}", justify="right")
    current, candidate = shadow["detections"]["current"], shadow["detections"]["candidate"]
    table.add_row("frames agreeing (count, IoU >= 0.9, score ± 0.02)", "",
                  f"{a['frame_agreement']} ({a['frames_agreeing']} of {a['frames']})")
    table.add_row("boxes (per frame)", f"{current['boxes']} ({current['boxes_per_frame']})",
                  f"{candidate['boxes']} ({candidate['boxes_per_frame']})")
    table.add_row("scores by tenth", " ".join(map(str, current["score_histogram"])),
                  " ".join(map(str, candidate["score_histogram"])))
    ms = shadow["candidate_ms_per_frame"]
    table.add_row("candidate ms a frame (p50 / p95); CPU ms", "",
                  f"{ms['p50']} / {ms['p95']}; {shadow['candidate_cpu_ms_per_frame']}"
                  if ms else "-")
    console.print(table)
