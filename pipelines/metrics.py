"""The pipeline's measurements: Prometheus collectors on an injected registry, plus recent
samples kept in memory so the CLI and the API can print exact quantiles.

Metric names are a contract (docs/ARCHITECTURE.md): the dashboard, Grafana and tests read them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from pipelines.analytics_metrics import AnalyticsMetrics
from pipelines.samples import Quantiles, Samples
from pipelines.series import SeriesByLabels, observe_all

OUTCOMES: tuple[str, ...] = (
    "processed", "dropped_full", "dropped_stale", "dropped_stopped", "decode_error",
    "model_error", "skipped_idle",
)
_SECONDS_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True, slots=True)
class StageSummary:
    stage: str
    threads: int  # the stage's threads (calls at once), summed over its pipelines
    items: int
    busy: float  # fraction of wall time the stage's threads spent working, 0..1
    work_ms: Quantiles
    wait_ms: Quantiles


class PipelineMetrics(AnalyticsMetrics):
    """Everything a pipeline measures. One instance per registry; pipelines may share it."""

    def __init__(self, registry: CollectorRegistry | None = None, *, window: int = 20_000) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._window = window
        self.started_at = time.monotonic()
        self._stage_families()
        self._stream_families()
        self._analytics_families()
        self._service_families()
        # every labelled metric whose first label is the stream: forget_stream drops them
        self._per_stream = (self._frames_by, self._latency_by, self._detections_by,
                            self._up_by, self._state_by, self._gaps_by, self._gap_seconds_by,
                            self._reconnects_by, self._sink_errors_by,
                            *self._analytics_series)
        # the figures kept in memory, for the CLI's tables, summary.json and /api/stats
        self.stage_work: dict[str, Samples] = defaultdict(self._samples)
        self.stage_waits: dict[str, Samples] = defaultdict(self._samples)
        self.stage_instances: Counter[str] = Counter()
        self.latency: dict[str, Samples] = defaultdict(self._samples)
        self.batch_sizes: Counter[int] = Counter()
        self.received: Counter[str] = Counter()
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        self.gaps: dict[str, tuple[int, float]] = {}  # stream -> (gaps, seconds without frames)
        self.channel_depths: dict[str, tuple[Callable[[], float], int]] = {}
        self.model_loads: Counter[tuple[str, str]] = Counter()
        self.events: Counter[tuple[str, str]] = Counter()  # (sink, outcome) -> events
        self._lock = threading.Condition()  # outcomes wake ``wait_settled``

    # Labelled children are looked up once (``_Children``): ``labels()`` takes a lock and
    # checks its values on every call, about ten times per frame.
    def _stage_families(self) -> None:
        r = self.registry
        self._stage = Histogram("vidpipe_stage_seconds", "Work time per item (per batch for "
                                "batched stages)", ["stage"], registry=r, buckets=_SECONDS_BUCKETS)
        self._wait = Histogram("vidpipe_stage_wait_seconds", "Time an item waited in the stage's "
                               "input channel", ["stage"], registry=r, buckets=_SECONDS_BUCKETS)
        self._depth = Gauge("vidpipe_channel_depth", "Items in a channel", ["channel"], registry=r)
        self._capacity = Gauge("vidpipe_channel_capacity", "Capacity of a channel", ["channel"],
                               registry=r)
        self._batch = Histogram("vidpipe_batch_size", "Frames per inference batch", registry=r,
                                buckets=_BATCH_BUCKETS)
        self._stage_by = SeriesByLabels(self._stage)
        self._wait_by = SeriesByLabels(self._wait)

    def _stream_families(self) -> None:
        r = self.registry
        self._frames = PromCounter("vidpipe_frames_total", "Frames by final outcome",
                                   ["stream", "outcome"], registry=r)
        self._latency = Histogram("vidpipe_frame_latency_seconds", "Capture to result, end to "
                                  "end", ["stream"], registry=r, buckets=_SECONDS_BUCKETS)
        self._detections = PromCounter("vidpipe_detections_total", "Boxes emitted",
                                       ["stream", "class_name"], registry=r)
        self._up = Gauge("vidpipe_stream_up", "1 while the stream delivers frames", ["stream"],
                         registry=r)
        self._state = Gauge("vidpipe_stream_state", "1 for the state a stream is in (connecting, "
                            "up, reconnecting, unreachable, error, restarting, stopped, "
                            "failed)", ["stream", "state"], registry=r)
        self._gaps = PromCounter("vidpipe_stream_gaps_total", "Times a camera came back after "
                                 "being away (a gap in its timeline)", ["stream"], registry=r)
        self._gap_seconds = PromCounter("vidpipe_stream_gap_seconds_total", "Seconds a "
                                        "camera's timeline had no frames, over its gaps",
                                        ["stream"], registry=r)
        self._reconnects = PromCounter("vidpipe_stream_reconnects_total", "Reconnections of a "
                                       "stream's source", ["stream"], registry=r)
        self._sink_errors = PromCounter("vidpipe_sink_errors_total", "Results a stream's sink "
                                        "failed to take", ["stream", "sink"], registry=r)
        self._frames_by = SeriesByLabels(self._frames)
        self._latency_by = SeriesByLabels(self._latency)
        self._detections_by = SeriesByLabels(self._detections)
        self._up_by = SeriesByLabels(self._up)
        self._state_by = SeriesByLabels(self._state)
        self._gaps_by = SeriesByLabels(self._gaps)
        self._gap_seconds_by = SeriesByLabels(self._gap_seconds)
        self._reconnects_by = SeriesByLabels(self._reconnects)
        self._sink_errors_by = SeriesByLabels(self._sink_errors)

    def _service_families(self) -> None:
        r = self.registry
        self._loads = PromCounter("vidpipe_model_loads_total", "Models loaded by the service's "
                                  "shared detectors", ["model", "device"], registry=r)
        self._restarts = PromCounter("vidpipe_detector_restarts_total", "Shared detectors "
                                     "rebuilt after a failure", ["model", "device"], registry=r)
        self._events = PromCounter("vidpipe_events_total", "Events by sink and outcome (sent, "
                                   "retried, dropped: given up, in the dead-letter file)",
                                   ["sink", "outcome"], registry=r)
        self._events_by = SeriesByLabels(self._events)

    def _samples(self) -> Samples:
        return Samples(self._window)

    # -- recording ---------------------------------------------------------------------------
    def register_stage(self, stage: str, threads: int = 1) -> None:
        """A stage instance whose work runs on ``threads`` threads (each counts as one)."""
        self.stage_instances[stage] += threads

    def unregister_stage(self, stage: str, threads: int = 1) -> None:
        self.stage_instances[stage] -= threads

    def register_channel(self, name: str, capacity: int, depth: Callable[[], float]) -> None:
        self._capacity.labels(name).set(capacity)
        self._depth.labels(name).set_function(depth)
        self.channel_depths[name] = (depth, capacity)

    def unregister_channel(self, name: str) -> None:
        """Forget a channel of a pipeline that has gone (the service removes streams)."""
        if self.channel_depths.pop(name, None) is not None:
            self._capacity.remove(name)
            self._depth.remove(name)

    def observe_stage(self, stage: str, seconds: float) -> None:
        self._stage_by(stage).observe(seconds)
        self.stage_work[stage].add(seconds)

    def observe_waits(self, stage: str, seconds: Sequence[float]) -> None:
        """The waits of a call's items, observed together."""
        observe_all(self._wait_by(stage), seconds)
        self.stage_waits[stage].add_many(seconds)

    def frame_received(self, stream: str, count: int = 1) -> None:
        with self._lock:
            self.received[stream] += count

    def frame_outcome(self, stream: str, outcome: str, count: int = 1) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        self._frames_by(stream, outcome).inc(count)
        with self._lock:
            self.outcomes[stream][outcome] += count
            self._lock.notify_all()

    def observe_latencies(self, stream: str, seconds: Sequence[float]) -> None:
        """The latencies of a call's frames of one stream, observed together."""
        observe_all(self._latency_by(stream), seconds)
        self.latency[stream].add_many(seconds)

    def observe_batch(self, size: int) -> None:
        self._batch.observe(size)
        with self._lock:
            self.batch_sizes[size] += 1

    def count_detections(self, stream: str, class_name: str, count: int) -> None:
        self._detections_by(stream, class_name).inc(count)

    def count_model_load(self, model: str, device: str) -> None:
        self._loads.labels(model, device).inc()
        with self._lock:
            self.model_loads[(model, device)] += 1

    def count_detector_restart(self, model: str, device: str) -> None:
        self._restarts.labels(model, device).inc()

    def count_sink_error(self, stream: str, sink: str, results: int = 1) -> None:
        self._sink_errors_by(stream, sink).inc(results)

    def count_event(self, sink: str, outcome: str, count: int = 1) -> None:
        """An event ``sent`` by a sink, an attempt ``retried``, or one ``dropped`` (given up:
        kept in the dead-letter file). Called from the sinks' own threads."""
        self._events_by(sink, outcome).inc(count)
        with self._lock:
            self.events[(sink, outcome)] += count

    def set_stream_up(self, stream: str, up: bool) -> None:
        self._up_by(stream).set(1.0 if up else 0.0)

    def set_stream_state(self, stream: str, state: str) -> None:
        """The stream's state as ``vidpipe_stream_state{state} 1`` (one series per stream, the
        state it is in) and ``vidpipe_stream_up``: from the moment a stream is added, so a
        camera that never came up is down on ``/metrics`` too."""
        self._state_by.forget(stream)
        self._state_by(stream, state).set(1.0)
        self.set_stream_up(stream, state == "up")

    def forget_stream(self, stream: str) -> None:
        """A stream removed on purpose: its series leave ``/metrics`` (Prometheus keeps what
        it scraped; a stream that is gone is not one that is down) and its window of latency
        samples leaves memory, so that adding and removing streams grows neither. Its final
        counts (``received``, ``outcomes``: a few numbers) stay readable."""
        for children in self._per_stream:
            children.forget(stream)
        with self._lock:
            self.latency.pop(stream, None)

    def restart_counts(self, stream: str) -> None:
        """A stream that was removed here and comes back (a cluster's worker given it
        again) counts from zero: what it counted before is its controller's to carry."""
        with self._lock:
            self.received.pop(stream, None)
            self.outcomes.pop(stream, None)
            self.gaps.pop(stream, None)

    def count_gap(self, stream: str, seconds: float) -> None:
        """A camera came back after ``seconds`` without frames (``StreamTimeline``)."""
        self._gaps_by(stream).inc()
        self._gap_seconds_by(stream).inc(seconds)
        with self._lock:
            count, total = self.gaps.get(stream, (0, 0.0))
            self.gaps[stream] = (count + 1, total + seconds)

    def count_reconnect(self, stream: str) -> None:
        self._reconnects_by(stream).inc()

    # -- reading -----------------------------------------------------------------------------
    def stage_summaries(self, wall_s: float | None = None,
                        window_s: float | None = None) -> list[StageSummary]:
        """One row per stage, in the order stages registered: over the whole run (``wall_s``,
        default since creation), or over the last ``window_s`` seconds."""
        wall = wall_s if wall_s is not None else time.monotonic() - self.started_at
        if window_s is not None:
            wall = min(wall, window_s)
        rows = []
        for stage, threads in self.stage_instances.items():
            if threads <= 0:
                continue
            work = self.stage_work[stage]
            recent = work.values(window_s)
            total = work.total if window_s is None else float(recent.sum())
            busy = total / (wall * threads) if wall > 0 else 0.0
            rows.append(StageSummary(
                stage, threads, work.count if window_s is None else int(recent.size),
                min(busy, 1.0), work.quantiles_ms(window_s),
                self.stage_waits[stage].quantiles_ms(window_s)))
        return rows

    def wait_settled(self, stream: str, held: int, stop: Callable[[], bool]) -> None:
        """Until every frame of ``stream`` received but the ``held`` its decoder holds back
        has its outcome (its result written, or its drop counted), or ``stop()``."""
        with self._lock:
            while (self.received[stream] - sum(self.outcomes[stream].values()) > held
                   and not stop()):
                self._lock.wait(0.1)

    def unaccounted(self, stream: str) -> int:
        """Frames received but neither emitted nor dropped: 0 once a stream has finished."""
        with self._lock:
            return self.received[stream] - sum(self.outcomes[stream].values())
