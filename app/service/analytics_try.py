"""``POST /api/streams/{id}/analytics/try``: a candidate's lines and zones replayed on the
stream's recent results — the boxes its model gave, from its results file — before it is
saved, beside what the stream counted over the same frames. No model runs; the stream is
left as it is."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.errors import NothingToReplay
from app.service.config import AnalyticsUpdate
from app.service.streams import StreamState
from models.checked import describe_error
from models.zoo import resolve_model
from pipelines.analytics.config import DEFAULT_TRACKER, AnalyticsConfig, TrackerSettings
from pipelines.analytics.replay import (
    RecordedFrame,
    last_counts,
    recorded_frames,
    replay,
    stream_fps,
)
from pipelines.errors import ConfigError

RECENT_FRAMES = 9000  # the results replayed by default: 5 minutes at 30 fps


def try_analytics(stream: StreamState, update: AnalyticsUpdate,
                  frames: int = RECENT_FRAMES) -> dict[str, Any]:
    """The candidate's counts and events over the stream's last ``frames`` results, and the
    stream's own over them (its lines and zones of the same names). On a worker thread."""
    config = _candidate(stream, update)
    path = _results_file(stream)
    started = time.perf_counter()
    with path.open(encoding="utf-8") as lines:
        recent = deque(lines, maxlen=frames)
    recorded = _this_session(
        recorded_frames(recent, f"{path} (its last {len(recent)} lines)").get(stream.id, []))
    if not recorded:
        raise NothingToReplay(f"stream {stream.id}: no results yet to replay the candidate on")
    spec = stream.analytics.spec if stream.analytics is not None else \
        resolve_model(stream.model)[1]
    replayed = replay(recorded, stream.id, config, spec, stream_fps(recorded))
    counted = _counted_over(recorded)
    return {
        "frames": len(recorded), "from_pts": recorded[0].pts, "to_pts": recorded[-1].pts,
        "lines": {name: {"stream": counted["lines"].get(name), "candidate": now}
                  for name, now in replayed.counts["lines"].items()},
        "zones": {name: {"stream": counted["zones"].get(name),
                         "candidate": {k: now[k] for k in ("entered", "exited")}}
                  for name, now in replayed.counts["zones"].items()},
        "events": dict(replayed.events), "seconds": round(time.perf_counter() - started, 3)}


def _this_session(frames: list[RecordedFrame]) -> list[RecordedFrame]:
    """The frames after the last time the frame numbers started again (the stream removed
    and added again, the service restarted: another session of the same id, not to mix)."""
    start = next((k for k in range(len(frames) - 1, 0, -1)
                  if frames[k].index < frames[k - 1].index), 0)
    return frames[start:]


def _results_file(stream: StreamState) -> Path:
    file = stream.outputs.file
    if file is None:
        raise NothingToReplay(f"stream {stream.id}: results_dir is off, so its results are "
                              "not kept to replay a candidate on")
    if not file.path.is_file():
        raise NothingToReplay(f"stream {stream.id}: no results yet to replay the candidate on")
    return file.path


def _candidate(stream: StreamState, update: AnalyticsUpdate) -> AnalyticsConfig:
    """The stream's tracker (or the update's, or DEFAULT_TRACKER) with the candidate's lines and
    zones."""
    track = stream.analytics.config.track if stream.analytics is not None else None
    if track is None:
        given = update.track
        track = given if isinstance(given, TrackerSettings) else \
            TrackerSettings(kind=given or DEFAULT_TRACKER)
    try:
        return AnalyticsConfig(track=track, lines=update.lines, zones=update.zones)
    except ValidationError as e:  # a line of no length, a name twice
        raise ConfigError(f"stream {stream.id}: {describe_error(e)}") from None


def _counted_over(frames: list[RecordedFrame]) -> dict[str, dict[str, dict[str, int]]]:
    """What the stream's own lines and zones counted between the first and the last of
    ``frames`` (their ``analytics``: the counts after each frame)."""
    first = next((f.analytics for f in frames if f.analytics is not None), None)
    last = last_counts(frames)
    if first is None or last is None:
        return {"lines": {}, "zones": {}}
    return {"lines": {name: {d: now[d] - first["lines"].get(name, {}).get(d, 0)
                             for d in ("in", "out")}
                      for name, now in last["lines"].items()},
            "zones": {name: {k: now[k] - first["zones"].get(name, {}).get(k, 0)
                             for k in ("entered", "exited")}
                      for name, now in last["zones"].items()}}
