"""ObjectLifecycle: one stream's tracked objects as ``new``, ``update`` and ``end``.

An object is a confirmed track (of the classes of interest). ``new`` is said on the frame
its track is first confirmed; ``update`` only when it changed since it was last said: at
once when its class or a classifier's answer changed, or it became stationary or moved
again; when it moved by more than ``move`` of its size, at most every ``update_s``. ``end``
once it has not been seen for ``end_s``, or when the stream ends. An object whose box stays
within ``move`` of where it settled for ``stationary_s`` is *stationary*: one update says
so, and nothing more is said until it moves, so a parked car produces two events, not a
stream of identical ones.

Each object keeps its best picture while it lives (``best``: the detected frame where
score x area was highest, a reference to the frame's picture, not a copy), for the snapshot
written at its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.analytics.timeline import Timeline
from pipelines.events.config import ObjectSettings
from pipelines.frame import Frame, Picture, Result


@dataclass(slots=True)
class BestPicture:
    """The picture an object looked best in: its frame's pixels and the box there."""

    quality: float  # score x box area
    image: Picture  # (H, W, 3) uint8 RGB, the frame's own picture
    box: np.ndarray
    score: float
    frame: int


@dataclass(slots=True)
class TrackedObject:
    track_id: int
    class_id: int
    first_at: float  # on the stream's timeline
    first_frame: int
    first_pts: float | None
    seen_at: float
    seen_frame: int
    seen_pts: float | None
    box: np.ndarray
    score: float
    max_score: float
    said_box: np.ndarray  # the box when it was last said (new or update)
    said_at: float
    settled_box: np.ndarray  # where it has stayed since ``settled_at``
    settled_at: float
    stationary: bool = False
    updates: int = 0
    best: BestPicture | None = None
    attributes: dict[str, tuple[str, float]] = field(default_factory=dict)  # classifiers'


@dataclass(slots=True)
class ObjectEvent:
    """What an object did on a frame: ``kind`` new, update or end."""

    kind: str
    obj: TrackedObject
    frame: Frame
    changes: list[str] = field(default_factory=list)  # update: what changed


def moved(a: np.ndarray, b: np.ndarray, fraction: float) -> bool:
    """Whether box ``b``'s centre is more than ``fraction`` of ``a``'s size (its longer side)
    away from ``a``'s, or its size changed by more than that fraction."""
    size_a = max(float(a[2] - a[0]), float(a[3] - a[1]), 1.0)
    shift = np.hypot((b[0] + b[2] - a[0] - a[2]) / 2, (b[1] + b[3] - a[1] - a[3]) / 2)
    size_b = max(float(b[2] - b[0]), float(b[3] - b[1]), 1.0)
    return bool(shift > fraction * size_a or abs(size_b - size_a) > fraction * size_a)


class ObjectLifecycle:
    """``class_ids``: the classes with a lifecycle (None: all); ``end_s``: how long an
    object may be unseen before it ends."""

    def __init__(self, settings: ObjectSettings, class_ids: set[int] | None, fps: float,
                 end_s: float) -> None:
        self.settings = settings
        self.class_ids = class_ids
        self.end_s = settings.end_s if settings.end_s is not None else end_s
        self.timeline = Timeline(fps)
        self.objects: dict[int, TrackedObject] = {}

    def update(self, result: Result) -> list[ObjectEvent]:
        """One result, in frame order: the objects it starts, changes and ends."""
        frame = result.frame
        now = self.timeline.at(frame.pts)
        d = result.detections
        events: list[ObjectEvent] = []
        picture = frame.image if frame.image is not None and not result.predicted \
            and not frame.scaled else None
        for i, tid in enumerate(d.track_id.tolist()):
            cls = int(d.class_id[i])
            if tid < 0 or (self.class_ids is not None and cls not in self.class_ids):
                continue
            box, score = d.xyxy[i].astype(np.float32), float(d.score[i])
            obj = self.objects.get(tid)
            if obj is None:
                obj = self.objects[tid] = TrackedObject(
                    tid, cls, now, frame.index, frame.pts, now, frame.index, frame.pts, box,
                    score, score, box, now, box, now,
                    attributes=dict(result.attributes.get(tid, {})))
                events.append(ObjectEvent("new", obj, frame))
            else:
                events.extend(self._seen(obj, frame, now, box, score, cls,
                                         result.attributes.get(tid, {})))
            if picture is not None:
                _keep_best(obj, picture, box, score, frame.index)
        for tid, obj in list(self.objects.items()):
            if now - obj.seen_at >= self.end_s:
                del self.objects[tid]
                events.append(ObjectEvent("end", obj, frame))
        return events

    def _seen(self, obj: TrackedObject, frame: Frame, now: float, box: np.ndarray,
              score: float, cls: int, answers: dict[str, tuple[str, float]]
              ) -> list[ObjectEvent]:
        obj.seen_at, obj.seen_frame, obj.seen_pts = now, frame.index, frame.pts
        obj.box, obj.score, obj.max_score = box, score, max(obj.max_score, score)
        changes = []
        if cls != obj.class_id:
            obj.class_id = cls
            changes.append("class")
        if any(obj.attributes.get(head, ("",))[0] != label for head, (label, _) in
               answers.items()):
            changes.append("attributes")
        obj.attributes.update(answers)
        if moved(obj.settled_box, box, self.settings.move):
            obj.settled_box, obj.settled_at = box, now
            if obj.stationary:
                obj.stationary = False
                changes.append("stationary")
        elif not obj.stationary and now - obj.settled_at >= self.settings.stationary_s:
            obj.stationary = True
            changes.append("stationary")
        if not obj.stationary and moved(obj.said_box, box, self.settings.move):
            changes.append("box")
        urgent = bool({"stationary", "class", "attributes"} & set(changes))
        if not changes or (not urgent and now - obj.said_at < self.settings.update_s):
            return []
        obj.said_box, obj.said_at = box, now
        obj.updates += 1
        return [ObjectEvent("update", obj, frame, changes)]

    def finish(self, frame: Frame | None) -> list[ObjectEvent]:
        """The stream ended: every object still alive ends (on ``frame``, the last one)."""
        ended = list(self.objects.values())
        self.objects.clear()
        if frame is None:
            return []
        return [ObjectEvent("end", obj, frame) for obj in ended]


def _keep_best(obj: TrackedObject, image: Picture, box: np.ndarray, score: float,
               frame: int) -> None:
    quality = score * float(max(box[2] - box[0], 0.0) * max(box[3] - box[1], 0.0))
    if obj.best is None or quality > obj.best.quality:
        obj.best = BestPicture(quality, image, box, score, frame)
