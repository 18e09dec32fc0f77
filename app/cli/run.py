"""``vidpipe run`` and ``vidpipe demo``: a pipeline over files and cameras, from the terminal.

The commands parse and check their options, then hand the run to ``app.run.request``, imported
when a command runs: ``vidpipe --help`` never loads the engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.console import configure_logging, console, fail, failing_cleanly, styled
from app.cli.options import (
    DEFAULTS,
    LATENCY_BUDGET_MS,
    BatchOpt,
    ClassesOpt,
    DecodeOpt,
    DecodeThreadsOpt,
    DeviceOpt,
    FormatOpt,
    InferThreadsOpt,
    InputSizeOpt,
    LatencyBudgetOpt,
    LogLevelOpt,
    MaxLagOpt,
    ModelOpt,
    NoCacheOpt,
    OutOpt,
    PrecisionOpt,
    PreprocessOpt,
    RuntimeOpt,
    TimeoutOpt,
)

if TYPE_CHECKING:
    from app.run.outputs import RunOutputs
    from app.run.request import RunRequest

TrackOpt = Annotated[str | None, typer.Option(
    "--track", metavar="TRACKER", help="Track objects across frames: bytetrack, botsort, "
    "ocsort or sort (Roboflow's trackers). Each detection gets a track_id (confirmed "
    "tracks only). Implied (botsort) by --line, --zone, --classify, --detect-every and "
    "--heatmap.")]
LineOpt = Annotated[list[str] | None, typer.Option(
    "--line", metavar="NAME=x1,y1,x2,y2", help="A counting line in source pixels "
    "(repeatable). 'in' is a crossing from the right-hand side of the line walked from "
    "(x1,y1) to (x2,y2) to its left-hand side; counts in summary.json, crossings in "
    "events.jsonl.")]
ZoneOpt = Annotated[list[str] | None, typer.Option(
    "--zone", metavar="NAME=x1,y1,x2,y2,x3,y3[,...]", help="A polygon zone in source "
    "pixels (repeatable): occupancy, entries, exits and dwell time per track. A line or "
    "zone followed by ';HEAD=LABEL[,LABEL]' counts only tracks a --classify model said "
    "one of those labels of (e.g. 'gate=0,200,640,200;pattern=striped').")]
ClassifyOpt = Annotated[list[str] | None, typer.Option(
    "--classify", metavar="MODEL[;KEY=VALUE...]", help="A classifier run on the crops of "
    "tracked objects (repeatable): a zoo name (shapes-pattern), a folder with a card, or an "
    "ONNX file; without a card add ';format=imagenet' or ';format=ultralytics-cls' and "
    "';classes=FILE'. Once when a track is confirmed, again when its picture gets better "
    "(';reclassify_s=2', ';better=0.25'); ';objects=LABEL,...' limits it to the "
    "detector's classes named. Answers go on each detection as \"attributes\". Implies "
    "--track.")]
DetectEveryOpt = Annotated[int, typer.Option(
    "--detect-every", min=1, max=30, help="Run the detector on one frame in N; the tracker "
    "gives the boxes of the others (their lines say \"predicted\": true). Cuts inference "
    "N-fold; docs/BENCHMARKS.md measures what it costs in accuracy.")]
DetectFpsOpt = Annotated[float | None, typer.Option(
    "--detect-fps", min=0.1, max=240, help="Run the detector on about F frames a second, "
    "picked by the stream's own clock (a camera whose rate wanders keeps F); the tracker "
    "gives the boxes of the others, as with --detect-every (not both).")]
MotionOpt = Annotated[str, typer.Option(
    "--motion", metavar="MODE", help="Motion-gated detection: off (the default: the model "
    "sees every frame it is given), vectors (the codec's motion vectors, nearly free), pixels "
    "(a small grey picture against its background) or auto (vectors where the codec gives "
    "them). A frame with nothing moving and no object seen lately skips the model: its line "
    "says \"skipped\": \"idle\", counted as skipped_idle. Implies --track.")]
HeartbeatOpt = Annotated[float, typer.Option(
    "--motion-heartbeat", metavar="SECONDS", min=0.1, max=3600, help="With --motion: the "
    "model still sees one frame this often, so an object that arrived without moving is "
    "found.")]
MaskOpt = Annotated[list[str] | None, typer.Option(
    "--mask", metavar="NAME=x1,y1,x2,y2,x3,y3[,...]", help="With --motion: a polygon in "
    "source pixels whose movement (a clock, trees) does not wake the model (repeatable). "
    "The model still sees the whole picture.")]
RecordOpt = Annotated[list[str] | None, typer.Option(
    "--record", metavar="URL", help="With --clips: the recorded input of the source in the "
    "same place (repeatable, in the sources' order): its main stream, copied into the clips "
    "and never decoded, while the source given (its sub-stream) is the one detected. For "
    "cameras, or files played as cameras (--live).")]
MqttOpt = Annotated[str | None, typer.Option(
    "--events-mqtt", metavar="URL", help="With tracking: publish events (vidpipe.event/1) to "
    "an MQTT broker, mqtt[s]://[user:pass@]host[:port]/prefix, QoS 1, on PREFIX/STREAM/events, "
    "counts retained on PREFIX/STREAM/state.")]
WebhookOpt = Annotated[list[str] | None, typer.Option(
    "--events-webhook", metavar="URL", help="With tracking: POST each event to this http(s) "
    "URL (repeatable), signed with VIDPIPE_WEBHOOK_SECRET (X-Vidpipe-Signature), retried with "
    "backoff; what cannot be delivered goes to OUT/events/dead-letter.jsonl.")]
SnapshotsOpt = Annotated[bool, typer.Option(
    "--snapshots", help="With tracking: each object's best picture (score x area), clean and "
    "with its box, in OUT/events/STREAM/ when it ends (decodes full pictures).")]
ClipsOpt = Annotated[bool, typer.Option(
    "--clips", help="With tracking: each object's clip, 5 s before it appeared to 5 s after it "
    "was last seen, copied from the stream's packets (no re-encoding), in OUT/events/STREAM/.")]


def parse_size(text: str | None) -> tuple[int, int] | None:
    """``--input-size WxH`` as (width, height)."""
    if text is None:
        return None
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        fail(f"--input-size must look like 640x640, got {text!r}")
    return w, h


def run(
    sources: Annotated[list[str], typer.Argument(
        metavar="SOURCES...", help="Video files and camera URLs (rtsp://[user:pass@]host[:port]"
        "/path); all run at once, batched together.")],
    model: ModelOpt = None, format: FormatOpt = None, classes: ClassesOpt = None,
    input_size: InputSizeOpt = None, device: DeviceOpt = DEFAULTS.device,
    out: OutOpt = Path("out"), batch_size: BatchOpt = DEFAULTS.batch_size,
    batch_timeout_ms: TimeoutOpt = DEFAULTS.batch_timeout_ms,
    latency_budget_ms: LatencyBudgetOpt = LATENCY_BUDGET_MS,
    annotate: Annotated[bool, typer.Option(
        "--annotate", help="Also write annotated.mp4 (boxes drawn), one per stream.")] = False,
    heatmap: Annotated[bool, typer.Option(
        "--heatmap", help="Also write heatmap.png (one per stream): where tracked objects "
        "were, frames spent per 8-pixel cell, over the file's first picture. Implies "
        "--track.")] = False,
    shadow: Annotated[str | None, typer.Option(
        "--shadow", metavar="MODEL", help="A candidate model (a zoo name, folder or ONNX "
        "with its card) run beside --model on the same frames, and compared: frame "
        "agreement (as `vidpipe model check` measures it), boxes and scores side by side, "
        "its time per frame; in summary.json (\"shadow\") and printed. The outputs stay "
        "--model's.")] = None,
    shadow_share: Annotated[float, typer.Option(
        "--shadow-share", min=0.01, max=1.0, help="With --shadow: the share of the frames "
        "the candidate sees (every Nth of each stream).")] = 1.0,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve Prometheus metrics on 127.0.0.1:PORT while running.")] = None,
    live: Annotated[bool, typer.Option(
        "--live", help="Play files as cameras: paced at their frame rate, newest frame first "
        "(a detector slower than the clip drops frames, counted), to test a camera setup.")]
    = False,
    max_lag_ms: MaxLagOpt = DEFAULTS.max_lag_ms,
    infer_threads: InferThreadsOpt = None, decode_threads: DecodeThreadsOpt = None,
    decode: DecodeOpt = DEFAULTS.decode, preprocess: PreprocessOpt = DEFAULTS.preprocess,
    runtime: RuntimeOpt = DEFAULTS.runtime, precision: PrecisionOpt = DEFAULTS.precision,
    ffmpeg_resize: Annotated[bool, typer.Option(
        "--ffmpeg-resize", help="CPU: shrink pictures to the model's size in FFmpeg's scaler, "
        "in the same pass as the colour conversion, instead of with the card's OpenCV filter. "
        "Faster, but FFmpeg's filters are not OpenCV's: the model sees other pixels and may "
        "find other boxes; measure it first with `vidpipe model check MODEL --video CLIP "
        "--ffmpeg-resize`. No effect with --annotate (full pictures are decoded).")] = False,
    no_cache: NoCacheOpt = False,
    track: TrackOpt = None, line: LineOpt = None, zone: ZoneOpt = None,
    classify: ClassifyOpt = None, detect_every: DetectEveryOpt = 1, detect_fps: DetectFpsOpt = None,
    motion: MotionOpt = "off", motion_heartbeat: HeartbeatOpt = 10.0, mask: MaskOpt = None,
    record: RecordOpt = None,
    every_line: Annotated[bool, typer.Option(
        "--every-line", help="With --motion: a line in detections.jsonl for every frame the "
        "gate skipped. By default a quiet stretch of them (up to a second) is one line, the "
        "stretch's last, with \"skipped_run\": {frame, pts, frames} (the first frame's index "
        "and pts, how many); `vidpipe replay` reads both.")] = False,
    events_mqtt: MqttOpt = None, events_webhook: WebhookOpt = None,
    snapshots: SnapshotsOpt = False, clips: ClipsOpt = False,
    log_level: LogLevelOpt = "info",
) -> None:
    """Detect objects in every frame of one or more videos or cameras and report where the
    time went; with --track, follow them, count them on lines and in zones, and say what
    they do as events (new, update, end, line_cross, zone_enter, ...).

    Writes OUT/detections.jsonl (one line per frame: stream, frame, pts, detections; with
    --motion, one for a quiet stretch of skipped frames),
    OUT/summary.json and, with analytics, OUT/events.jsonl; exits 2 with one line on bad
    input (missing file, not a video, a camera that cannot be reached, wrong model).
    Cameras run until Ctrl-C (or SIGTERM), which finishes the frames already read and writes
    the outputs; a camera lost mid-run reconnects. A file stopped that way before its end
    exits 130, and summary.json says which and where.
    """
    from app.malloc import limit_malloc_arenas

    limit_malloc_arenas()  # a camera run lasts: see app/malloc.py
    configure_logging(log_level)
    with failing_cleanly():
        from app.run.request import RunRequest

        request = RunRequest(
            sources=sources, model=model, output_format=format, classes=classes,
            input_size=parse_size(input_size), out=out, annotate=annotate,
            metrics_port=metrics_port, live=live,
            settings=dict(device=device, batch_size=batch_size,
                          batch_timeout_ms=batch_timeout_ms,
                          latency_budget_ms=latency_budget_ms or None,
                          infer_threads=infer_threads,
                          decode_threads=decode_threads, decode=decode, preprocess=preprocess,
                          runtime=runtime, precision=precision, max_lag_ms=max_lag_ms,
                          plan_cache=not no_cache),
            ffmpeg_resize=ffmpeg_resize, track=track, lines=line or [], zones=zone or [],
            classify=classify or [],
            detect_every=detect_every, detect_fps=detect_fps, motion=motion,
            motion_heartbeat_s=motion_heartbeat, masks=mask or [], records=record or [],
            events_mqtt=events_mqtt,
            events_webhooks=events_webhook or [], snapshots=snapshots, clips=clips,
            heatmap=heatmap, shadow=shadow, shadow_share=shadow_share,
            every_line=every_line)
        outputs = _with_progress(request)
    _print_outputs(outputs)
    if outputs.unfinished:
        left = ", ".join(f"{sid} after {n} of {total} frames"
                         for sid, n, total in outputs.unfinished)
        console.print(styled(("interrupted:", "yellow"), f" {left}; the outputs hold the "
                             "frames processed until then (summary.json: \"interrupted\")"),
                      highlight=False)
        raise typer.Exit(130)


def _with_progress(request: RunRequest) -> RunOutputs:
    from app.cli.progress import RunProgress
    from app.run.request import run_request

    with RunProgress(console) as progress:
        return run_request(request, on_progress=progress.update)


def _print_outputs(outputs: RunOutputs) -> None:
    from app.cli.report import print_report, print_shadow

    print_report(console, json.loads(outputs.summary.read_text()))
    if outputs.shadow is not None:
        print_shadow(console, outputs.shadow)
    written = [outputs.detections, outputs.summary, *outputs.annotated, *outputs.heatmaps]
    for path in written + ([outputs.events] if outputs.events else []):
        console.print(f"wrote {path}")


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
    configure_logging("info")
    from app.run.demo import ensure_demo_clip, score_run
    from app.run.request import RunRequest
    from pipelines.synthetic.truth import truth_path

    name = "clip-hard.mp4" if hard else "clip.mp4"
    clip = ensure_demo_clip(out / name, console, seed, hard=hard)
    with failing_cleanly():
        outputs = _with_progress(RunRequest(sources=[str(clip)], annotate=True,
                                            out=out / ("run-hard" if hard else "run")))
    _print_outputs(outputs)
    score = score_run(outputs.detections, clip)
    console.print(
        f"person frames with a person >= 0.5: {score.person_hits}/{score.person_frames} "
        f"({score.hit_rate:.1%}); frames without one that got one: "
        f"{score.false_hits}/{score.empty_frames} ({score.false_rate:.1%})")
    console.print(f"clip: {clip} (truth: {truth_path(clip)})")
