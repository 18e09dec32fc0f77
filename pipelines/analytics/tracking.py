"""StreamTracker: one stream's multi-object tracker, Roboflow's ``trackers`` library behind
vidpipe's Detections.

``update`` gives every box of a detected frame its track: the id of a confirmed track, or -1
(a box no track has taken yet, or a track not confirmed: those ids are never reported).
``between`` gives the boxes of the frames the detector skipped (``--detect-every N``): each
track seen on both detected frames around them, moved in proportion of time along the line
between its two boxes — the tracker's state on both sides, so a skipped frame is never a
guess past what the detector saw.

``trackers`` declares ``opencv-python`` as a dependency, which would install a second
OpenCV beside vidpipe's headless one (both write the same ``cv2`` package); it is installed
with ``--no-deps`` (Makefile, Dockerfiles) and its own dependencies are vidpipe's.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.analytics.config import TrackerSettings
from pipelines.errors import ConfigError
from pipelines.frame import Detections

INSTALL = "pip install --no-deps trackers==2.6.1"


def _library() -> Any:
    try:
        import supervision
        import trackers
    except ImportError as e:
        raise ConfigError(f"tracking needs Roboflow's trackers library ({e.name} is missing): "
                          f"{INSTALL}") from None
    return trackers, supervision


@dataclass(slots=True)
class Track:
    """What a confirmed track was on the last detected frame."""

    box: np.ndarray  # (4,) float32 xyxy, source pixels
    score: float
    class_id: int
    pts: float


class StreamTracker:
    """``score_threshold``: the model's (the default activation and high thresholds);
    ``fps``: the stream's rate (the library counts lost frames at 30 fps)."""

    def __init__(self, settings: TrackerSettings, score_threshold: float, fps: float) -> None:
        trackers, self._sv = _library()
        kinds = {"bytetrack": trackers.ByteTrackTracker, "botsort": trackers.BoTSORTTracker,
                 "ocsort": trackers.OCSORTTracker, "sort": trackers.SORTTracker}
        cls = kinds[settings.kind]
        activation = settings.activation if settings.activation is not None else score_threshold
        wanted = {"lost_track_buffer": settings.lost_frames, "frame_rate": fps or 30.0,
                  "track_activation_threshold": activation,
                  "high_conf_det_threshold": settings.high if settings.high is not None
                  else activation,
                  "minimum_consecutive_frames": settings.confirm_frames,
                  "minimum_iou_threshold": settings.min_iou,
                  "minimum_iou_threshold_first_assoc": settings.min_iou,
                  "enable_cmc": False}  # BoT-SORT's camera motion needs the picture: not kept
        accepted = inspect.signature(cls.__init__).parameters
        self._tracker = cls(**{k: v for k, v in wanted.items() if k in accepted})
        self.settings = settings
        self.last: dict[int, Track] = {}  # confirmed tracks on the last detected frame
        self._step = 1.0 / (fps or 30.0)
        self._pts: float | None = None  # the last detected frame's time on the tracker's clock
        self._offset = 0.0  # stream pts -> the tracker's clock, which never goes back

    def update(self, detections: Detections, pts: float | None) -> Detections:
        """The frame's boxes, in their order, with ``track_id`` filled (-1: no confirmed
        track). ``pts`` (seconds) times the motion model, so skipped and dropped frames are
        gaps in time, not steps; None: one frame interval after the last."""
        pts = self._next_pts(pts)
        n = len(detections)
        given = self._sv.Detections(xyxy=detections.xyxy.astype(np.float32).reshape(-1, 4),
                                    confidence=detections.score, class_id=detections.class_id,
                                    data={"index": np.arange(n)})
        tracked = self._tracker.update(given, timestamp=pts)
        ids = np.full(n, -1, np.int32)
        if len(tracked):
            ids[np.asarray(tracked.data["index"], int)] = np.asarray(tracked.tracker_id, int)
        out = Detections(detections.xyxy, detections.score, detections.class_id, ids)
        self.last = {int(t): Track(out.xyxy[i].copy(), float(out.score[i]),
                                   int(out.class_id[i]), pts)
                     for i, t in enumerate(ids) if t >= 0}
        return out

    def between(self, before: dict[int, Track], pts: float | None) -> Detections:
        """The boxes at ``pts``, a frame between the detected frame ``before`` was taken on
        and the last one: the tracks on both, interpolated in time (the later class and
        score)."""
        rows = [(tid, b, self.last[tid]) for tid, b in before.items() if tid in self.last]
        if not rows:
            return Detections.empty()
        pts = None if pts is None else pts + self._offset
        boxes, scores, classes, ids = [], [], [], []
        for tid, old, new in rows:
            span = new.pts - old.pts
            at = 0.5 if pts is None or span <= 0 else min(1.0, max(0.0, (pts - old.pts) / span))
            boxes.append(old.box + (new.box - old.box) * at)
            scores.append(new.score)
            classes.append(new.class_id)
            ids.append(tid)
        return Detections(np.stack(boxes), np.asarray(scores), np.asarray(classes),
                          np.asarray(ids))

    def _next_pts(self, pts: float | None) -> float:
        """The frame's time on the tracker's clock: its pts, moved on where the stream's pts
        go back or repeat (a file played in a loop, a camera reconnected, no pts at all) so
        that it always advances — the library skips a frame whose time is not later."""
        if self._pts is None:
            now = 0.0 if pts is None else pts
        elif pts is None or pts + self._offset <= self._pts:
            now = self._pts + self._step
            if pts is not None:
                self._offset = now - pts
        else:
            now = pts + self._offset
        self._pts = now
        return now
