"""A run's ``summary.json``: per stage, per stream, batch sizes, the plan it ran with, its
analytics' counts and its events' outcomes."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pipelines.analytics.stage import AnalyticsStage
from pipelines.analytics.stream import StreamAnalytics
from pipelines.metrics import PipelineMetrics
from pipelines.pipeline import Pipeline


def summarise(metrics: PipelineMetrics, pipeline: Pipeline, ids: list[str]) -> dict[str, Any]:
    """The run's figures as JSON: per stage, per stream, batch sizes."""
    wall = pipeline.wall_s or 0.0
    streams = {}
    for sid in ids:
        outcomes = dict(metrics.outcomes[sid])
        processed = outcomes.get("processed", 0)
        streams[sid] = {
            "received": metrics.received[sid], "outcomes": outcomes,
            "fps": processed / wall if wall else 0.0,
            "latency_ms": metrics.latency[sid].quantiles_ms(),
        }
    analytics = _analytics(pipeline)
    for sid, (counts, config) in analytics.items():  # the config: what `vidpipe replay` reruns
        streams[sid] |= {"analytics": counts, "analytics_config": config}
    report: dict[str, Any] = {
        "wall_s": wall,
        "finished_at": time.time(),
        "stages": [
            {"stage": s.stage, "threads": s.threads, "items": s.items, "busy": s.busy,
             "work_ms": s.work_ms, "wait_ms": s.wait_ms}
            for s in metrics.stage_summaries(wall)
        ],
        "streams": streams,
        "batch_sizes": {str(k): v for k, v in sorted(metrics.batch_sizes.items())},
    }
    plan = pipeline.plan
    if plan is not None:
        report["threads"] = asdict(plan.threads)
        if plan.runtime is not None:
            report["runtime"] = plan.runtime.as_dict()
        report["plan"] = {"batch_size": plan.batch_size, "cached": plan.cached,
                          "measured_at": plan.measured_at}
    if analytics:
        report["analytics"] = _summed([counts for counts, _ in analytics.values()])
    if metrics.events:
        sinks: dict[str, dict[str, int]] = {}
        for (sink, outcome), count in sorted(metrics.events.items()):
            sinks.setdefault(sink, {})[outcome] = count
        report["events"] = sinks
    return report


def _analytics(pipeline: Pipeline) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each tracked stream's analytics: its counts, tracked and predicted frames; and its
    settings."""
    stage = next((s for s in pipeline.stages if isinstance(s, AnalyticsStage)), None)
    if stage is None:
        return {}
    return {sid: (_with_dwell(a.counts(), a) | {"frames": a.frames,
                                                "predicted_frames": a.predicted},
                  a.config.model_copy(update={"track": a.tracker.settings})  # card's too
                  .model_dump(mode="json")) for sid, a in stage.streams.items()}


def _with_dwell(counts: dict[str, Any], analytics: StreamAnalytics) -> dict[str, Any]:
    """Each zone's counts with its ended visits' dwell (``dwell``: visits, mean, p50, p90,
    longest)."""
    for zone in analytics.zones:
        counts["zones"][zone.config.name]["dwell"] = zone.dwell_summary()
    return counts


_ADDED = ("in", "out", "entered", "exited", "loitering", "crowds")


def _summed(per_stream: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's line and zone counts, over its streams (one stream: that stream's)."""
    total: dict[str, dict[str, dict[str, Any]]] = {"lines": {}, "zones": {}}
    for counts in per_stream:
        for kind in ("lines", "zones"):
            for name, values in counts[kind].items():
                into = total[kind].setdefault(name, {})
                for key, value in values.items():
                    if key in _ADDED:
                        into[key] = into.get(key, 0) + value
                    elif key == "max_occupancy":
                        into[key] = max(into.get(key, 0), value)
    return total
