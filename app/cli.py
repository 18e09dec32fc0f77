"""``vidpipe``: the command line.

    vidpipe run clip.mp4                 detect with the shipped person model, print the figures
    vidpipe run a.mp4 b.mp4 --annotate   several streams at once, batched together
    vidpipe demo                         make the demo clip and run on it
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from app import __version__
from app.bench.cli import bench as run_bench
from app.bench.cli import bench_against, bench_service
from app.bench.cli import profile as run_profile
from app.config import load_config
from app.demo import ensure_demo_clip, score_run
from app.events.config import EventsConfig
from app.events.outputs import check_webhooks
from app.memory import limit_malloc_arenas
from app.model_cli import model as model_commands
from app.progress import RunProgress
from app.report import print_report
from app.runner import run_files
from models.zoo import resolve_model
from pipelines.analytics.config import from_flags
from pipelines.errors import ConfigError, VidpipeError
from pipelines.events.config import ClipSettings
from pipelines.options import PipelineOptions
from pipelines.sources.synthetic import truth_path

# Logs and CI output are read in files: wide enough for the bench table (13 columns).
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
log = logging.getLogger("vidpipe")
cli = typer.Typer(
    name="vidpipe", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="Streaming video analytics: decode -> preprocess -> detect -> postprocess -> sinks, "
         "with every stage measured.",
)

cli.add_typer(model_commands, name="model")

ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="Zoo name (default: ssdlite-person), a folder with card.yaml, or an "
    ".onnx file (its card.yaml beside it, or give --format and --classes).")]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="Output layout of a model without a card: yolov8 ([B,4+C,N]), yolov5 "
    "([B,N,5+C]) or ssd (boxes/scores/classes, NMS inside).")]
ClassesOpt = Annotated[Path | None, typer.Option(
    "--classes", help="Text file of class names, one per line, for a model without a card.")]
InputSizeOpt = Annotated[str | None, typer.Option(
    "--input-size", help="WxH, for a model without a card whose input size is dynamic.")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="cpu (FFmpeg, OpenCV, ONNX Runtime) or cuda[:N] (NVDEC, CV-CUDA or torch, "
    "TensorRT or torch; each falls back to the next, logged once; without CUDA the CPU "
    "pipeline runs, with a warning).")]
OutOpt = Annotated[Path, typer.Option(
    "--out", "-o", help="Folder for detections.jsonl, summary.json and annotated videos.")]
DecodeOpt = Annotated[str, typer.Option(
    "--decode", help="Decoder: auto (the device's best), pyav (FFmpeg on the CPU) or nvdec.")]
PreprocessOpt = Annotated[str, typer.Option(
    "--preprocess", help="Preprocessor: auto, opencv (CPU), cvcuda or torch (GPU).")]
RuntimeOpt = Annotated[str, typer.Option(
    "--runtime", help="Inference runtime: auto, onnxruntime or openvino (CPU; auto takes "
    "OpenVINO where it is installed, measured faster and agreeing with ONNX Runtime), "
    "openvino-bf16 (OpenVINO in bfloat16: faster on AMX CPUs, but not the model's own "
    "arithmetic: check it with vidpipe model check --runtime openvino-bf16), tensorrt or "
    "torch (GPU).")]
BatchOpt = Annotated[int, typer.Option(
    "--batch-size", "-b", help="Most frames per inference call, taken across all streams.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--batch-timeout-ms", help="Longest wait for a batch to fill after its first frame.")]
InferThreadsOpt = Annotated[int | None, typer.Option(
    "--infer-threads", help="ONNX Runtime threads of one inference call at a time (default: "
    "chosen from the measured cost of decoding vs inference, as two calls at once where the "
    "threads split evenly; logged).")]
DecodeThreadsOpt = Annotated[int | None, typer.Option(
    "--decode-threads", help="FFmpeg threads per stream (default: 1, or cores / files when "
    "decoding a file on one thread costs over twice inference's time for its frames; "
    "0 = FFmpeg's choice).")]


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(console=console, show_path=False)], force=True)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _parse_size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        _fail(f"--input-size must look like 640x640, got {text!r}")
    return w, h


@cli.command()
def run(
    sources: Annotated[list[str], typer.Argument(
        metavar="SOURCES...", help="Video files and camera URLs (rtsp://[user:pass@]host[:port]"
        "/path); all run at once, batched together.")],
    model: ModelOpt = None, format: FormatOpt = None, classes: ClassesOpt = None,
    input_size: InputSizeOpt = None, device: DeviceOpt = "cpu", out: OutOpt = Path("out"),
    batch_size: BatchOpt = 4, batch_timeout_ms: TimeoutOpt = 10.0,
    annotate: Annotated[bool, typer.Option(
        "--annotate", help="Also write annotated.mp4 (boxes drawn), one per stream.")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve Prometheus metrics on 127.0.0.1:PORT while running.")] = None,
    live: Annotated[bool, typer.Option(
        "--live", help="Play files as cameras: paced at their frame rate, newest frame first "
        "(a detector slower than the clip drops frames, counted), to test a camera setup.")]
    = False,
    max_lag_ms: Annotated[float, typer.Option(
        "--max-lag-ms", min=1.0, help="Cameras: a stream whose decoding falls this far behind "
        "skips to the next key frame (the frames skipped count as dropped_stale), so that its "
        "latency stays bounded when there are more cameras than the cores can decode.")]
    = 250.0,
    infer_threads: InferThreadsOpt = None,
    decode_threads: DecodeThreadsOpt = None,
    decode: DecodeOpt = "auto", preprocess: PreprocessOpt = "auto", runtime: RuntimeOpt = "auto",
    ffmpeg_resize: Annotated[bool, typer.Option(
        "--ffmpeg-resize", help="CPU: shrink pictures to the model's size in FFmpeg's scaler, "
        "in the same pass as the colour conversion, instead of with the card's OpenCV filter. "
        "Faster, but FFmpeg's filters are not OpenCV's: the model sees other pixels and may "
        "find other boxes; measure it first with `vidpipe model check MODEL --video CLIP "
        "--ffmpeg-resize`. No effect with --annotate (full pictures are decoded).")] = False,
    track: Annotated[str | None, typer.Option(
        "--track", metavar="TRACKER", help="Track objects across frames: bytetrack, botsort, "
        "ocsort or sort (Roboflow's trackers). Each detection gets a track_id (confirmed "
        "tracks only). Implied (bytetrack) by --line, --zone and --detect-every.")] = None,
    line: Annotated[list[str] | None, typer.Option(
        "--line", metavar="NAME=x1,y1,x2,y2", help="A counting line in source pixels "
        "(repeatable). 'in' is a crossing from the right-hand side of the line walked from "
        "(x1,y1) to (x2,y2) to its left-hand side; counts in summary.json, crossings in "
        "events.jsonl.")] = None,
    zone: Annotated[list[str] | None, typer.Option(
        "--zone", metavar="NAME=x1,y1,x2,y2,x3,y3[,...]", help="A polygon zone in source "
        "pixels (repeatable): occupancy, entries, exits and dwell time per track.")] = None,
    detect_every: Annotated[int, typer.Option(
        "--detect-every", min=1, max=30, help="Run the detector on one frame in N; the "
        "tracker gives the boxes of the others (their lines say \"predicted\": true). "
        "Cuts inference N-fold; docs/BENCHMARKS.md measures what it costs in accuracy.")] = 1,
    events_mqtt: Annotated[str | None, typer.Option(
        "--events-mqtt", metavar="URL", help="With tracking: publish events (vidpipe.event/1) "
        "to an MQTT broker, mqtt[s]://[user:pass@]host[:port]/prefix, QoS 1, on "
        "PREFIX/STREAM/events, counts retained on PREFIX/STREAM/state.")] = None,
    events_webhook: Annotated[list[str] | None, typer.Option(
        "--events-webhook", metavar="URL", help="With tracking: POST each event to this "
        "http(s) URL (repeatable), signed with VIDPIPE_WEBHOOK_SECRET (X-Vidpipe-Signature), "
        "retried with backoff; what cannot be delivered goes to OUT/events/dead-letter.jsonl.")]
    = None,
    snapshots: Annotated[bool, typer.Option(
        "--snapshots", help="With tracking: each object's best picture (score x area), clean "
        "and with its box, in OUT/events/STREAM/ when it ends (decodes full pictures).")]
    = False,
    clips: Annotated[bool, typer.Option(
        "--clips", help="With tracking: each object's clip, 5 s before it appeared to 5 s after "
        "it was last seen, copied from the stream's packets (no re-encoding), in "
        "OUT/events/STREAM/.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")]
    = "info",
) -> None:
    """Detect objects in every frame of one or more videos or cameras and report where the
    time went; with --track, follow them, count them on lines and in zones, and say what
    they do as events (new, update, end, line_cross, zone_enter, ...).

    Writes OUT/detections.jsonl (one line per frame: stream, frame, pts, detections),
    OUT/summary.json and, with analytics, OUT/events.jsonl; exits 2 with one line on bad
    input (missing file, not a video, a camera that cannot be reached, wrong model).
    Cameras run until Ctrl-C (or SIGTERM), which finishes the frames already read and writes
    the outputs; a camera lost mid-run reconnects. A file stopped that way before its end
    exits 130, and summary.json says which and where.
    """
    limit_malloc_arenas()  # a camera run lasts: see app/memory.py
    _configure_logging(log_level)
    try:
        options = PipelineOptions(device=device, batch_size=batch_size,
                                  batch_timeout_ms=batch_timeout_ms, infer_threads=infer_threads,
                                  decode_threads=decode_threads, decode=decode,
                                  preprocess=preprocess, runtime=runtime, max_lag_ms=max_lag_ms,
                                  ffmpeg_resize=ffmpeg_resize,
                                  analytics=from_flags(track, line or [], zone or [],
                                                       detect_every))
        model_path, spec = resolve_model(model, output_format=format, classes=classes,
                                         input_size=_parse_size(input_size))
        log.info("model %s (%s, %d classes) from %s", spec.name, spec.output.format,
                 spec.num_classes, model_path)
        events = EventsConfig(mqtt=events_mqtt, webhooks=events_webhook or [],
                              snapshots=snapshots, clips=ClipSettings() if clips else None)
        if (events.mqtt or events.webhooks or snapshots or clips) and options.analytics is None:
            raise ConfigError("--events-mqtt, --events-webhook, --snapshots and --clips are "
                              "about tracked objects: add --track (or --line, --zone)")
        check_webhooks(events.webhooks, None, allow_idn=False)
        with RunProgress(console) as progress:
            metrics, _, outputs = run_files(sources, model_path, spec, out, options,
                                            annotate=annotate, metrics_port=metrics_port,
                                            live=live, on_progress=progress.update,
                                            events=events)
    except VidpipeError as e:
        _fail(str(e))
    print_report(console, json.loads(outputs.summary.read_text()))
    written = [outputs.detections, outputs.summary, *outputs.annotated]
    for path in written + ([outputs.events] if outputs.events else []):
        console.print(f"wrote {path}")
    if outputs.unfinished:
        left = ", ".join(f"{sid} after {n} of {total} frames"
                         for sid, n, total in outputs.unfinished)
        console.print(f"[yellow]interrupted:[/yellow] {left}; the outputs hold the frames "
                      "processed until then (summary.json: \"interrupted\")", highlight=False)
        raise typer.Exit(130)


@cli.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the clip and the run.")]
    = Path("build/demo"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of the generated clip.")] = 0,
    hard: Annotated[bool, typer.Option(
        "--hard", help="The harder clip instead (clip-hard.mp4): turned, zoomed photographs "
        "with photographs inset on them, people smaller in some shots.")] = False,
) -> None:
    """Make the 20 s demo clip (people and no people, from scikit-image's photos), run the
    shipped person detector on it, and score every frame against the clip's ground truth."""
    _configure_logging("info")
    name = "clip-hard.mp4" if hard else "clip.mp4"
    clip = ensure_demo_clip(out / name, console, seed, hard=hard)
    try:
        model_path, spec = resolve_model(None)
        with RunProgress(console) as progress:
            _, _, outputs = run_files([clip], model_path, spec,
                                      out / ("run-hard" if hard else "run"), PipelineOptions(),
                                      annotate=True, on_progress=progress.update)
    except VidpipeError as e:
        _fail(str(e))
    print_report(console, json.loads(outputs.summary.read_text()))
    score = score_run(outputs.detections, clip)
    console.print(
        f"person frames with a person >= 0.5: {score.person_hits}/{score.person_frames} "
        f"({score.hit_rate:.1%}); frames without one that got one: "
        f"{score.false_hits}/{score.empty_frames} ({score.false_rate:.1%})")
    console.print(f"clip: {clip} (truth: {truth_path(clip)})")
    written = [outputs.detections, outputs.summary, *outputs.annotated]
    for path in written + ([outputs.events] if outputs.events else []):
        console.print(f"wrote {path}")


@cli.command()
def bench(
    quick: Annotated[bool, typer.Option("--quick", help="One short repetition (about a "
                                        "minute), still printing the ratio table.")] = False,
    source: Annotated[Path | None, typer.Option(
        "--source", help="Clip to measure on (default: the 720p demo clip).")] = None,
    model: ModelOpt = None,
    streams: Annotated[str, typer.Option("--streams", help="Stream counts for the scaling "
                                         "table.")] = "1,2,4,8",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Interleaved repetitions.")] = 3,
    frames: Annotated[int | None, typer.Option(
        "--frames", min=1, help="Frames per run (default: the whole clip).")] = None,
    live_seconds: Annotated[float, typer.Option(
        "--live", help="Also run live: a camera paced at 30 fps for this many seconds.")] = 0.0,
    service: Annotated[str | None, typer.Option(
        "--service", help="Instead: the service with this many file streams played as 30 fps "
        "cameras (e.g. 1,2,4,8), each count in a fresh process: fps, latency, drops, RSS.")]
    = None,
    seconds: Annotated[float, typer.Option(
        "--seconds", min=1.0, help="With --service: how long each count is measured.")] = 10.0,
    against: Annotated[str | None, typer.Option(
        "--against", help="Compare with this commit (a git worktree of it), alternating, in "
        "one run: `vidpipe run`'s default pipeline on both, per variant (--reps runs each, "
        "--frames each), or with --service each stream count on both (e.g. --against "
        "00f3544).")]
    = None,
    tracking: Annotated[bool, typer.Option(
        "--tracking", help="Instead: tracking on held-out tracking clips (build/tracking, made "
        "once): fps, HOTA, IDF1, mAP@0.5 per model (shapes FP32 and pruned INT8) and "
        "--detect-every N, the tracker's cost, and the hand-written FP32 loop against "
        "vidpipe with pruned INT8 + tracking at the best N.")] = False,
    detect_every: Annotated[str, typer.Option(
        "--detect-every", help="With --tracking: the detection intervals to compare.")]
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
    runtimes: Annotated[bool, typer.Option(
        "--runtimes", help="Instead: ONNX Runtime against OpenVINO (vidpipe[openvino]) for every "
        "variant of each --model (comma-separated; default ssdlite-person,shapes-yolo): the "
        "model alone at 1 and all threads, their detection agreement (vidpipe model check), "
        "and fps end to end of the hand loop, vidpipe --runtime onnxruntime / openvino / auto "
        "and Ultralytics' predict, interleaved.")] = False,
    ultralytics_python: Annotated[Path | None, typer.Option(
        "--ultralytics-python", metavar="PYTHON", help="With --runtimes: an interpreter that "
        "has Ultralytics, to run its predict(stream=True) on models it exported (a peer to "
        "compare with; vidpipe never imports it).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for bench.json.")]
    = Path("build/bench"),
) -> None:
    """Measure, side by side in one process: the hand-written loop (cv2.VideoCapture ->
    letterbox -> ONNX Runtime -> NMS) against the vidpipe pipeline, for every variant of the
    model found (fp32, int8, pruned50, pruned50+int8, ...); then total fps over 1..N
    streams; and, with --live, latency over time on a paced camera. Prints ratios; writes
    OUT/bench.json."""
    _configure_logging("warning")
    try:
        if events:
            from app.bench.events import bench_events

            bench_events(console, reps, out,
                         ensure_demo_clip(Path("build/demo/clip.mp4"), console), events_mqtt)
        elif runtimes:
            from app.bench.cli import bench_runtimes

            bench_runtimes(console, model, source, reps, frames, ultralytics_python, out)
        elif tracking:
            from app.bench.tracking import bench_tracking

            everys = sorted({1, *(int(v) for v in detect_every.split(",") if v.strip())})
            bench_tracking(console, everys, reps, out)
        elif service is not None and workers is not None:
            from app.bench.cli import bench_cluster

            bench_cluster(console, service, workers, source, model, seconds, reps, out)
        elif service is not None:
            bench_service(console, service, source, model, seconds, out, against)
        elif against is not None:
            bench_against(console, against, source, model, reps, frames, out)
        else:
            run_bench(console, quick, source, model, streams, reps, frames, live_seconds, out)
    except VidpipeError as e:
        _fail(str(e))


@cli.command()
def profile(
    sources: Annotated[list[Path], typer.Argument(help="Video files; all run at once.")],
    model: ModelOpt = None,
    seconds: Annotated[float, typer.Option("--seconds", help="How long to run.")] = 10.0,
    batch_size: BatchOpt = 4,
    infer_threads: InferThreadsOpt = None,
    decode_threads: DecodeThreadsOpt = None,
) -> None:
    """Run briefly and name the bottleneck: each stage's busy fraction and time per frame,
    queue occupancy, the ceiling (the slowest stage's rate), the efficiency reached, and what
    to do about it."""
    _configure_logging("warning")
    try:
        run_profile(console, sources, model, seconds, batch_size, infer_threads, decode_threads)
    except VidpipeError as e:
        _fail(str(e))


@cli.command()
def serve(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="service.yaml (streams, model, media_roots, limits); every key "
        "can also come from VIDPIPE_<KEY>.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on "
                                             "(default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default 8080).")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, max=256, help="Run the streams on N worker processes of a local "
        "Ray cluster (pip install 'vidpipe[ray]'); a worker that dies has its streams moved "
        "to the others, and is replaced.")] = None,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", metavar="ADDR", help="Join the Ray cluster at ADDR (ray start "
        "--head ...) and run the streams on its machines: one worker per GPU, or per "
        "cores_per_worker CPUs.")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")]
    = "info",
) -> None:
    """Run the service: REST API for streams, live dashboard at /, Prometheus at /metrics.

    Streams are added and removed at runtime (POST/DELETE /api/streams); those in the config
    start at boot. Set VIDPIPE_API_TOKEN (or VIDPIPE_API_TOKEN_FILE, a file holding it) to
    require a bearer token on every data route. SIGTERM drains the streams and exits."""
    limit_malloc_arenas()  # before any stream's threads: see app/memory.py
    _configure_logging(log_level)
    try:
        cfg = load_config(config)
        cfg = cfg.model_copy(update={k: v for k, v in (("host", host), ("port", port),
                                                       ("workers", workers),
                                                       ("ray_address", ray_address))
                                     if v is not None})
    except VidpipeError as e:
        _fail(str(e))
    if (cfg.workers or cfg.ray_address) and importlib.util.find_spec("ray") is None:
        _fail("--workers and --ray-address run the streams on Ray, which is not installed: "
              "pip install 'vidpipe[ray]'")
    import uvicorn

    from app.api import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(cfg), host=cfg.host, port=cfg.port,
                                           log_config=None, timeout_graceful_shutdown=8))
    log.info("dashboard on http://%s:%d/  (API docs at /docs)", cfg.host, cfg.port)
    server.run()


@cli.command()
def version() -> None:
    """Print vidpipe's version."""
    typer.echo(__version__)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
