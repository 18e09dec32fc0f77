"""Tables of ``vidpipe bench`` and ``vidpipe profile``."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < 2 else "right", no_wrap=True)
    return table


def _busy(row: dict[str, Any]) -> str:
    short = {"decode": "d", "preprocess": "p", "infer": "i"}
    return " ".join(f"{short[k]}{v * 100:.0f}" for k, v in row.get("busy", {}).items()
                    if k in short)


def compare_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("Hand loop vs vidpipe (median of reps)",
                   ["model", "runner", "fps", "p50 ms", "p99 ms", "cpu", "busy %", "x hand",
                    "x fp32", "alone f / i", "eff.", "cpu ceil.", "eff. c"])
    table.caption = ("busy %: d decode, p preprocess, i infer; x hand: fps over the hand loop "
                     "with the same model (its faster thread setting); x fp32: over the FP32 "
                     "hand loop; vidpipe Nt: the inference threads it chose (WxNt: W calls "
                     "at once on N threads each; bench.json: why); "
                     "alone f / i: fps of decode+preprocess and of inference each run alone "
                     "with vidpipe's threads; eff.: each rep's fps over the slower of the two "
                     "measured after it, median over reps; cpu "
                     "ceil.: cores x 1000 / (CPU ms per frame of both alone), the most the "
                     "cores could do; eff. c: fps over the lowest of the three")
    for r in rows:
        runner = r["variant"].replace("hand loop, ", "hand ").replace(" threads", "t")
        if r.get("threads"):
            workers = r["threads"].get("infer_workers", 1)
            calls = f"{workers}x" if workers > 1 else ""
            runner += f" {calls}{r['threads']['infer']}t"
        table.add_row(r["model"], runner.replace(" thread", "t"), f"{r['fps']:.1f}",
                      f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}", f"{r['cpu_util']:.0%}", _busy(r),
                      f"{r['ratio_to_hand_loop']:.2f}", f"{r['ratio_to_fp32_hand_loop']:.2f}",
                      f"{r['alone']['prepare_fps']:.0f} / {r['alone']['infer_fps']:.0f}"
                      if "alone" in r else "", f"{r['efficiency']:.2f}" if "efficiency" in r
                      else "", f"{r['cpu_ceiling_fps']:.0f}" if "cpu_ceiling_fps" in r else "",
                      f"{r['efficiency_vs_ceiling']:.2f}" if "efficiency_vs_ceiling" in r
                      else "")
    return table


def scaling_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("Scaling over streams", ["streams", "", "total fps", "fps/core",
                                            "p50 ms", "p99 ms", "MB/stream", "drops"])
    for r in rows:
        table.add_row(str(r["streams"]), "", f"{r['fps']:.1f}", f"{r['fps_per_core']:.1f}",
                      f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}",
                      f"{r['rss_per_stream_mb']:.0f}", str(sum(r["drops"].values())))
    return table


def live_table(result: dict[str, Any]) -> Table:
    table = _table(f"Live, paced at the clip's rate for {result['duration_s']:.0f} s "
                   f"(p99 trend {result['p99_trend_ms_per_min']:+.2f} ms/min; drops "
                   f"{result['drops'] or 'none'})", ["from s", "", "frames", "p50 ms", "p99 ms"])
    for w in result["windows"]:
        table.add_row(f"{w['from_s']:.0f}", "", str(w["frames"]), f"{w['p50_ms']:.1f}",
                      f"{w['p99_ms']:.1f}")
    return table


def profile_table(report: dict[str, Any]) -> Table:
    table = _table(f"Profile: {report['frames']} frames in {report['wall_s']:.1f} s = "
                   f"{report['fps']:.1f} fps; ceiling {report['ceiling_fps']:.1f} fps "
                   f"({report['bottleneck']}); efficiency {report['efficiency']:.0%}",
                   ["stage", "", "threads", "busy", "ms/frame", "ceiling fps"])
    for s in report["stages"]:
        mark = " *" if s["stage"] == report["bottleneck"] else ""
        ceiling = s["ceiling_fps"]
        table.add_row(s["stage"] + mark, "", str(s["threads"]), f"{s['busy']:.0%}",
                      f"{s['ms_per_frame']:.2f}", f"{ceiling:.1f}" if ceiling < 1e4 else "-")
    return table


def service_table(rows: list[dict[str, Any]], cores: int = 1) -> Table:
    table = _table("The service: file streams played as 30 fps cameras",
                   ["code", "streams", "model", "fps", "fps/core", "fps/stream", "p50 ms",
                    "p99 ms", "drops/s", "loads", "RSS MB", "MB/added"])
    table.caption = ("fps: processed, all streams; fps/stream: slowest - fastest; p50/p99: "
                     "capture to result, the worst stream; loads: models loaded; MB/added: "
                     "RSS over the same code's fewest streams, per added stream")
    fewest: dict[str, dict[str, Any]] = {}
    for r in rows:
        code = r.get("code", "this")
        if code not in fewest or r["streams"] < fewest[code]["streams"]:
            fewest[code] = r
    for r in rows:
        base = fewest[r.get("code", "this")]
        added = r["streams"] - base["streams"]
        per_added = f"{(r['rss_mb'] - base['rss_mb']) / added:.0f}" if added else "-"
        table.add_row(r.get("code", "this"), str(r["streams"]), r["model"],
                      f"{r['fps_total']:.1f}", f"{r['fps_total'] / cores:.1f}",
                      f"{r['fps_per_stream_min']:.1f} - {r['fps_per_stream_max']:.1f}",
                      f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}", f"{r['drops_per_s']:.1f}",
                      str(r["model_loads"]), f"{r['rss_mb']:.0f}", per_added)
    return table


def against_table(rows: list[dict[str, Any]]) -> Table:
    other = rows[0]["against"] if rows else "other"
    table = _table(f"vidpipe run's default pipeline: this code against {other} (median fps)",
                   ["model", "", "fps this", f"fps {other}", "x", "CPU ms/frame this",
                    f"CPU ms/frame {other}"])
    for r in rows:
        table.add_row(r["variant"], "", f"{r['fps_this']:.1f}", f"{r['fps_against']:.1f}",
                      f"{r['ratio']:.2f}" if r["ratio"] else "-",
                      f"{r['cpu_ms_per_frame_this']:.2f}", f"{r['cpu_ms_per_frame_against']:.2f}")
    return table


def runtimes_table(rows: list[dict[str, Any]]) -> Table:
    """``vidpipe bench --runtimes``: per model, the model alone under each runtime, their
    agreement, and fps end to end."""
    threads = [a["threads"] for a in rows[0]["alone"]] if rows else []
    kinds = (("onnxruntime", "ort"), ("openvino", "ov"), ("openvino_bf16", "bf16"))
    alone = [f"{short} {t}t" for t in threads for _, short in kinds]
    runners = ["hand loop", "vidpipe onnxruntime", "vidpipe openvino", "vidpipe openvino-bf16",
               "vidpipe auto", "ultralytics"]
    table = _table("ONNX Runtime against OpenVINO (medians)",
                   ["model", "", *alone, "agree auto", "agree ov", "agree bf16",
                    *[r.replace("vidpipe ", "").replace("openvino", "ov") for r in runners],
                    "auto chose", "x hand", "x ultra"])
    table.caption = ("ort/ov/bf16 Nt: the model alone, ms per frame at N threads (bf16: "
                     "OpenVINO in bfloat16); agree: frame agreement of the pipeline on that "
                     "runtime with ONNX Runtime run directly (vidpipe model check --runtime); "
                     "then fps end to end: hand loop (ONNX Runtime by hand), vidpipe run "
                     "--runtime ..., ultralytics: its predict(stream=True) where the model is "
                     "its export; x hand, x ultra: auto's fps over theirs")
    for r in rows:
        e2e = r["end_to_end"]
        cells = [f"{a[f'{key}_ms']:.1f}" for a in r["alone"] for key, _ in kinds]
        agree = [r["check"][k]["frame_agreement"]
                 for k in ("auto", "openvino", "openvino-bf16")]
        fps = [f"{e2e['fps'][k]:.1f}" if k in e2e["fps"] else "-" for k in runners]
        chose = ",".join(sorted(set(e2e["auto_chose"]))) or "-"
        table.add_row(r["model"], "", *cells,
                      *["-" if a is None else f"{a:.3f}" for a in agree], *fps, chose,
                      f"{e2e['auto_over_hand_loop']:.2f}",
                      f"{e2e['auto_over_ultralytics']:.2f}" if "auto_over_ultralytics" in e2e
                      else "-")
    return table
