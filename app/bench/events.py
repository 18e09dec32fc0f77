"""``vidpipe bench --events``: what events cost, side by side in one run.

The packet ring alone, per clip: the time to demux every packet with and without keeping a
copy in the ring (interleaved, median of the repetitions), what the ring holds per second of
video (so, per stream at its default 60 s), and the time to remux a 10 s clip from it. Then
the pipeline end to end on the held-out tracking clips, ByteTrack on the pruned INT8 model:
events.jsonl only, with best snapshots, with clips, and with both and an MQTT broker where one
is given, interleaved over the repetitions.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
from rich.console import Console
from rich.table import Table

from app.bench.tracking import MIDDLE, tracking_clips
from app.outputs.config import EventsConfig
from app.run.runner import run_files
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.events.config import ClipSettings
from pipelines.events.media import write_clip
from pipelines.events.ring import PacketRing
from pipelines.options import PipelineOptions

MODEL = "models/zoo/shapes-yolo/model.pruned50.int8.onnx"
MB = 1024 * 1024


def _demux_s(clip: Path, ring: PacketRing | None) -> tuple[float, int]:
    """Seconds to demux every packet of ``clip`` (keeping each in ``ring``), and packets."""
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        if ring is not None:
            ring.new_segment(stream)
        count = 0
        start = time.perf_counter()
        for packet in container.demux(stream):
            if ring is not None:
                ring.append(packet)
            count += 1
        return time.perf_counter() - start, count


def ring_cost(clip: Path, reps: int) -> dict[str, Any]:
    plain, kept = [], []
    ring = PacketRing(60.0, 1024 * MB)
    for _ in range(reps):
        seconds, packets = _demux_s(clip, None)
        plain.append(seconds)
        ring = PacketRing(60.0, 1024 * MB)
        kept.append(_demux_s(clip, ring)[0])
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        duration = float(stream.frames / stream.average_rate) if stream.average_rate else 0.0
        size = f"{stream.codec_context.width}x{stream.codec_context.height}"
    held = ring.size_bytes
    per_packet_us = 1e6 * (float(np.median(kept)) - float(np.median(plain))) / packets
    newest = ring.newest or 0.0
    cut = ring.cut(max(0.0, newest - 10.0), newest)
    writes = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(reps):
            if cut is not None:
                began = time.perf_counter()
                write_clip(Path(tmp) / f"{k}.mp4", cut)
                writes.append(time.perf_counter() - began)
    frame_s = duration / packets if packets else 1 / 30
    return {"clip": str(clip), "size": size, "packets": packets, "seconds": duration,
            "demux_ms_per_packet": 1e3 * float(np.median(plain)) / packets,
            "ring_us_per_packet": per_packet_us,
            "ring_share_of_a_frame_interval": per_packet_us / 1e6 / frame_s,
            "bytes_per_second": held / duration if duration else 0.0,
            "mb_at_60_s": held / duration * 60 / MB if duration else 0.0,
            "clip_10s_write_ms": 1e3 * float(np.median(writes)) if writes else None,
            "clip_10s_packets": len(cut.packets) if cut else 0}


def _variants(mqtt: str | None) -> dict[str, EventsConfig]:
    clips = ClipSettings(pre_s=2.0, post_s=2.0)
    variants = {"events.jsonl": EventsConfig(snapshots=False),
                "+ snapshots": EventsConfig(snapshots=True),
                "+ clips": EventsConfig(snapshots=False, clips=clips)}
    if mqtt is not None:
        variants["+ snapshots, clips, MQTT"] = EventsConfig(snapshots=True, clips=clips,
                                                           mqtt=mqtt)
    return variants


def pipeline_cost(reps: int, mqtt: str | None) -> list[dict[str, Any]]:
    clips = tracking_clips()
    path, spec = resolve_model(MODEL)
    options = PipelineOptions(analytics=AnalyticsConfig(track=TrackerSettings(),
                                                        lines=[MIDDLE]))
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for name, events in _variants(mqtt).items():
                out = Path(tmp) / f"{rep}-{len(runs)}-{len(runs.get(name, []))}"
                metrics, pipeline, outputs = run_files(clips, path, spec, out, options,
                                                       events=events)
                frames = sum(metrics.outcomes[s]["processed"] for s in metrics.outcomes)
                written = sum(1 for _ in outputs.events.open()) if outputs.events else 0
                media = sum(p.stat().st_size for p in (out / "events").rglob("*")
                            if p.is_file()) if (out / "events").is_dir() else 0
                runs.setdefault(name, []).append(
                    {"fps": frames / (pipeline.wall_s or 1.0), "events": written,
                     "media_mb": media / MB,
                     "sent": {f"{s}/{o}": n for (s, o), n in metrics.events.items()}})
    base = float(np.median([r["fps"] for r in runs["events.jsonl"]]))
    return [{"variant": name, "fps": float(np.median([r["fps"] for r in rs])),
             "fps_runs": [round(r["fps"], 1) for r in rs],
             "ratio": float(np.median([r["fps"] for r in rs])) / base,
             "events": rs[0]["events"], "media_mb": round(rs[0]["media_mb"], 2),
             "outcomes": rs[0]["sent"]} for name, rs in runs.items()]


def bench_events(console: Console, reps: int, out: Path, demo_clip: Path,
                 mqtt: str | None = None) -> dict[str, Any]:
    clips = [demo_clip, tracking_clips()[0]]
    report: dict[str, Any] = {"reps": reps,
                              "ring": [ring_cost(c, max(reps, 5)) for c in clips],
                              "pipeline": pipeline_cost(reps, mqtt)}
    ring = Table(title="The packet ring, per stream (medians)")
    for column in ("clip", "size", "demux ms/packet", "ring µs/packet", "of a frame interval",
                   "MB at 60 s", "10 s clip written, ms"):
        ring.add_column(column, justify="right")
    for r in report["ring"]:
        ring.add_row(Path(r["clip"]).name, r["size"], f"{r['demux_ms_per_packet']:.3f}",
                     f"{r['ring_us_per_packet']:.1f}",
                     f"{r['ring_share_of_a_frame_interval']:.3%}", f"{r['mb_at_60_s']:.1f}",
                     f"{r['clip_10s_write_ms']:.1f}")
    console.print(ring)
    runs = Table(title="Tracked pipeline with its events, side by side (medians)")
    for column in ("outputs", "fps", "x events.jsonl", "events", "media MB"):
        runs.add_column(column, justify="right")
    for r in report["pipeline"]:
        runs.add_row(r["variant"], f"{r['fps']:.1f}", f"{r['ratio']:.2f}", str(r["events"]),
                     f"{r['media_mb']:.1f}")
    console.print(runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out / 'bench.json'}")
    return report
