"""``vidpipe bench --motion``: what motion-gated detection saves and what it costs, in one run.

On quiet cameras made for it (``pipelines.synthetic.quiet``: a still picture with sensor
noise, a slow change of light and a clock overlay, masked; visitors about 20 % of the time):

- the cost per frame of measuring motion: decoding with and without the codec's vectors
  exported, and each meter's time, at the sub-stream's 640x360 and the main stream's 1280x720;
- on the clip with visitors, each mode against ``motion: off``: the frames whose boxes differ
  (the goal: none), the frames skipped, and the frames skipped while a visitor was a quarter
  or more in the picture (the goal: none);
- a camera with nothing moving, played live for ``seconds``: the process's CPU (a share of
  one core) and the detector's frames, per mode, with the bitrate capped as a camera caps
  it and uncapped (x264 then spends 4x the bits on sensor noise, and decoding costs 2x);
- what skipping non-reference frames while idle would save: the frames and decoding time
  with FFmpeg's ``skip_frame=NONREF``, on a camera-like stream and on the demo clip (which
  has B-frames).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import av
from rich.console import Console
from rich.table import Table

from app.run.request import RunRequest, run_request
from pipelines.decode.motion import MotionMeter
from pipelines.decode.pyav import PyAVDecoder
from pipelines.sinks.quiet import frame_records
from pipelines.synthetic.quiet import Visit, distractor_masks, make_quiet_clip, mask_flags

MODES = ("off", "vectors", "pixels")
FOLDER = Path("build/motion")


def clips(console: Console, seconds: float) -> dict[str, Path]:
    """The bench's quiet cameras, made once: with visitors, without (also uncapped), and a
    720p one."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    still = dict(seconds=seconds, seed=2, active=0.0)
    wanted: dict[str, dict[str, Any]] = {
        "visits": dict(seconds=60.0, seed=1), "still": still,
        "still-uncapped": dict(still, capped=False),
        "main": dict(seconds=10.0, seed=1, size=(1280, 720), fps=30)}
    made = {}
    for name, how in wanted.items():
        tag = "cap" if how.get("capped", True) else "crf"  # the bitrate capped, or x264's
        path = FOLDER / f"{name}-{int(how['seconds'])}s-{tag}.mp4"
        if not path.exists():
            console.print(f"making {path} ...")
            make_quiet_clip(path, **how)
        made[name] = path
    return made


def _truth(clip: Path) -> dict[str, Any]:
    return json.loads(clip.with_suffix(".truth.json").read_text())


def _masks(clip: Path) -> list[str]:
    return mask_flags(_truth(clip))


def measure_cost(clip: Path) -> dict[str, Any]:
    """Milliseconds per frame: decoding, decoding with vectors, each meter."""
    truth = _truth(clip)
    masks = distractor_masks(truth)
    out: dict[str, Any] = {"size": f"{truth['width']}x{truth['height']}"}
    for mode in ("off", "vectors", "pixels"):
        meter = None if mode == "off" else MotionMeter(mode, lambda: masks, "bench")
        decode_s = measure_s = 0.0
        frames = 0
        with av.open(str(clip)) as container:
            decoder = PyAVDecoder(container.streams.video[0], threads=1, lazy=True)
            if meter is not None:
                meter.prepare(decoder)
            for packet in container.demux(video=0):  # its last packet flushes
                began = time.perf_counter()
                pictures = decoder.decode(packet)
                decoded = time.perf_counter()
                if meter is not None:
                    for picture in pictures:
                        meter.measure(picture)
                decode_s += decoded - began
                measure_s += time.perf_counter() - decoded
                frames += len(pictures)
        out[f"decode_ms_{mode}"] = 1e3 * decode_s / frames
        if mode != "off":
            out[f"measure_ms_{mode}"] = 1e3 * measure_s / frames
    return out


def non_reference(clip: Path) -> dict[str, Any]:
    """What skipping the frames no other frame refers to (FFmpeg's ``skip_frame=NONREF``)
    would save while a camera is idle: the frames decoded and the seconds, with and without."""
    row: dict[str, Any] = {"clip": clip.name}
    for skip in ("DEFAULT", "NONREF"):
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            stream.codec_context.skip_frame = skip
            stream.thread_count = 1
            began = time.perf_counter()
            row[f"frames_{skip.lower()}"] = sum(1 for _ in container.decode(stream))
            row[f"seconds_{skip.lower()}"] = time.perf_counter() - began
    return row


def _run(clip: Path, out: Path, mode: str, live: bool) -> tuple[list[dict[str, Any]],
                                                                 dict[str, Any], float, float]:
    """The run's lines, summary, and its wall and CPU seconds from its first frame on (the
    model's loading and the thread plan's probe are the same for every mode)."""
    gating: dict[str, Any] = {} if mode == "off" else {"motion": mode, "masks": _masks(clip)}
    first: list[float] = []

    def progress(done: int, total: int | None) -> None:
        if not first:
            first.extend((time.perf_counter(), time.process_time()))

    run_request(RunRequest(sources=[str(clip)], out=out, track="bytetrack", live=live,
                           **gating), on_progress=progress)
    wall, cpu = time.perf_counter() - first[0], time.process_time() - first[1]
    lines = frame_records((out / "detections.jsonl").read_text().splitlines())
    return lines, json.loads((out / "summary.json").read_text()), wall, cpu


