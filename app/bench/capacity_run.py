"""One count of ``vidpipe bench --capacity``, in a fresh process of its own
(``python -m app.bench.capacity_run MODE N SECONDS SCENES...``), so that its memory is that
count's alone: the service with N cameras (quiet scenes played as cameras, looped, started
apart), run in ``MODE`` with events, snapshots and clips (of the main stream in every mode),
measured for SECONDS after a warm-up, and scored against the scenes' truth (``score``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.service import rss_mb
from app.outputs.config import EventsConfig
from app.service.config import ServiceConfig, StreamConfig
from app.service.service import Service
from pipelines.events.config import ClipSettings
from pipelines.metrics import PipelineMetrics
from pipelines.shared.detector import CALLS_PER_PLANNED, SharedDetector
from pipelines.sinks.quiet import unfold
from pipelines.synthetic.quiet import Visit, distractor_masks
from pipelines.threads import time_infer

WARM_UP_S = 5.0
START_SPREAD_S = 2.0  # cameras start apart over this, as their key frames are
ALONE_CALLS = 25  # calls per worker timing the model alone
SEEN_S = 1.0  # a visitor wholly in the picture this long must be found (recall)
# the ways of running a camera the bench compares: its input, detect_fps, motion
# (and whether it keeps clips: the last mode is the one before without, for its memory)
MODES: dict[str, dict[str, Any]] = {
    "every frame": {"input": "main", "detect_fps": None, "motion": "off", "clips": True},
    "detect_fps 5": {"input": "main", "detect_fps": 5.0, "motion": "off", "clips": True},
    "+ motion": {"input": "main", "detect_fps": 5.0, "motion": "auto", "clips": True},
    "+ sub-stream": {"input": "sub", "detect_fps": 5.0, "motion": "auto", "clips": True},
    "+ sub-stream without clips": {"input": "sub", "detect_fps": 5.0, "motion": "auto",
                               "clips": False},
    # the other meter, for its recall beside the vectors' (run with --modes)
    "+ sub-stream (pixels)": {"input": "sub", "detect_fps": 5.0, "motion": "pixels",
                              "clips": True},
}
DEFAULT_MODES = list(MODES)[:5]


def truth_of(clip: Path) -> dict[str, Any]:
    return json.loads(clip.with_suffix(".truth.json").read_text())


def stream_config(mode: str, scene: dict[str, Path], sid: str) -> StreamConfig:
    """A camera in ``mode``: detected on its main stream, or on its sub-stream with the main
    one recorded for the clips (roles), as every mode records it."""
    how = MODES[mode]
    clip = scene[how["input"]]
    gated = how["motion"] != "off"
    inputs = None if how["input"] == "main" else [
        {"url": str(clip), "roles": ["detect"]}, {"url": str(scene["main"]), "roles": ["record"]}]
    return StreamConfig.model_validate({
        "url": str(clip), "inputs": inputs, "id": sid, "track": "bytetrack",
        "detect_fps": how["detect_fps"], "motion": how["motion"],
        "masks": [m.model_dump() for m in distractor_masks(truth_of(clip))] if gated else []})


def whole_span(visit: Visit, width: int, height: int) -> tuple[float, float] | None:
    """When (clip seconds) the visitor is wholly in the picture, if ever."""
    wide = visit.height * height  # the person photographs are square
    times = np.arange(visit.enter_s, visit.leave_s, 1 / 60)
    inside = [t for t in times if (x := visit.centre_x(float(t), width, wide)) is not None
              and wide / 2 <= x <= width - wide / 2]
    return (float(inside[0]), float(inside[-1])) if inside else None


def score(lines: list[dict[str, Any]], truth: dict[str, Any]) -> tuple[int, int, list[float]]:
    """One camera's results in the window against its scene: the visitors wholly in the
    picture for SEEN_S or more within it, those found by a confirmed track while there, and
    the seconds from each one's entry (wholly in) to its first tracked box. A looped clip's
    time is its timeline's pts modulo the clip's length."""
    if not lines:
        return 0, 0, []
    length = truth["frame_count"] / truth["fps"]
    first, last = lines[0]["pts"], lines[-1]["pts"]
    due = found = 0
    delays: list[float] = []
    for visit in (Visit(**v) for v in truth["visits"]):
        span = whole_span(visit, truth["width"], truth["height"])
        if span is None or span[1] - span[0] < SEEN_S:
            continue
        loop = np.floor(first / length)
        for base in (loop * length, (loop + 1) * length):
            start, end = base + span[0], base + span[1]
            if start < first or end > last:
                continue  # not wholly in the window
            due += 1
            seen = [x["pts"] for x in lines if start <= x["pts"] <= end
                    and any(d.get("track_id") is not None for d in x["detections"])]
            if seen:
                found += 1
                delays.append(seen[0] - start)
    return due, found, delays


async def measure(mode: str, count: int, seconds: float, scenes: list[dict[str, Path]],
                  ) -> dict[str, Any]:
    results = tempfile.TemporaryDirectory(prefix="vidpipe-capacity-")
    roots = sorted({p.parent.resolve() for scene in scenes for p in scene.values()})
    service = Service(ServiceConfig(
        media_roots=roots, results_dir=Path(results.name), state_dir=None, max_streams=1024,
        events=EventsConfig(media_dir=Path(results.name) / "events",  # clips, as cameras keep
                            clips=ClipSettings(pre_s=2.0, post_s=2.0)
                            if MODES[mode]["clips"] else None)), PipelineMetrics())
    ids = [f"cam{k}" for k in range(count)]
    await service.start()
    try:
        for k, sid in enumerate(ids):
            await service.add_stream(stream_config(mode, scenes[k % len(scenes)], sid))
            await asyncio.sleep(START_SPREAD_S / count)
        await asyncio.sleep(WARM_UP_S)
        row = await _window(service.metrics, ids, seconds)
        detector = next(iter(service.detectors.loaded.values()), None)  # None: it failed
    finally:
        await service.aclose()
    row["model_alone_fps"] = None if detector is None else \
        await asyncio.to_thread(model_alone_fps, detector)
    due = found = 0
    delays: list[float] = []
    for k, sid in enumerate(ids):
        path = Path(results.name) / sid / "detections.jsonl"
        lines = [frame for x in map(json.loads, path.read_text().splitlines())
                 if row["began"] <= _unix(x["time"]) <= row["ended"]
                 for frame in unfold(x)] if path.exists() else []  # written in the window
        d, f, late = score(lines, truth_of(scenes[k % len(scenes)][MODES[mode]["input"]]))
        due, found, delays = due + d, found + f, delays + late
    results.cleanup()
    return {"mode": mode, "cameras": count, **row, "visitors": due, "found": found,
            "recall": round(found / due, 3) if due else None,
            "first_p50_s": round(float(np.percentile(delays, 50)), 2) if delays else None,
            "first_p99_s": round(float(np.percentile(delays, 99)), 2) if delays else None}


def model_alone_fps(detector: SharedDetector) -> float | None:
    """Frames a second the detector's model gives alone, with nothing else running: its
    calls at once, batches and threads as the detector ran them (blank pictures); None
    where its runtime is not ONNX Runtime (the one timed here)."""
    plan, spec = detector.backends.plan, detector.spec
    if plan.runtime is None or plan.runtime.runtime != "onnxruntime":
        return None
    assert detector.model_path is not None and plan.batch_size is not None
    workers = CALLS_PER_PLANNED * plan.threads.infer_workers
    timed = time_infer(detector.model_path, spec.input.image_shape, spec.input.dtype,
                       calls=ALONE_CALLS * workers, threads=plan.threads.infer,
                       batch=plan.batch_size, workers=workers)
    return round(1e3 / timed.wall_ms, 1)


async def _window(metrics: PipelineMetrics, ids: list[str], seconds: float) -> dict[str, Any]:
    """What the cameras ``ids`` cost and did over the next ``seconds`` (the frames dropped,
    by cause), and the detector's busiest second in it: the most frames it took, and the
    most dropped, in one second."""
    before = {sid: dict(metrics.outcomes[sid]) for sid in ids}
    received = sum(metrics.received[sid] for sid in ids)
    batches = dict(metrics.batch_sizes)
    wall, cpu, began = time.monotonic(), time.process_time(), time.time()
    seen = [(wall, _inferred(metrics), _dropped(metrics, ids))]
    while time.monotonic() - wall < seconds:
        await asyncio.sleep(min(1.0, seconds - (time.monotonic() - wall)))
        seen.append((time.monotonic(), _inferred(metrics), _dropped(metrics, ids)))
    wall, cpu, ended = time.monotonic() - wall, time.process_time() - cpu, time.time()
    rates = [((b[1] - a[1]) / (b[0] - a[0]), (b[2] - a[2]) / (b[0] - a[0]))
             for a, b in pairwise(seen) if b[0] - a[0] >= 0.5]
    got = sum(metrics.received[sid] for sid in ids) - received
    inferred = sum(size * (n - batches.get(size, 0)) for size, n in metrics.batch_sizes.items())
    total: dict[str, int] = {}
    for sid in ids:
        for outcome, n in metrics.outcomes[sid].items():
            total[outcome] = total.get(outcome, 0) + n - before[sid].get(outcome, 0)
    dropped = sum(n for o, n in total.items() if o.startswith("dropped"))
    return {"seconds": round(wall, 1), "began": began, "ended": ended,
            "cores": round(cpu / wall, 2), "decoded_fps": round(got / wall, 1),
            "detected_fps": round(inferred / wall, 1),
            "skipped_fps": round(total.get("skipped_idle", 0) / wall, 1),
            "dropped_share": round(dropped / max(1, got), 4),
            "dropped_by_cause": {o: n for o, n in sorted(total.items())
                                 if o.startswith("dropped") and n},
            "rss_mb": round(rss_mb(), 1),
            "detected_peak_fps": round(max((r[0] for r in rates), default=0.0), 1),
            "dropped_peak_fps": round(max((r[1] for r in rates), default=0.0), 1)}


def _inferred(metrics: PipelineMetrics) -> int:
    return sum(size * n for size, n in metrics.batch_sizes.items())


def _dropped(metrics: PipelineMetrics, ids: list[str]) -> int:
    return sum(n for sid in ids for cause, n in metrics.outcomes[sid].items()
               if cause.startswith("dropped"))


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    name, cameras, duration, *paths = sys.argv[1:]
    pairs = [{"main": Path(m), "sub": Path(s)} for m, s in zip(paths[::2], paths[1::2],
                                                               strict=True)]
    print(json.dumps(asyncio.run(measure(name, int(cameras), float(duration), pairs))))
