"""A run replayed (``vidpipe replay``): its recorded boxes through the analytics it had, or
the lines, zones and tracker given instead, compared with what the run counted."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings, from_flags
from pipelines.analytics.replay import Replayed, last_counts, recorded_streams, replay, stream_fps
from pipelines.analytics.stream import ANALYTICS_EVENTS
from pipelines.errors import ConfigError


def replay_run(run_dir: Path, *, track: str | None = None, lines: list[str] | None = None,
               zones: list[str] | None = None, model: str | None = None) -> dict[str, Any]:
    """Replay every stream of ``run_dir``; the comparison as JSON-ready data."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a folder (give a run's --out folder)")
    summary = _summary(run_dir)
    _, spec = resolve_model(model or _recorded_model(summary, run_dir))
    started = time.perf_counter()
    recorded = recorded_streams(run_dir / "detections.jsonl")
    events = _recorded_events(run_dir / "events.jsonl")
    report: dict[str, Any] = {"streams": {}, "frames": 0}
    for sid, frames in recorded.items():
        config = replay_config(summary.get("streams", {}).get(sid, {}).get("analytics_config"),
                               track, lines, zones, sid)
        replayed = replay(frames, sid, config, spec, stream_fps(frames))
        report["streams"][sid] = compared(replayed, last_counts(frames), events.get(sid)) | {
            "track": config.track.kind if config.track else None}
        report["frames"] += replayed.frames
    seconds = time.perf_counter() - started
    report |= {"seconds": round(seconds, 3),
               "fps": round(report["frames"] / seconds, 1) if seconds else 0.0}
    if not (run_dir / "events.jsonl").is_file():
        report["note"] = "the run kept no events.jsonl: its events are not compared"
    return report


def replay_config(recorded: dict[str, Any] | None, track: str | None,
                  lines: list[str] | None, zones: list[str] | None,
                  stream: str) -> AnalyticsConfig:
    """The run's analytics with what is given replacing its part: ``track`` its tracker's
    kind, ``lines`` all its lines, ``zones`` all its zones."""
    given = from_flags(track, lines or [], zones or [])
    if recorded is None:
        if given is None:
            raise ConfigError(f"stream {stream}: the run had no tracker, lines or zones "
                              "(summary.json): give --line, --zone or --track")
        return given
    config = AnalyticsConfig.model_validate(recorded)
    update: dict[str, Any] = {}
    if track is not None:  # the kind only (checked by from_flags): the run's times stay
        update["track"] = (config.track or TrackerSettings()).model_copy(update={"kind": track})
    if lines:
        update["lines"] = given.lines if given is not None else []
    if zones:
        update["zones"] = given.zones if given is not None else []
    try:
        return AnalyticsConfig.model_validate(config.model_dump() | update)
    except ValueError as e:
        raise ConfigError(f"stream {stream}: {e}") from None


def compared(replayed: Replayed, counts: dict[str, Any] | None,
             events: Counter[str] | None) -> dict[str, Any]:
    """A stream's replayed counts and events beside the run's (None where the run had no
    such line or zone, or kept no events)."""
    counts = counts or {"lines": {}, "zones": {}}
    out: dict[str, Any] = {"lines": {}, "zones": {}, "events": {}}
    for name, now in replayed.counts["lines"].items():
        out["lines"][name] = {"recorded": counts["lines"].get(name, {}), "replayed": now}
    for name, now in replayed.counts["zones"].items():
        was = counts["zones"].get(name, {})
        out["zones"][name] = {"recorded": {k: was[k] for k in ("entered", "exited") if k in was},
                              "replayed": {k: now[k] for k in ("entered", "exited")}}
    for kind in ANALYTICS_EVENTS:
        was = None if events is None else events.get(kind, 0)
        if replayed.events.get(kind, 0) or was:
            out["events"][kind] = {"recorded": was, "replayed": replayed.events.get(kind, 0)}
    return out


def _summary(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "summary.json"
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON ({e})") from None


def _recorded_model(summary: dict[str, Any], run_dir: Path) -> str:
    model = summary.get("model")
    if model is None:
        raise ConfigError(f"{run_dir}/summary.json names no model (a run before replay "
                          "existed, or none): give --model")
    return str(model)


def _recorded_events(path: Path) -> dict[str, Counter[str]]:
    """events.jsonl's analytics events per stream and type ({} without the file)."""
    per_stream: dict[str, Counter[str]] = {}
    if not path.is_file():
        return per_stream
    with path.open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            try:
                event = json.loads(text)
                if event.get("type") in ANALYTICS_EVENTS:
                    per_stream.setdefault(str(event["stream"]), Counter())[event["type"]] += 1
            except (ValueError, KeyError, AttributeError) as e:
                raise ConfigError(f"{path}, line {number}: not an event ({e})") from None
    return per_stream
