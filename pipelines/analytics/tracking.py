"""StreamTracker: one stream's multi-object tracker, Roboflow's ``trackers`` library behind
vidpipe's Detections.

``update`` gives every box of a detected frame its track: the id of a confirmed track, or -1
(a box no track has taken yet, or a track not confirmed: those ids are never reported).
With ``fast_objects``, the boxes the library's tracker left without an id go on to the
fast-object chains (``pipelines/analytics/fast.py``); a chain confirmed on this frame leaves
its earlier boxes in ``confirmed`` for the lines. With ``stitch_frames``, the ids then go
through the stitcher (``pipelines/analytics/stitch.py``): a track new to it takes the id of
one lost lately near where that one's motion has taken it (an object hidden longer than
the library keeps a lost track keeps its id).
``between`` gives the boxes of the frames the detector skipped (``--detect-every N``): each
object seen on both detected frames around them, moved in proportion of time along the line
between its two boxes — so a skipped frame is never a guess past what the detector saw. An
object is the same on both frames when its confirmed track is, or else (a track confirmed
on one side only, or on neither) when its two boxes are each other's best overlap of the same
class: a skipped frame then has every box the detector would most likely have given it,
tracked or not.

``trackers`` declares ``opencv-python`` as a dependency, which would install a second
OpenCV beside vidpipe's headless one (both write the same ``cv2`` package); it is installed
with ``--no-deps`` (Makefile, Dockerfiles) and its own dependencies are vidpipe's.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.analytics.config import TrackerSettings
from pipelines.analytics.fast import FastLinker
from pipelines.analytics.stitch import Stitcher
from pipelines.analytics.timeline import Timeline
from pipelines.errors import ConfigError
from pipelines.frame import Detections
from pipelines.postprocess.nms import box_iou

INSTALL = "pip install --no-deps trackers==2.6.1"


def _library() -> Any:
    try:
        import supervision
        import trackers
    except ImportError as e:
        raise ConfigError(f"tracking needs Roboflow's trackers library ({e.name} is missing): "
                          f"{INSTALL}") from None
    return trackers, supervision


# Two untracked boxes on the detected frames around a gap are one object's when each is the
# other's best overlap of its class, and they overlap at least this much.
PAIR_IOU = 0.3


@dataclass(frozen=True, slots=True)
class Observed:
    """A detected frame's boxes with their tracks (-1: not confirmed), at ``pts`` on the
    tracker's clock."""

    detections: Detections
    pts: float


def fitted(settings: TrackerSettings, card: dict[str, Any]) -> TrackerSettings:
    """``settings`` over the model card's fitted ones (``tracker``): what the user set wins,
    the card fills the rest; ConfigError for a card whose settings are not a tracker's."""
    if not card:
        return settings
    given = settings.model_dump(include=settings.model_fields_set)
    try:
        return TrackerSettings.model_validate(card | given)
    except ValueError as e:
        raise ConfigError(f"the model card's tracker settings: {e}") from None


def confirm_detections(confirm_frames: int, interval_s: float) -> int:
    """Detections in a row a track needs before it gets an id: as many as cover
    ``confirm_frames`` frames at 30 fps when the model sees a frame every ``interval_s``
    seconds (each detection stands for the time up to the next), at least one."""
    return max(1, math.ceil(confirm_frames / (30.0 * interval_s) - 0.01))  # pts rounding


