"""LineCounter: crossings of one counting line by confirmed tracks, per direction.

Each track's anchor is placed on a side of the line by the sign of
``(x2-x1)*(py-y1) - (y2-y1)*(px-x1)``: positive on the right-hand side of the line walked
from (x1, y1) to (x2, y2) as drawn (y down), negative on its left. A track *settles* on a
side once its anchor is farther than the hysteresis band from the line (``hysteresis`` times
its box's height); a crossing is a settled track settling on the other side, and counts when
the anchor's path between two observations cut the line within its two ends — so a box
jittering inside the band counts nothing, an object that jumps the line between two frames
still counts, and one passing beyond an end of the line does not. The band is at least
``jitter_band`` times the track's own jitter (how far across the line its anchor lands
from where its motion put it, averaged): a box that wobbles, as a turning object's or one
boxed now whole and now in part does, must get past its wobble to count. Positive to
negative is ``in``, negative to positive ``out``. Tracks with id -1 are never given to it.

Rules against the tracker's mistakes (measured on the counting set, docs/BENCHMARKS.md): a
track born where the motion of one just lost has taken it takes over its side
(``relink_frames``, on: an object that crossed hidden behind something counts); off, as
none helped on both its parts: a smoothed anchor, a side reached only after
``settle_frames`` observations beyond the band, an anchor landing far from where its
track's motion put it taken for another object (``max_jump``), one count per direction per
track. A track the tracker confirms late (the fast-object chains) hands its
earlier boxes to ``update`` (``before``): the line judges its whole path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.analytics.config import Anchor, LineConfig

STALE_FRAMES = 900  # a track unseen this many frames is forgotten (its id will not return)
JITTER_MEMORY = 0.8  # the weight of a track's past jitter in its next (``jitter_band``)


def anchors(xyxy: np.ndarray, anchor: Anchor) -> np.ndarray:
    """(N, 2) anchor points of (N, 4) boxes."""
    x1, y1, x2, y2 = (xyxy[:, i].astype(np.float64) for i in range(4))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    points = {"bottom_center": (cx, y2), "center": (cx, cy), "top_center": (cx, y1),
              "left_center": (x1, cy), "right_center": (x2, cy)}[anchor]
    return np.stack(points, axis=1)


@dataclass(slots=True)
class _TrackSide:
    point: tuple[float, float]  # its last anchor, smoothed where the line smooths
    settled: int  # +1, -1: the side it last settled on; 0: not settled yet
    cut_inside: bool = False  # its path's last cut of the infinite line was within the ends
    seen: int = 0  # the frame it was last seen on
    height: float = 0.0  # its box's last height
    pending: int = 0  # the other side it is beyond the band on, not yet settled there
    beyond: int = 0  # observations in a row it has been there
    counted: set[str] = field(default_factory=set)  # directions counted (once_per_track)
    velocity: tuple[float, float] | None = None  # its anchor's pixels a frame, smoothed
    jitter: float = 0.0  # how far across the line its anchor lands from where its motion
    # put it, smoothed (pixels): how much its boxes wobble


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
        self._present: set[int] = set()  # the tracks of the frame being counted
        x1, y1, x2, y2 = self.config.points
        self._a = np.array([x1, y1], np.float64)
        self._d = np.array([x2 - x1, y2 - y1], np.float64)
        self._length = float(np.hypot(*self._d))

    def update(self, xyxy: np.ndarray, track_id: np.ndarray, class_id: np.ndarray,
               before: dict[int, np.ndarray] | None = None) -> list[Crossing]:
        """One frame's confirmed tracks (ids >= 0): the crossings they completed.
        ``before``: tracks confirmed on this frame and their boxes before it, oldest first,
        judged ahead of their box here."""
        self._frame += 1
        self._present = {int(t) for t in track_id.tolist() if t >= 0}
        crossings = []
        points = anchors(xyxy, self.config.anchor)
        heights = xyxy[:, 3].astype(np.float64) - xyxy[:, 1]
        for point, height, tid, cls in zip(points, heights, track_id, class_id, strict=True):
            if tid < 0 or (self.class_ids is not None and int(cls) not in self.class_ids):
                continue
            earlier = (before or {}).get(int(tid))
            steps = [] if earlier is None else \
                list(zip(anchors(earlier, self.config.anchor), earlier[:, 3] - earlier[:, 1],
                         strict=True))
            for p, h in [*steps, (point, height)]:
                crossed = self._observe(int(tid), (float(p[0]), float(p[1])),
                                        max(float(h), 0.0))
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

    def _observe(self, tid: int, point: tuple[float, float], height: float) -> str | None:
        config = self.config
        band = config.hysteresis * height
        state = self._tracks.get(tid)
        if state is None:
            state = self._taken_over(point, height)
            if state is None:
                side = self._side(self._distance(point), band)
                self._tracks[tid] = _TrackSide(point, side, seen=self._frame, height=height)
                return None
            self._tracks[tid] = state
        band = max(band, config.jitter_band * self._jitter(state, point))
        if self._jumped(state, point, height):  # another object under this id from here
            state = _TrackSide(point, self._side(self._distance(point), band),
                               seen=self._frame, height=height)
            self._tracks[tid] = state
            return None
        if config.smoothing:
            a = config.smoothing
            point = (a * state.point[0] + (1 - a) * point[0],
                     a * state.point[1] + (1 - a) * point[1])
        distance = self._distance(point)
        last = self._distance(state.point)
        if last * distance < 0:
            state.cut_inside = self._cuts_within(state.point, point)
        elif distance == 0 and last != 0:  # on the line itself: where decides
            state.cut_inside = self._on_segment(point)
        state.point, state.seen, state.height = point, self._frame, height
        return self._settle(state, self._side(distance, band))

    def _settle(self, state: _TrackSide, side: int) -> str | None:
        """The track beyond the band on ``side`` (0: within it) once more: the crossing it
        completes by settling there, if any."""
        if side == 0 or side == state.settled:
            state.pending = state.beyond = 0
            return None
        state.beyond = state.beyond + 1 if state.pending == side else 1
        state.pending = side
        if state.beyond < self.config.settle_frames:
            return None
        crossed = None
        if state.settled != 0 and state.cut_inside:
            crossed = "in" if state.settled > 0 else "out"
            if self.config.once_per_track and crossed in state.counted:
                crossed = None
            else:
                state.counted.add(crossed)
        state.settled, state.pending, state.beyond = side, 0, 0
        return crossed

    def _jitter(self, state: _TrackSide, point: tuple[float, float]) -> float:
        """The track's jitter with ``point`` observed: how far across the line it lands
        from where the track's motion put it, averaged over its last observations (0
        until it has a motion). A box that wobbles as its object turns, or as a detector
        boxes it now whole and now in part, wobbles its anchor across a line it glides
        along or stands on: its band widens with it."""
        if state.velocity is None:
            return state.jitter
        off = abs(self._distance(point) - self._distance(self._expected(state)))
        state.jitter = JITTER_MEMORY * state.jitter + (1 - JITTER_MEMORY) * off
        return state.jitter

    def _jumped(self, state: _TrackSide, point: tuple[float, float], height: float) -> bool:
        """With ``max_jump``: whether ``point`` lies too far from where the track's motion
        puts it now. Keeps the track's velocity up to date otherwise."""
        gap = max(self._frame - state.seen, 1)
        (x, y) = state.point
        step = ((point[0] - x) / gap, (point[1] - y) / gap)
        if state.velocity is None:  # seen once: its first step is its motion
            state.velocity = step
            return False
        vx, vy = state.velocity
        ex, ey = self._expected(state)
        off = float(np.hypot(point[0] - ex, point[1] - ey))
        if self.config.max_jump and off > self.config.max_jump * max(height, state.height, 1.0):
            return True
        state.velocity = (0.5 * vx + 0.5 * step[0], 0.5 * vy + 0.5 * step[1])
        return False

    def _expected(self, state: _TrackSide) -> tuple[float, float]:
        """Where the track's motion puts its anchor on this frame (where it was last seen,
        until it has a motion)."""
        vx, vy = state.velocity or (0.0, 0.0)
        gap = max(self._frame - state.seen, 1)
        return state.point[0] + vx * gap, state.point[1] + vy * gap

    @staticmethod
    def _side(distance: float, band: float) -> int:
        return 0 if abs(distance) <= band else (1 if distance > 0 else -1)

    def _taken_over(self, point: tuple[float, float], height: float) -> _TrackSide | None:
        """With ``relink_frames``: the state of the track lost nearest ``point`` (within a
        box height of where its motion has taken it since, lost at most that many frames
        ago), handed to a track just born there — one object whose identity the tracker
        lost, behind something or in a crowd, keeps the side it had reached."""
        frames = self.config.relink_frames
        if not frames:
            return None
        best, nearest = None, float("inf")
        for tid, state in self._tracks.items():
            gap = self._frame - state.seen
            if not 0 < gap <= frames or tid in self._present:
                continue  # not lost lately, or in this frame (not handled yet)
            ex, ey = self._expected(state)
            d = float(np.hypot(point[0] - ex, point[1] - ey))
            if d <= max(height, state.height, 1.0) and d < nearest:
                best, nearest = tid, d
        return None if best is None else self._tracks.pop(best)

    def _on_segment(self, point: tuple[float, float]) -> bool:
        """Whether a point on the infinite line lies between the line's two ends."""
        along = float(np.dot(np.array(point) - self._a, self._d) / self._length ** 2)
        return 0.0 <= along <= 1.0
