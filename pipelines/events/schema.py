"""The one event format, ``vidpipe.event/1`` (its JSON Schema: docs/events.schema.json).

Every event names its stream, its frame (index, pts and wall time), and where it concerns an
object, the object (``object``: its id, the same on all of its events), its track, class,
score and box. ``id`` is the event's idempotency key: a digest of the stream's run, the
event's type, object, frame and line or zone, so a sink that sends an event twice (a retry,
an MQTT redelivery) sends the same id, and two events never share one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from models.spec import ModelSpec
from pipelines.events.lifecycle import ObjectEvent, TrackedObject
from pipelines.frame import Frame
from pipelines.walltime import wall_time

SCHEMA = "vidpipe.event/1"


def digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _box(box: np.ndarray) -> list[float]:
    return [round(float(v), 2) for v in box]


class EventStamper:
    """Turns one stream's object and analytics events into the schema. ``run``: a token of
    this run of the stream (its ids differ from another run's, whose track ids restart)."""

    def __init__(self, stream: str, run: str, spec: ModelSpec) -> None:
        self.stream, self.run, self.spec = stream, run, spec

    def object_id(self, track_id: int) -> str:
        return digest(self.run, self.stream, "object", track_id)

    def _base(self, kind: str, frame: Frame, *key: object) -> dict[str, Any]:
        return {"schema": SCHEMA,
                "id": digest(self.run, self.stream, kind, frame.index, *key),
                "type": kind, "stream": self.stream, "frame": frame.index,
                "pts": None if frame.pts is None else round(frame.pts, 6),
                "time": wall_time(frame)}

    def object_event(self, event: ObjectEvent) -> dict[str, Any]:
        obj = event.obj
        record = self._base(event.kind, event.frame, obj.track_id) | self._object(obj) | {
            "box": _box(obj.box), "score": round(obj.score, 4),
            "stationary": obj.stationary}
        if obj.attributes:
            record["attributes"] = {h: [label, c] for h, (label, c) in obj.attributes.items()}
        if event.kind == "update":
            record["changes"] = event.changes
        if event.kind == "end":
            record |= {"first_frame": obj.first_frame,
                       "first_pts": None if obj.first_pts is None else round(obj.first_pts, 6),
                       "last_frame": obj.seen_frame,
                       "last_pts": None if obj.seen_pts is None else round(obj.seen_pts, 6),
                       "duration_s": round(obj.seen_at - obj.first_at, 3),
                       "max_score": round(obj.max_score, 4), "updates": obj.updates,
                       "snapshot": None, "snapshot_clean": None, "clip": None}
        return record

    def analytics_event(self, event: dict[str, Any], frame: Frame,
                        boxes: dict[int, tuple[np.ndarray, float]],
                        attributes: dict[int, dict[str, tuple[str, float]]] | None = None
                        ) -> dict[str, Any]:
        """An analytics event of ``StreamAnalytics`` (line_cross, zone_enter, ...) with the
        box and score of its track on the frame (``boxes``: track -> (box, score)) and its
        classifiers' answers (``attributes``: track -> head -> (label, confidence))."""
        kind = event["type"]
        name = event.get("line", event.get("zone"))
        tid = event.get("track_id")
        record = self._base(kind, frame, tid, name, event.get("direction"))
        record["object"] = None if tid is None else self.object_id(tid)
        record["track_id"] = tid
        record["class"] = event.get("class")
        box = boxes.get(tid) if tid is not None else None
        record["box"] = None if box is None else _box(box[0])
        record["score"] = None if box is None else round(box[1], 4)
        for key in ("line", "direction", "zone", "dwell_s", "occupancy"):
            if key in event:
                record[key] = event[key]
        answers = (attributes or {}).get(tid) if tid is not None else None
        if answers:
            record["attributes"] = {h: [label, c] for h, (label, c) in answers.items()}
        return record

    def _object(self, obj: TrackedObject) -> dict[str, Any]:
        return {"object": self.object_id(obj.track_id), "track_id": obj.track_id,
                "class": self.spec.label(obj.class_id)}