def _shown(visits: list[Visit], t: float, width: int, height: int) -> bool:
    """Whether a visitor is a quarter or more in the picture at ``t``."""
    for visit in visits:
        wide = visit.height * height  # the person photographs are square
        x = visit.centre_x(t, width, wide)
        if x is not None and -wide / 4 < x < width + wide / 4:
            return True
    return False


def agreement(clip: Path, folder: Path) -> list[dict[str, Any]]:
    truth = _truth(clip)
    visits = [Visit(**v) for v in truth["visits"]]
    every, _, wall_off, cpu_off = _run(clip, folder / "off", "off", live=False)
    rows = [{"mode": "off", "skipped": 0, "differ": 0, "skipped_shown": 0, "wall_s": wall_off,
             "cpu_s": cpu_off}]
    for mode in MODES[1:]:
        gated, _, wall, cpu = _run(clip, folder / mode, mode, live=False)
        skipped = [x["frame"] for x in gated if x.get("skipped")]
        rows.append({"mode": mode, "skipped": len(skipped), "wall_s": wall, "cpu_s": cpu,
                     "differ": sum(a["detections"] != b["detections"]
                                   for a, b in zip(every, gated, strict=True)),
                     "skipped_shown": sum(_shown(visits, k / truth["fps"], truth["width"],
                                                 truth["height"]) for k in skipped)})
    for row in rows:
        row["frames"] = truth["frame_count"]
    return rows


def idle_camera(clips: list[Path], folder: Path) -> list[dict[str, Any]]:
    rows = []
    for clip, mode in [(clips[0], m) for m in MODES] + [(clips[1], m) for m in MODES[1:]]:
        truth = _truth(clip)
        _, summary, wall, cpu = _run(clip, folder / f"idle-{clip.stem}-{mode}", mode, live=True)
        outcomes = next(iter(summary["streams"].values()))["outcomes"]
        rows.append({"mode": mode, "wall_s": wall, "cpu_s": cpu, "core_share": cpu / wall,
                     "max_kbps": truth["max_kbps"],
                     "kbps": clip.stat().st_size * 8 / 1000 / truth["seconds"],
                     "detector_frames": outcomes.get("processed", 0),
                     "skipped": outcomes.get("skipped_idle", 0)})
    return rows


def bench_motion(console: Console, seconds: float, out: Path, demo: Path) -> dict[str, Any]:
    """``demo``: a clip encoded with B-frames (the demo's), beside the camera-like scenes."""
    made = clips(console, seconds)
    folder = out / "motion-runs"
    report = {"cost": [measure_cost(made["visits"]), measure_cost(made["main"])],
              "non_reference": [non_reference(made["main"]), non_reference(demo)],
              "agreement": agreement(made["visits"], folder),
              "idle": idle_camera([made["still"], made["still-uncapped"]], folder)}
    _print(console, report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "motion.json").write_text(json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {out / 'motion.json'}")
    return report


def _print(console: Console, report: dict[str, Any]) -> None:
    cost = Table(title="Measuring motion, ms per frame (one decoder thread)")
    for column in ("size", "decode", "decode + vectors", "vectors", "pixels"):
        cost.add_column(column, justify="right")
    for r in report["cost"]:
        cost.add_row(r["size"], f"{r['decode_ms_off']:.2f}", f"{r['decode_ms_vectors']:.2f}",
                     f"{r['measure_ms_vectors']:.3f}", f"{r['measure_ms_pixels']:.3f}")
    same = Table(title="Against motion: off, on a camera with visitors (60 s, 640x360@15)")
    for column in ("mode", "frames", "skipped", "boxes differ", "skipped, visitor in",
                   "CPU s"):
        same.add_column(column, justify="right")
    for r in report["agreement"]:
        same.add_row(r["mode"], str(r["frames"]), str(r["skipped"]), str(r["differ"]),
                     str(r["skipped_shown"]), f"{r['cpu_s']:.1f}")
    idle = Table(title="A camera with nothing moving, played live")
    for column in ("mode", "kbit/s", "seconds", "CPU, of one core", "detector frames",
                   "skipped"):
        idle.add_column(column, justify="right")
    for r in report["idle"]:
        capped = "uncapped" if r["max_kbps"] is None else "capped"
        idle.add_row(r["mode"], f"{r['kbps']:.0f} ({capped})", f"{r['wall_s']:.0f}",
                     f"{r['core_share']:.1%}",
                     str(r["detector_frames"]), str(r["skipped"]))
    skip = Table(title="Skipping non-reference frames (skip_frame=NONREF), one thread")
    for column in ("clip", "frames", "decoded", "seconds", "seconds, skipping"):
        skip.add_column(column, justify="right")
    for r in report["non_reference"]:
        skip.add_row(r["clip"], str(r["frames_default"]), str(r["frames_nonref"]),
                     f"{r['seconds_default']:.2f}", f"{r['seconds_nonref']:.2f}")
    for table in (cost, same, idle, skip):
        console.print(table)
