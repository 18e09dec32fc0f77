"""LineCounter: crossings of one counting line by confirmed tracks, per direction.

Each track's anchor is placed on a side of the line by the sign of
``(x2-x1)*(py-y1) - (y2-y1)*(px-x1)``: positive on the right-hand side of the line walked
from (x1, y1) to (x2, y2) as drawn (y down), negative on its left. A track *settles* on a
side once its anchor is farther than the hysteresis band from the line (``hysteresis`` times
its box's height); a crossing is a settled track settling on the other side, and counts when
the anchor's path between two observations cut the line within its two ends — so a box
jittering inside the band counts nothing, an object that jumps the line between two frames
still counts, and one passing beyond an end of the line does not. Positive to negative is
``in``, negative to positive ``out``. Tracks with id -1 are never given to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.analytics.config import Anchor, LineConfig

STALE_FRAMES = 900  # a track unseen this many frames is forgotten (its id will not return)


def anchors(xyxy: np.ndarray, anchor: Anchor) -> np.ndarray:
    """(N, 2) anchor points of (N, 4) boxes."""
    x1, y1, x2, y2 = (xyxy[:, i].astype(np.float64) for i in range(4))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    points = {"bottom_center": (cx, y2), "center": (cx, cy), "top_center": (cx, y1),
              "left_center": (x1, cy), "right_center": (x2, cy)}[anchor]
    return np.stack(points, axis=1)


@dataclass(slots=True)
class _TrackSide:
    point: tuple[float, float]
    settled: int  # +1, -1: the side it last settled on; 0: not settled yet
    cut_inside: bool = False  # its path's last cut of the infinite line was within the ends
    seen: int = 0  # the frame it was last seen on


@dataclass(slots=True)
class Crossing:
    track_id: int
    direction: str  # "in" | "out"
    class_id: int


@dataclass
class LineCounter:
    config: LineConfig
    class_ids: set[int] | None = None  # None: every class counts
    counts: dict[str, int] = field(default_factory=lambda: {"in": 0, "out": 0})
    _tracks: dict[int, _TrackSide] = field(default_factory=dict)
    _frame: int = 0

    def __post_init__(self) -> None:
        x1, y1, x2, y2 = self.config.points
        self._a = np.array([x1, y1], np.float64)
        self._d = np.array([x2 - x1, y2 - y1], np.float64)
        self._length = float(np.hypot(*self._d))

    def update(self, xyxy: np.ndarray, track_id: np.ndarray,
               class_id: np.ndarray) -> list[Crossing]:
        """One frame's confirmed tracks (ids >= 0): the crossings they completed."""
        self._frame += 1
        crossings = []
        points = anchors(xyxy, self.config.anchor)
        heights = xyxy[:, 3].astype(np.float64) - xyxy[:, 1]
        for point, height, tid, cls in zip(points, heights, track_id, class_id, strict=True):
            if tid < 0 or (self.class_ids is not None and int(cls) not in self.class_ids):
                continue
            crossed = self._observe(int(tid), (float(point[0]), float(point[1])),
                                    self.config.hysteresis * max(float(height), 0.0))
            if crossed is not None:
                self.counts[crossed] += 1
                crossings.append(Crossing(int(tid), crossed, int(cls)))
        if self._frame % 64 == 0:
            self._tracks = {t: s for t, s in self._tracks.items()
                            if self._frame - s.seen < STALE_FRAMES}
        return crossings

    def _distance(self, point: tuple[float, float]) -> float:
        """Signed distance of a point from the line: > 0 right-hand side, < 0 left."""
        px, py = point[0] - self._a[0], point[1] - self._a[1]
        return float((self._d[0] * py - self._d[1] * px) / self._length)

    def _cuts_within(self, p: tuple[float, float], q: tuple[float, float]) -> bool:
        """Whether the path p -> q (on opposite sides) cuts the line between its ends."""
        dp, dq = self._distance(p), self._distance(q)
        t = dp / (dp - dq)  # where along p -> q it meets the infinite line
        return self._on_segment((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))

    def _observe(self, tid: int, point: tuple[float, float], band: float) -> str | None:
        distance = self._distance(point)
        state = self._tracks.get(tid)
        side = 0 if abs(distance) <= band else (1 if distance > 0 else -1)
        if state is None:
            self._tracks[tid] = _TrackSide(point, side, seen=self._frame)
            return None
        last = self._distance(state.point)
        if last * distance < 0:
            state.cut_inside = self._cuts_within(state.point, point)
        elif distance == 0 and last != 0:  # on the line itself: where decides
            state.cut_inside = self._on_segment(point)
        state.point, state.seen = point, self._frame
        crossed = None
        if side != 0 and state.settled != 0 and side != state.settled and state.cut_inside:
            crossed = "in" if state.settled > 0 else "out"
        if side != 0:
            state.settled = side
        return crossed

    def _on_segment(self, point: tuple[float, float]) -> bool:
        """Whether a point on the infinite line lies between the line's two ends."""
        along = float(np.dot(np.array(point) - self._a, self._d) / self._length ** 2)
        return 0.0 <= along <= 1.0
