"""A running stream's analytics changed through the API: lines, zones and masks at any time,
a tracker for a stream that has none; a stream's tracker itself stays while it runs."""

from __future__ import annotations

from app.errors import TrackerFixed
from app.service.config import AnalyticsUpdate, Gating, analytics_config, check_masks
from app.service.streams import StreamState, check_fits
from pipelines.analytics.config import TrackerSettings
from pipelines.analytics.stream import StreamAnalytics
from pipelines.metrics import PipelineMetrics


def update_analytics(stream: StreamState, update: AnalyticsUpdate,
                     metrics: PipelineMetrics) -> bool:
    """Apply ``update``'s tracker, lines and zones to ``stream``; False where it changes
    nothing: no tracker, line or zone on a stream that has no analytics, and the same masks
    (which the caller keeps in the stream's config). TrackerFixed (409) for another tracker;
    ConfigError (400) for a shape outside the picture."""
    check_masks(update.masks)
    check_fits(None, stream.source, stream.id, update.masks)
    counting = _update_counting(stream, update, metrics)
    return counting or update.masks != stream.masks


def _update_counting(stream: StreamState, update: AnalyticsUpdate,
                     metrics: PipelineMetrics) -> bool:
    current = stream.analytics
    if current is None:
        config = analytics_config(update.track, update.lines, update.zones)
        if config is None:
            return False
        check_fits(config, stream.source, stream.id)
        assert stream.detector is not None, "a running stream has its detector"
        fps = float(getattr(stream.source, "fps", 0) or 30.0)
        stream.analytics = StreamAnalytics(stream.id, config, stream.detector.spec, fps, metrics)
        stream.detector.analytics[stream.id] = stream.analytics
        return True
    kind = update.track.kind if isinstance(update.track, TrackerSettings) else update.track
    if kind is not None and kind != current.config.track.kind:
        raise TrackerFixed(f"stream {stream.id!r} tracks with {current.config.track.kind}: a "
                           "running stream's tracker stays (remove and add the stream to "
                           "change it)")
    now = current.config
    config = analytics_config(now.track, update.lines, update.zones, now.detect_every,
                              now.detect_fps,
                              Gating(now.motion, now.motion_heartbeat_s, update.masks),
                              now.classifiers)
    if config is not None:
        check_fits(config, stream.source, stream.id)
        current.reconfigure(config)
    return True
