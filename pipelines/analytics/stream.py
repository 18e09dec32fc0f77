"""StreamAnalytics: what one stream's results go through after postprocessing — its tracker,
then its lines and zones — in frame order.

A detected frame's riders (the frames ``--detect-every`` kept from the model) come out first,
each with the tracker's boxes (``predicted``), then the frame itself with its tracked boxes.
A frame motion gating skipped (``skipped``), and its riders, come out with no boxes and leave
the tracker alone: it is skipped only when no object was seen lately (``watch_until``); a
skipped frame that rides with another (a run of them, ``decode.selection``) comes out as
skipped, never predicted.
Every result gets the stream's counts after it (``analytics``) and the events it completed
(``events``: ``line_cross``, ``zone_enter``, ``zone_exit``, ``loiter``, ``crowd_begin``,
``crowd_end``), which the metrics, the events sink and the summary read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.analytics.heatmap import Heatmap
from pipelines.analytics.lines import LineCounter, anchors
from pipelines.analytics.tracking import StreamTracker, fitted
from pipelines.analytics.zones import ZoneMonitor
from pipelines.classify.model import Answer, Classifiers
from pipelines.classify.tracks import TrackAttributes
from pipelines.errors import ConfigError
from pipelines.frame import Detections, Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.quiet import fold

# the events a stream's analytics make (each result's ``events``), in the events' schema
ANALYTICS_EVENTS = ("line_cross", "zone_enter", "zone_exit", "loiter", "crowd_begin",
                    "crowd_end")


def detect_interval(config: AnalyticsConfig, fps: float) -> float:
    """Seconds between the frames the model sees while objects move (motion gating skips
    only frames with none)."""
    every = config.detect_every / fps
    return max(every, 1.0 / config.detect_fps) if config.detect_fps is not None else every


def class_ids(names: list[str] | None, spec: ModelSpec, where: str) -> set[int] | None:
    """The model's class ids of ``names`` (None: every class); ConfigError for a label the
    model does not have."""
    if names is None:
        return None
    labels = {spec.label(i): i for i in range(spec.num_classes)}
    unknown = [n for n in names if n not in labels]
    if unknown:
        raise ConfigError(f"{where}: {', '.join(unknown)} is not a class of {spec.name} "
                          f"(its classes: {', '.join(labels)})")
    return {labels[n] for n in names}


@dataclass(slots=True)
class Tracked:
    """One result through the tracker, not yet counted: its riders' results (predicted),
    its own, and the tracks confirmed on it with their earlier boxes."""

    riders: list[Result]
    result: Result
    confirmed: dict[int, np.ndarray] | None


class StreamAnalytics:
    def __init__(self, stream: str, config: AnalyticsConfig, spec: ModelSpec, fps: float,
                 metrics: PipelineMetrics | None = None,
                 classifiers: Classifiers | None = None) -> None:
        if config.track is None:
            raise ConfigError(f"stream {stream}: analytics without a tracker")
        self.stream, self.config, self.spec = stream, config, spec
        self.fps = fps or 30.0
        self.tracker = StreamTracker(fitted(config.track, spec.tracker),
                                     spec.output.score_threshold, self.fps,
                                     detect_interval(config, self.fps))
        self.lines = [LineCounter(c, class_ids(c.classes, spec, f"line {c.name}"))
                      for c in config.lines]
        self.zones = [ZoneMonitor(c, class_ids(c.classes, spec, f"zone {c.name}"))
                      for c in config.zones]
        self.metrics = metrics
        self.attributes = _attributes(config, spec, classifiers, stream)
        check_said(config, self.attributes, stream)
        self.heatmap = Heatmap()  # where its tracked objects' bottom-centres were
        self.frames = 0
        self.predicted = 0
        # until when (the stream's pts) an object seen on a detected frame may still be there:
        # the tracker's lost-track time after it; motion gating detects every frame till then
        self.watch_until = float("-inf")
        self._watch_s = self.tracker.settings.lost_frames / 30.0  # 30 fps frames
        # the counts after the last result, replaced whole: what the API reads while results
        # are processed on the analytics thread
        self.latest: dict[str, Any] = self.counts()

    def reconfigure(self, config: AnalyticsConfig) -> None:
        """New lines and zones (the tracker stays): one whose configuration is unchanged
        keeps its counts; the others start from zero. Safe while results are processed: the
        lists are swapped whole."""
        check_said(config, self.attributes, self.stream)
        lines = {line.config.model_dump_json(): line for line in self.lines}
        zones = {zone.config.model_dump_json(): zone for zone in self.zones}
        self.lines = [lines.get(c.model_dump_json()) or
                      LineCounter(c, class_ids(c.classes, self.spec, f"line {c.name}"))
                      for c in config.lines]
        self.zones = [zones.get(c.model_dump_json()) or
                      ZoneMonitor(c, class_ids(c.classes, self.spec, f"zone {c.name}"))
                      for c in config.zones]
        self.config = config
        self.latest = {"lines": {x.config.name: dict(x.counts) for x in self.lines},
                       "zones": {z.config.name: self.latest["zones"].get(z.config.name,
                                                                           z.counts())
                                 for z in self.zones}}

    def process(self, result: Result) -> list[Result]:
        """The result's riders, predicted, then the result, tracked; in frame order."""
        return self.count(self.track(result))

    def track(self, result: Result) -> Tracked:
        """The tracker's step: the result's riders with its boxes, the result with its
        tracks; counted by ``count`` (the classifiers answer in between)."""
        if result.frame.skipped:
            frame = result.frame.without_riders()
            return Tracked([_unseen(r) for r in result.frame.riders],
                           Result(frame, Detections.empty(), frame.timings), None)
        before = self.tracker.last
        tracked = self.tracker.update(result.detections, result.frame.pts)
        riders = result.frame.riders
        filled = [r for r in riders if not r.skipped]  # a skipped rider stays skipped
        between = iter(self.tracker.between(before, [r.pts for r in filled]))
        predicted = [_unseen(r) if r.skipped else
                     Result(r, next(between), r.timings, predicted=True) for r in riders]
        self.predicted += len(filled)
        frame = result.frame.without_riders()
        if len(tracked) and frame.pts is not None:
            self.watch_until = frame.pts + self._watch_s
        return Tracked(predicted, dataclasses.replace(result, frame=frame, detections=tracked),
                       self.tracker.confirmed)

    def count(self, tracked: Tracked) -> list[Result]:
        """The tracked results counted, riders first, each with its tracks' answers; a
        stretch of quiet skipped frames among them folded into one line (``sinks.quiet``)."""
        results = [self._count(r) for r in tracked.riders] + \
            [self._count(tracked.result, tracked.confirmed)]
        return fold(results) if len(results) > 1 else results

    def now(self, frame: Frame) -> float:
        return frame.pts if frame.pts is not None else frame.index / self.fps

    def _count(self, result: Result, before: dict[int, np.ndarray] | None = None) -> Result:
        """The result's counts and events; ``before``: the boxes that tracks confirmed on
        it had before, which the lines judge first (a crossing made before the track had
        its id still counts, here)."""
        self.frames += 1
        frame: Frame = result.frame
        now = self.now(frame)
        d = result.detections
        if len(d):  # an empty frame adds nothing to the heatmap
            self.heatmap.add(anchors(d.xyxy[d.track_id >= 0], "bottom_center"))
        answers = self.attributes.of(d.track_id) if self.attributes is not None else {}
        events: list[dict[str, Any]] = []
        for line in self.lines:
            ids = _said(d.track_id, answers, line.config.attributes)
            for c in line.update(d.xyxy, ids, d.class_id, before):
                events.append({"type": "line_cross", "line": line.config.name,
                               "direction": c.direction, "track_id": c.track_id,
                               "class_id": c.class_id})
                if self.metrics is not None:
                    self.metrics.count_line_crossing(self.stream, line.config.name,
                                                     c.direction)
        for zone in self.zones:
            ids = _said(d.track_id, answers, zone.config.attributes)
            for event in zone.update(now, d.xyxy, ids, d.class_id):
                events.append({"zone": zone.config.name} | event)
                if self.metrics is not None:
                    self.metrics.count_zone_event(self.stream, zone.config.name, event["type"])
                    if event["type"] == "zone_exit":
                        self.metrics.observe_dwell(self.stream, zone.config.name,
                                                   event["dwell_s"])
            if self.metrics is not None:
                self.metrics.set_zone_occupancy(self.stream, zone.config.name, zone.occupancy)
        stamped = [self._stamp(e, frame) for e in events]
        self.latest = self.counts(now)
        return dataclasses.replace(result, analytics=self.latest, events=stamped,
                                   attributes=answers)

    def _stamp(self, event: dict[str, Any], frame: Frame) -> dict[str, Any]:
        cls = event.pop("class_id", None)
        pts = None if frame.pts is None else round(frame.pts, 6)
        return {"type": event.pop("type"), "stream": self.stream, "frame": frame.index,
                "pts": pts, "track_id": event.pop("track_id", None),
                "class": None if cls is None or cls < 0 else self.spec.label(cls)} | event

    def counts(self, now: float | None = None) -> dict[str, Any]:
        """The counts so far: ``{"lines": {NAME: {"in", "out"}}, "zones": {NAME: {...}}}``
        (at ``now``, with each zone's tracks inside and their dwell). On the thread that
        processes the results, or once they are done: readers elsewhere read ``latest``."""
        return {"lines": {line.config.name: dict(line.counts) for line in self.lines},
                "zones": {zone.config.name: zone.counts(now) for zone in self.zones}}