class StreamTracker:
    """``score_threshold``: the model's (the default activation and high thresholds);
    ``fps``: the stream's rate (the library counts lost frames at 30 fps);
    ``interval_s``: the time between the model's frames (None: one frame's)."""

    def __init__(self, settings: TrackerSettings, score_threshold: float, fps: float,
                 interval_s: float | None = None) -> None:
        trackers, self._sv = _library()
        kinds = {"bytetrack": trackers.ByteTrackTracker, "botsort": trackers.BoTSORTTracker,
                 "ocsort": trackers.OCSORTTracker, "sort": trackers.SORTTracker}
        cls = kinds[settings.kind]
        activation = settings.activation if settings.activation is not None else score_threshold
        wanted = {"lost_track_buffer": settings.lost_frames, "frame_rate": fps or 30.0,
                  "track_activation_threshold": activation,
                  "high_conf_det_threshold": settings.high if settings.high is not None
                  else activation,
                  "minimum_consecutive_frames": confirm_detections(
                      settings.confirm_frames, interval_s or 1.0 / (fps or 30.0)),
                  "minimum_iou_threshold": settings.min_iou,
                  "minimum_iou_threshold_first_assoc": settings.min_iou,
                  "enable_cmc": False,  # BoT-SORT's camera motion needs the picture: not kept
                  # BoT-SORT would confirm every box of the first frame at once
                  "instant_first_frame_activation": False}
        accepted = inspect.signature(cls.__init__).parameters
        self._tracker = cls(**{k: v for k, v in wanted.items() if k in accepted})
        self.settings = settings
        self._fast = FastLinker(fps) if settings.fast_objects else None
        self._stitch = Stitcher(settings.stitch_frames / 30.0) if settings.stitch_frames \
            else None
        # tracks confirmed on the last detected frame: their boxes before it, oldest first
        self.confirmed: dict[int, np.ndarray] = {}
        self.last: Observed | None = None  # the last detected frame
        # the library skips a frame whose time is not later than the last one's
        self._clock = Timeline(fps)
        self._nothing = self._sv.Detections(xyxy=np.zeros((0, 4), np.float32),
                                            confidence=np.zeros(0, np.float32),
                                            class_id=np.zeros(0, np.int32),
                                            data={"index": np.zeros(0, np.int64)})

    def update(self, detections: Detections, pts: float | None) -> Detections:
        """The frame's boxes, in their order, with ``track_id`` filled (-1: no confirmed
        track). ``pts`` (seconds) times the motion model, so skipped and dropped frames are
        gaps in time, not steps; None: one frame interval after the last."""
        pts = self._clock.at(pts)
        n = len(detections)
        kept = np.arange(n) if not self.settings.duplicate_iou else \
            _one_per_object(detections, self.settings.duplicate_iou)
        # an empty frame's input is one made once (the library only reads what it is given)
        given = self._nothing if n == 0 else self._sv.Detections(
            xyxy=detections.xyxy[kept].astype(np.float32).reshape(-1, 4),
            confidence=detections.score[kept], class_id=detections.class_id[kept],
            data={"index": kept})
        tracked = self._tracker.update(given, timestamp=pts)
        ids = np.full(n, -1, np.int32)
        if len(tracked):
            ids[np.asarray(tracked.data["index"], int)] = np.asarray(tracked.tracker_id, int)
        if self._fast is not None:
            left = kept[ids[kept] < 0]
            ids[left] = self._fast.update(detections.xyxy[left], detections.class_id[left], pts)
            self.confirmed = self._fast.confirmed
        if self._stitch is not None:
            names = self._stitch.rename(ids, detections.xyxy, detections.class_id, pts)
            self.confirmed = {int(names[ids == t][0]): b for t, b in self.confirmed.items()}
            ids = names
        # no box, no name to fill in: the frame's own (empty) boxes
        out = detections if n == 0 else \
            Detections(detections.xyxy, detections.score, detections.class_id, ids)
        self.last = Observed(out, pts)
        return out

    def between(self, before: Observed | None, times: list[float | None]) -> list[Detections]:
        """The boxes at each of ``times`` (stream pts), frames between the detected frame
        ``before`` and the last one: the objects on both, interpolated in time (the later
        box's class, score and track; a pair whose later box has no confirmed track keeps
        the earlier one's)."""
        after = self.last
        if before is None or after is None or not times:
            return [Detections.empty() for _ in times]
        old, new = _pairs(before.detections, after.detections)
        a, b = before.detections, after.detections
        ids = np.where(b.track_id[new] >= 0, b.track_id[new], a.track_id[old])
        span = after.pts - before.pts
        out = []
        for pts in times:
            at = 0.5 if pts is None or span <= 0 else \
                min(1.0, max(0.0, (pts + self._clock.offset - before.pts) / span))
            boxes = a.xyxy[old] + (b.xyxy[new] - a.xyxy[old]) * at
            out.append(Detections(boxes.astype(np.float32).reshape(-1, 4), b.score[new],
                                  b.class_id[new], ids))
        return out



def _one_per_object(detections: Detections, iou_at_least: float) -> np.ndarray:
    """Rows to track: each box but those overlapping a higher-scoring box of another class
    by ``iou_at_least`` or more (the model's NMS keeps such pairs: it is per class)."""
    n = len(detections)
    if n < 2:
        return np.arange(n)
    order = np.argsort(-detections.score, kind="stable")
    iou = box_iou(detections.xyxy[order], detections.xyxy[order])
    other = detections.class_id[order][:, None] != detections.class_id[order][None, :]
    shadowed = np.triu((iou >= iou_at_least) & other, k=1).any(axis=0)
    return np.sort(order[~shadowed])


def _pairs(a: Detections, b: Detections) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``a`` and ``b`` that are one object: the same confirmed track, then, among the
    rest, mutual best overlaps of the same class (at least PAIR_IOU)."""
    index_b = {int(t): j for j, t in enumerate(b.track_id.tolist()) if t >= 0}
    old = [i for i, t in enumerate(a.track_id.tolist()) if t in index_b]
    new = [index_b[int(a.track_id[i])] for i in old]
    taken_a, taken_b = set(old), set(new)
    rest_a = np.asarray([i for i in range(len(a)) if i not in taken_a], np.intp)
    rest_b = np.asarray([j for j in range(len(b)) if j not in taken_b], np.intp)
    if len(rest_a) and len(rest_b):
        iou = box_iou(a.xyxy[rest_a], b.xyxy[rest_b])
        iou[a.class_id[rest_a][:, None] != b.class_id[rest_b][None, :]] = 0.0
        best_b, best_a = iou.argmax(axis=1), iou.argmax(axis=0)
        for i, j in enumerate(best_b.tolist()):
            if best_a[j] == i and iou[i, j] >= PAIR_IOU:
                old.append(int(rest_a[i]))
                new.append(int(rest_b[j]))
    return np.asarray(old, np.intp), np.asarray(new, np.intp)
