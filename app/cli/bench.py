"""``vidpipe bench`` and ``vidpipe profile``: the measurements, each mode a function of
``app.bench`` imported when it runs. The mode is chosen here, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.console import configure_logging, console, failing_cleanly
from app.cli.options import (
    DEFAULTS,
    LATENCY_BUDGET_MS,
    BatchOpt,
    DecodeThreadsOpt,
    DeviceOpt,
    InferThreadsOpt,
    LatencyBudgetOpt,
    ModelOpt,
    RuntimeOpt,
)

STREAMS_DEFAULT = "1,2,4,8"


def bench(
    quick: Annotated[bool, typer.Option("--quick", help="One short repetition (about a "
                                        "minute), still printing the ratio table.")] = False,
    source: Annotated[Path | None, typer.Option(
        "--source", help="Clip to measure on (default: the 720p demo clip).")] = None,
    model: ModelOpt = None,
    streams: Annotated[str, typer.Option("--streams", help="Stream counts for the scaling "
                                         "table (with --overhead: 1,8,64,256).")]
    = STREAMS_DEFAULT,
    reps: Annotated[int, typer.Option("--reps", min=1, help="Interleaved repetitions.")] = 3,
    frames: Annotated[int | None, typer.Option(
        "--frames", min=1, help="Frames per run (default: the whole clip; with --overhead: "
        "a row's frames over all its streams, 6000).")] = None,
    live_seconds: Annotated[float, typer.Option(
        "--live", help="Also run live: a camera paced at 30 fps for this many seconds.")] = 0.0,
    service: Annotated[str | None, typer.Option(
        "--service", help="Instead: the service with this many file streams played as 30 fps "
        "cameras (e.g. 1,2,4,8), each count in a fresh process: fps, latency, drops, RSS.")]
    = None,
    service_detect_fps: Annotated[float | None, typer.Option(
        "--detect-fps", min=0.01, help="With --service: each stream's detect_fps (its other "
        "frames held until the next one detected, as a slow detection rate holds them).")]
    = None,
    seconds: Annotated[float, typer.Option(
        "--seconds", min=1.0, help="With --service: how long each count is measured; with "
        "--startup: how long the service runs one stream before its memory is read.")] = 10.0,
    against: Annotated[str | None, typer.Option(
        "--against", help="Compare with this commit (a git worktree of it), alternating, in "
        "one run: `vidpipe run`'s default pipeline on both, per variant (--reps runs each, "
        "--frames each), with --service each stream count on both, or with --overhead "
        "each row on both, each in a fresh process (e.g. --against 00f3544).")]
    = None,
    tracking: Annotated[bool, typer.Option(
        "--tracking", help="Instead: tracking on held-out tracking clips (build/tracking, made "
        "once): fps, HOTA, IDF1, mAP@0.5 per model (shapes FP32 and pruned INT8) and "
        "--detect-every N, the tracker's cost, and the hand-written FP32 loop against "
        "vidpipe with pruned INT8 + tracking at the best N.")] = False,
    counting: Annotated[bool, typer.Option(
        "--counting", help="Instead: counting on the counting set (build/counting, made "
        "once; objects that stop on the line, cross in groups, pass behind bars, up to 3 "
        "sizes a frame): count error, HOTA, IDF1 per detector (shapes FP32, pruned INT8, "
        "FP32 on noisy clips, the truth's boxes), split (tune, held-out) and --detect-every "
        "N; the count error of the same boxes with the truth's identities (what the tracker "
        "costs); then each counting rule replayed on the same boxes.")] = False,
    classify: Annotated[bool, typer.Option(
        "--classify", help="Instead: the shipped classifier (shapes-pattern) on tracked "
        "objects: per-track accuracy on the tracking clips (FP32, INT8), and the pipeline's "
        "fps at ~50 boxes a frame with and without it (--reps runs each).")] = False,
    detect_every: Annotated[str, typer.Option(
        "--detect-every", help="With --tracking or --counting: the detection intervals to "
        "compare.")]
    = "1,2,3",
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="With --service: the same streams in one process and on "
        "this many Ray workers, alternating --reps times: fps and the memory of the whole "
        "process tree.")] = None,
    events: Annotated[bool, typer.Option(
        "--events", help="Instead: what events cost: the packet ring per stream (CPU per "
        "packet, memory at 60 s, a 10 s clip's remux) and the tracked pipeline with "
        "events.jsonl only, snapshots, clips (and MQTT with --events-mqtt), side by side.")]
    = False,
    events_mqtt: Annotated[str | None, typer.Option(
        "--events-mqtt", metavar="URL", help="With --events: a broker for the MQTT variant.")]
    = None,
    capacity: Annotated[bool, typer.Option(
        "--capacity", help="Instead: how many cameras this machine holds per mode (every "
        "frame of a 720p30 main stream; detect_fps 5; + motion gating; + detecting on a "
        "640x360@15 sub-stream), on quiet scenes with known visitors (made once, in "
        "build/capacity), each count of --cameras in a fresh process for --seconds: cores, "
        "frames decoded / detected / skipped, drops, RSS, recall and time to the first box; "
        "a mode holds a count with recall >= 0.98, first box p99 <= 1 s, drops <= 1 %.")]
    = False,
    cameras: Annotated[str, typer.Option(
        "--cameras", help="With --capacity: the camera counts to ramp through (each mode "
        "stops at the first count it does not hold).")] = "1,2,4,8,16,32,64",
    modes: Annotated[str | None, typer.Option(
        "--modes", help="With --capacity: the modes, comma-separated (default: 'every frame', "
        "'detect_fps 5', '+ motion', '+ sub-stream', '+ sub-stream without clips'; also "
        "'+ sub-stream (pixels)': motion from the pixels instead of the codec's vectors).")]
    = None,
    uncapped: Annotated[bool, typer.Option(
        "--uncapped", help="With --capacity: scenes encoded at x264's quality target (crf "
        "20: 2-4x the bits on their sensor noise) instead of capped as a camera's bitrate "
        "is (518 kbit/s for the sub-stream, 4.1 Mbit/s for the main one).")] = False,
    motion: Annotated[bool, typer.Option(
        "--motion", help="Instead: motion-gated detection on quiet cameras (made once, in "
        "build/motion): the cost of measuring motion per frame (vectors, pixels), the boxes "
        "against motion off on a camera with visitors, a still camera played live for "
        "--seconds (its CPU and detector frames per mode), and what skipping non-reference "
        "frames would save.")] = False,
    runtimes: Annotated[bool, typer.Option(
        "--runtimes", help="Instead: ONNX Runtime against OpenVINO (vidpipe[openvino]) for every "
        "variant of each --model (comma-separated; default ssdlite-person,shapes-yolo): the "
        "model alone at 1 and all threads, their detection agreement (vidpipe model check), "
        "and fps end to end of the hand loop, vidpipe --runtime onnxruntime / openvino / auto "
        "and Ultralytics' predict, interleaved.")] = False,
    startup: Annotated[bool, typer.Option(
        "--startup", help="Instead: whole `vidpipe run` processes on --source with --model, "
        "against Ultralytics' predict(stream=True) in its own process (with "
        "--ultralytics-python), interleaved --reps times: time to the first result line and "
        "to the end, with a fresh plan cache and with the one the first run left, and "
        "whether the detections agree.")] = False,
    ultralytics_python: Annotated[Path | None, typer.Option(
        "--ultralytics-python", metavar="PYTHON", help="With --runtimes or --startup: an "
        "interpreter that has Ultralytics, to run its predict(stream=True) on models it "
        "exported (a peer to compare with; vidpipe never imports it).")] = None,
    loadgen: Annotated[str | None, typer.Option(
        "--loadgen", metavar="SCENARIOS", help="Instead: MLPerf's LoadGen (mlcommons-loadgen) "
        "drives vidpipe's detector and the hand-written loop, one at a time, in these "
        "scenarios (comma-separated: SingleStream, MultiStream, Server, Offline) for each "
        "--model (default: ssdlite-person and the four shapes-yolo variants); MLPerf's ten "
        "minutes a run unless --loadgen-seconds or --short. LoadGen's logs under OUT.")]
    = None,
    loadgen_seconds: Annotated[float | None, typer.Option(
        "--loadgen-seconds", min=1.0, help="With --loadgen: each run's least length instead "
        "of MLPerf's 600 s (figures made so say so).")] = None,
    short: Annotated[bool, typer.Option(
        "--short", help="With --loadgen: seconds a run, for CI (LoadGen may call the runs "
        "INVALID for their length).")] = False,
    overhead: Annotated[bool, typer.Option(
        "--overhead", help="Instead: the engine's own cost per frame, the model out of the "
        "way: a null detector (no boxes, made here) behind every stage, over --streams "
        "streams (default 1,8,64,256) of a quiet 640x360@15 clip (made once, in "
        "build/overhead), every frame detected and motion-gated, from memory (decoded once) "
        "and from files beside decoding alone: frames/s and CPU ms a frame by part.")]
    = False,
    runtime: RuntimeOpt = DEFAULTS.runtime,
    device: DeviceOpt = DEFAULTS.device,
    batch_timeout_ms: Annotated[float, typer.Option(
        "--batch-timeout-ms", min=0.0, help="With --loadgen: the engine's longest wait for a "
        "batch to fill after its first frame, on the CPU while every inference thread is "
        "busy (0: run what is waiting at once).")]
    = DEFAULTS.batch_timeout_ms,
    latency_budget_ms: LatencyBudgetOpt = LATENCY_BUDGET_MS,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for bench.json.")]
    = Path("build/bench"),
) -> None:
    """Measure, side by side in one process: the hand-written loop (cv2.VideoCapture ->
    letterbox -> ONNX Runtime -> NMS) against the vidpipe pipeline, for every variant of the
    model found (fp32, int8, pruned50, pruned50+int8, ...); then total fps over 1..N
    streams; and, with --live, latency over time on a paced camera. Prints ratios; writes
    OUT/bench.json."""
    configure_logging("warning")
    with failing_cleanly():
        if _cameras(capacity, motion, cameras, modes, seconds, out, not uncapped):
            pass
        elif overhead:
            _overhead(streams, frames, out, against)
        elif loadgen is not None:
            _loadgen(loadgen, model, dict(runtime=runtime, device=device, batch_timeout_ms=
                     batch_timeout_ms, latency_budget_ms=latency_budget_ms or None), out,
                     loadgen_seconds, short)
        elif events:
            _events(reps, out, events_mqtt)
        elif runtimes:
            from app.bench.commands import bench_runtimes

            bench_runtimes(console, model, source, reps, frames, ultralytics_python, out)
        elif startup:
            from app.bench.startup import bench_startup

            bench_startup(console, model, source, reps, ultralytics_python, out, against, seconds)
        elif _tracked(counting, tracking, classify, detect_every, reps, out):
            pass
        elif service is not None and workers is not None:
            from app.bench.commands import bench_cluster

            bench_cluster(console, service, workers, source, model, seconds, reps, out)
        elif service is not None:
            from app.bench.commands import bench_service

            bench_service(console, service, source, model, seconds, out, against,
                          service_detect_fps)
        elif against is not None:
            from app.bench.commands import bench_against

            bench_against(console, against, source, model, reps, frames, out)
        else:
            from app.bench.commands import bench as bench_pipeline

            bench_pipeline(console, quick, source, model, streams, reps, frames, live_seconds,
                           out)


def _loadgen(scenarios: str, model: str | None, settings: dict[str, Any], out: Path,
             seconds: float | None, short: bool) -> None:
    """``--loadgen``: the scenarios, for each model named (default: the five shipped), the
    engine built with ``settings`` (runtime, device, batch timeout, latency budget)."""
    from app.bench.loadgen.bench import MODELS, bench_loadgen
    from pipelines.options import PipelineOptions

    models = [m for m in model.split(",") if m.strip()] if model else list(MODELS)
    bench_loadgen(console, [s.strip() for s in scenarios.split(",") if s.strip()], models,
                  PipelineOptions(**settings), out, seconds=seconds, short=short)


def _events(reps: int, out: Path, mqtt: str | None) -> None:
    """``--events``: what events cost, on the demo clip."""
    from app.bench.events import bench_events
    from app.run.demo import DEMO_CLIP, ensure_demo_clip

    bench_events(console, reps, out, ensure_demo_clip(DEMO_CLIP, console), mqtt)


def _overhead(streams: str, frames: int | None, out: Path, against: str | None) -> None:
    """``--overhead``: the engine's cost per frame with a null detector; ``--streams`` left at
    its scaling default means the overhead's own counts; ``--against``: each row on that
    commit too (a worktree of it)."""
    from contextlib import ExitStack

    from app.bench.commands import _ints
    from app.bench.overhead import FRAMES, SOURCES, STREAMS, bench_overhead
    from app.bench.service import worktree

    counts = list(STREAMS) if streams == STREAMS_DEFAULT else _ints(streams)
    with ExitStack() as stack:
        other = None if against is None else stack.enter_context(worktree(against))
        bench_overhead(console, counts, frames or FRAMES, out, list(SOURCES), against=other)


def _tracked(counting: bool, tracking: bool, classify: bool, detect_every: str, reps: int,
             out: Path) -> bool:
    """``--counting``, ``--tracking`` or ``--classify``, if asked for: whether one ran."""
    everys = sorted({1, *(int(v) for v in detect_every.split(",") if v.strip())})
    if classify:
        from app.bench.classify import bench_classify

        bench_classify(console, reps, out)
    elif counting:
        from app.bench.counting import RULES, bench_counting

        bench_counting(console, everys, out, RULES)
    elif tracking:
        from app.bench.tracking import bench_tracking

        bench_tracking(console, everys, reps, out)
    return counting or tracking or classify


def _cameras(capacity: bool, motion: bool, cameras: str, modes: str | None, seconds: float,
             out: Path, capped: bool) -> bool:
    """``--capacity`` or ``--motion``, if asked for: whether one ran."""
    if capacity:
        from app.bench.capacity import bench_capacity
        from app.bench.commands import _ints

        bench_capacity(console, _ints(cameras), seconds, modes, out, capped)
    elif motion:
        from app.bench.motion import bench_motion
        from app.run.demo import DEMO_CLIP, ensure_demo_clip

        bench_motion(console, seconds, out, ensure_demo_clip(DEMO_CLIP, console))
    return capacity or motion


def profile(
    sources: Annotated[list[str], typer.Argument(
        help="Video files and camera URLs (rtsp://[user:pass@]host[:port]/path); all run at "
             "once.", metavar="SOURCES...")],
    model: ModelOpt = None,
    seconds: Annotated[float, typer.Option("--seconds", help="How long to run.")] = 10.0,
    batch_size: BatchOpt = DEFAULTS.batch_size,
    infer_threads: InferThreadsOpt = None,
    decode_threads: DecodeThreadsOpt = None,
) -> None:
    """Run briefly and name the bottleneck: each stage's busy fraction and time per frame,
    queue occupancy, the ceiling (the slowest stage's rate), the efficiency reached, and what
    to do about it."""
    configure_logging("warning")
    with failing_cleanly():
        from app.bench.commands import profile as profile_sources

        profile_sources(console, sources, model, seconds, batch_size, infer_threads,
                        decode_threads)
