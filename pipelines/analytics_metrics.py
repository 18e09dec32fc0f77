"""The analytics' Prometheus series: line crossings, zone events, occupancy and dwell, and
the classifiers' answers. A part of ``PipelineMetrics`` (its base), kept apart by subject."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from pipelines.series import SeriesByLabels

DWELL_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)  # seconds in a zone


class AnalyticsMetrics:
    registry: CollectorRegistry

    def _analytics_families(self) -> None:
        r = self.registry
        self._crossings = PromCounter("vidpipe_line_crossings_total", "Confirmed tracks "
                                      "crossing a counting line", ["stream", "line",
                                                                   "direction"], registry=r)
        self._zone_events = PromCounter("vidpipe_zone_events_total", "Zone events (enter, "
                                        "exit, loiter, crowd_begin, crowd_end)",
                                        ["stream", "zone", "type"], registry=r)
        self._occupancy = Gauge("vidpipe_zone_occupancy", "Confirmed tracks inside a zone",
                                ["stream", "zone"], registry=r)
        self._crossings_by = SeriesByLabels(self._crossings)
        self._zone_events_by = SeriesByLabels(self._zone_events)
        self._occupancy_by = SeriesByLabels(self._occupancy)
        self._dwell_by = SeriesByLabels(Histogram(
            "vidpipe_zone_dwell_seconds", "How long each visit of a zone lasted, at its end",
            ["stream", "zone"], buckets=DWELL_BUCKETS, registry=r))
        self._classified_by = SeriesByLabels(PromCounter(
            "vidpipe_classifications_total", "Crops of tracked objects a classifier answered "
            "for, by its answer", ["stream", "classifier", "head", "label"], registry=r))
        # every series here is per stream (its first label): forgotten with the stream
        self._analytics_series = (self._crossings_by, self._zone_events_by,
                                  self._occupancy_by, self._dwell_by, self._classified_by)

    def count_line_crossing(self, stream: str, line: str, direction: str) -> None:
        self._crossings_by(stream, line, direction).inc()

    def count_zone_event(self, stream: str, zone: str, kind: str) -> None:
        self._zone_events_by(stream, zone, kind).inc()

    def observe_dwell(self, stream: str, zone: str, seconds: float) -> None:
        self._dwell_by(stream, zone).observe(seconds)

    def set_zone_occupancy(self, stream: str, zone: str, count: int) -> None:
        self._occupancy_by(stream, zone).set(count)

    def count_classification(self, stream: str, classifier: str, head: str,
                             label: str) -> None:
        """One crop a classifier answered ``label`` for, under ``head``."""
        self._classified_by(stream, classifier, head, label).inc()