def _unseen(frame: Frame) -> Result:
    """The result of a frame the model did not see that leaves the tracker alone: a
    skipped one (motion gating) as it is, any other predicted (no tracked objects to fill
    in: a skipped frame's riders)."""
    return Result(frame, Detections.empty(), frame.timings, predicted=not frame.skipped)


def _said(track_ids: np.ndarray, answers: dict[int, Answer],
          wanted: dict[str, list[str]] | None) -> np.ndarray:
    """``track_ids`` with -1 (counted by nothing) for each track whose classifiers have not
    answered one of ``wanted``'s labels for every head it names (None: all kept)."""
    if not wanted:
        return track_ids
    return np.array([t if t >= 0 and all(answers.get(t, {}).get(head, ("",))[0] in labels
                                         for head, labels in wanted.items()) else -1
                     for t in track_ids.tolist()], dtype=track_ids.dtype)


def _attributes(config: AnalyticsConfig, spec: ModelSpec, classifiers: Classifiers | None,
                stream: str) -> TrackAttributes | None:
    """The stream's classifiers, loaded (or shared) from ``classifiers``; ConfigError where
    two answer under one head name, or a line or zone asks for a head or label none has."""
    if not config.classifiers:
        return None
    if classifiers is None:
        raise ConfigError(f"stream {stream}: classifiers configured but none loaded")
    entries = []
    heads: dict[str, list[str]] = {}
    for c in config.classifiers:
        loaded = classifiers.get(c)
        for head, labels in loaded.heads().items():
            if head in heads:
                raise ConfigError(f"stream {stream}: two classifiers answer as {head!r}")
            heads[head] = labels
        entries.append((c, loaded, class_ids(c.objects, spec, f"classifier {c.model}")))
    return TrackAttributes(entries)


def check_said(config: AnalyticsConfig, attributes: TrackAttributes | None,
               stream: str) -> None:
    """ConfigError for a line or zone that counts by a head or label no classifier of the
    stream answers with (a filter nothing could ever pass)."""
    heads = {} if attributes is None else \
        {h: v for _, c, _ in attributes.entries for h, v in c.heads().items()}
    said = "; ".join(f"{h}: {', '.join(v)}" for h, v in heads.items()) or "nothing"
    for kind, shape in [("line", x) for x in config.lines] + [("zone", z) for z in config.zones]:
        for head, labels in (shape.attributes or {}).items():
            if head not in heads or any(x not in heads[head] for x in labels):
                raise ConfigError(f"stream {stream}: {kind} {shape.name} counts {head}="
                                  f"{','.join(labels)}, but its classifiers answer {said}")
