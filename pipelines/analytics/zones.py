"""ZoneMonitor: one polygon zone's visits by confirmed tracks — entries and exits with their own
inertia, dwell time, loitering, occupancy and overcrowding.

A track *enters* once its anchor has been inside ``enter_frames`` frames in a row (the visit
starts at the first of them) and *leaves* once it has been outside, or not seen at all,
``exit_frames`` frames in a row (the visit ends at the last frame it was inside): a box
flickering on the edge, or a track the detector misses for a few frames, keeps its visit and
its dwell. ``loiter`` is said once per visit when it has lasted ``loiter_s``; overcrowding
begins when ``crowd`` or more tracks have been inside for ``crowd_s`` seconds and ends when
fewer are — a begin and an end, not a flag per frame.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.analytics.config import ZoneConfig
from pipelines.analytics.lines import anchors


def inside_polygon(points: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """(N,) bool: which of (N, 2) points are inside the polygon (even-odd rule; a point on
    an edge may fall either way)."""
    x, y = points[:, 0:1], points[:, 1:2]
    x1, y1 = polygon[:, 0], polygon[:, 1]
    x2, y2 = np.roll(x1, -1), np.roll(y1, -1)
    straddles = (y1 > y) != (y2 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        at = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
    crossings = straddles & (x < at)
    return np.asarray(crossings.sum(axis=1) % 2 == 1)


DWELLS_KEPT = 100_000


@dataclass(slots=True)
class _Visit:
    inside: bool = False
    streak: int = 0  # frames in a row against ``inside``
    first_in: float = 0.0  # when the current run of inside frames began (entering)
    entered: float = 0.0
    last_in: float = 0.0
    class_id: int = -1
    loitered: bool = False


@dataclass
class ZoneMonitor:
    config: ZoneConfig
    class_ids: set[int] | None = None
    entered: int = 0
    exited: int = 0
    loitering: int = 0
    crowds: int = 0
    max_occupancy: int = 0
    crowded: bool = False
    # the last DWELLS_KEPT ended visits' dwell, seconds (a service's stream runs for months)
    dwells: deque[float] = field(default_factory=lambda: deque(maxlen=DWELLS_KEPT))
    _visits: dict[int, _Visit] = field(default_factory=dict)
    _crowd_since: float | None = None

    def __post_init__(self) -> None:
        self._polygon = np.asarray(self.config.polygon, np.float64)

    occupancy: int = 0  # tracks inside after the last frame

    def dwell(self, now: float) -> dict[int, float]:
        """Seconds each track inside has been in its current visit (on the thread that
        updates the zone)."""
        return {t: now - v.entered for t, v in self._visits.items() if v.inside}

    def update(self, now: float, xyxy: np.ndarray, track_id: np.ndarray,
               class_id: np.ndarray) -> list[dict[str, Any]]:
        """One frame at ``now`` (seconds): its confirmed tracks; the events it completed."""
        keep = track_id >= 0
        if self.class_ids is not None:
            keep &= np.isin(class_id, list(self.class_ids))
        ids, classes = track_id[keep], class_id[keep]
        inside = inside_polygon(anchors(xyxy[keep], self.config.anchor), self._polygon) \
            if keep.any() else np.zeros(0, bool)
        seen = {int(t): (bool(i), int(c)) for t, i, c in zip(ids, inside, classes, strict=True)}
        events: list[dict[str, Any]] = []
        for tid in set(seen) | set(self._visits):
            is_in, cls = seen.get(tid, (False, -1))
            visit = self._visits.get(tid)
            if visit is None:
                if not is_in:
                    continue
                visit = self._visits[tid] = _Visit()
            if cls >= 0:
                visit.class_id = cls
            events.extend(self._step(tid, visit, is_in, now))
            if not visit.inside and visit.streak == 0:
                del self._visits[tid]  # outside and settled: nothing to remember
        occupancy = self.occupancy = sum(1 for v in self._visits.values() if v.inside)
        self.max_occupancy = max(self.max_occupancy, occupancy)
        events.extend(self._crowding(occupancy, now))
        return events

    def _step(self, tid: int, visit: _Visit, is_in: bool, now: float) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if is_in == visit.inside:
            visit.streak = 0
        else:
            if visit.streak == 0 and is_in:
                visit.first_in = now
            visit.streak += 1
        if not visit.inside and visit.streak >= self.config.enter_frames:
            visit.inside, visit.streak, visit.loitered = True, 0, False
            visit.entered = visit.last_in = visit.first_in
            self.entered += 1
            events.append({"type": "zone_enter", "track_id": tid, "class_id": visit.class_id})
        elif visit.inside and visit.streak >= self.config.exit_frames:
            visit.inside, visit.streak = False, 0
            self.exited += 1
            self.dwells.append(visit.last_in - visit.entered)
            events.append({"type": "zone_exit", "track_id": tid, "class_id": visit.class_id,
                           "dwell_s": round(visit.last_in - visit.entered, 3)})
        if visit.inside and is_in:
            visit.last_in = now
        loiter = self.config.loiter_s
        if visit.inside and not visit.loitered and loiter is not None \
                and now - visit.entered >= loiter:
            visit.loitered = True
            self.loitering += 1
            events.append({"type": "loiter", "track_id": tid, "class_id": visit.class_id,
                           "dwell_s": round(now - visit.entered, 3)})
        return events

    def _crowding(self, occupancy: int, now: float) -> list[dict[str, Any]]:
        limit = self.config.crowd
        if limit is None:
            return []
        if occupancy < limit:
            self._crowd_since = None
            if self.crowded:
                self.crowded = False
                return [{"type": "crowd_end", "track_id": None, "class_id": None,
                         "occupancy": occupancy}]
            return []
        if self._crowd_since is None:
            self._crowd_since = now
        if not self.crowded and now - self._crowd_since >= self.config.crowd_s:
            self.crowded = True
            self.crowds += 1
            return [{"type": "crowd_begin", "track_id": None, "class_id": None,
                     "occupancy": occupancy}]
        return []

    def dwell_summary(self) -> dict[str, Any]:
        """The ended visits' dwell (the last DWELLS_KEPT): how many, their mean, median,
        90th percentile and longest (seconds)."""
        if not self.dwells:
            return {"visits": 0}
        d = np.asarray(self.dwells, np.float64)
        return {"visits": len(d), "mean_s": round(float(d.mean()), 3),
                "p50_s": round(float(np.percentile(d, 50)), 3),
                "p90_s": round(float(np.percentile(d, 90)), 3), "max_s": round(float(d.max()), 3)}

    def counts(self, now: float | None = None) -> dict[str, Any]:
        """The zone's counts; at ``now``, also each track inside and its dwell so far."""
        counts: dict[str, Any] = {
            "occupancy": self.occupancy, "entered": self.entered, "exited": self.exited,
            "loitering": self.loitering, "crowds": self.crowds,
            "max_occupancy": self.max_occupancy, "crowded": self.crowded}
        if now is not None:
            counts["dwell_s"] = {str(t): round(s, 3) for t, s in sorted(self.dwell(now).items())}
        return counts
