"""Stitcher: one identity for an object the tracker lost and found again as a new track.

An overlap tracker keeps a lost track for a while and finds it again only near where its
motion model expects it; an object hidden behind something for longer, or seen again
farther off (it comes out cut short by the occluder, or turned), gets a new track: one
object with two ids — a crossing made while hidden is never seen, a line or zone counts the
object twice. The stitcher renames: a track new to it takes the id of a track lost at most
``window_s`` before, of its class and about its size, whose last motion (constant velocity)
brings it within ``GATE`` sizes of the new track's box — nearest pairs first. A renamed
tracker id keeps the name while its track lives; two tracks present at once never share a
name (the later one of them gets a name of its own, counted from ``FIRST_ID``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.analytics.fast import box_centres, box_sides

GATE = 1.5  # sizes between where a lost track's motion has taken it and a new track's box
SPREAD = 0.25  # the gate widens by this share of the distance the motion carried it
SIZE_RATIO = 2.0  # a new track at most this many times larger or smaller (side)
VELOCITY_MEMORY = 0.8  # the weight of a track's past velocity in its next (0.5-0.9 measured)
FIRST_ID = 1 << 21  # names of its own, apart from the tracker's and the fast chains'


@dataclass(slots=True)
class _Named:
    """One name's last observation."""

    box: np.ndarray  # xyxy
    pts: float
    class_id: int
    holder: int  # the tracker id it was last seen under
    velocity: np.ndarray | None = None  # its centre's pixels a second


class Stitcher:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._names: dict[int, _Named] = {}  # name -> its last observation
        self._given: dict[int, int] = {}  # tracker id -> its name
        self._next = FIRST_ID

    def rename(self, ids: np.ndarray, xyxy: np.ndarray, class_id: np.ndarray,
               pts: float) -> np.ndarray:
        """The frame's tracker ids (-1: none) as names: a tracker id seen before keeps its
        name, a new one takes a lost track's where the stitch finds one."""
        tracker_ids: list[int] = ids.tolist()
        rows = [r for r, t in enumerate(tracker_ids) if t >= 0]
        known = [r for r in rows if tracker_ids[r] in self._given]
        held: dict[int, int] = {}  # name -> its row on this frame
        # a name two present tracker ids map to stays with the one last seen under it
        for r in sorted(known, key=lambda r: self._holder(tracker_ids[r]) != tracker_ids[r]):
            name = self._given[tracker_ids[r]]
            held[self._fresh(tracker_ids[r]) if name in held else name] = r
        new = [r for r in rows if tracker_ids[r] not in self._given]
        stitched = self._stitched(new, held, xyxy, class_id, pts)
        for r in new:
            name = stitched.get(r, tracker_ids[r])
            self._given[tracker_ids[r]] = name
            held[name] = r
        names = np.full(len(ids), -1, ids.dtype)
        for name, r in held.items():
            names[r] = name
            self._seen(name, xyxy[r].astype(np.float64), int(class_id[r]), tracker_ids[r], pts)
        self._forget(pts)
        return names

    def _holder(self, tracker_id: int) -> int:
        """The tracker id last seen under ``tracker_id``'s name."""
        return self._names[self._given[tracker_id]].holder

    def _fresh(self, tracker_id: int) -> int:
        name, self._next = self._next, self._next + 1
        self._given[tracker_id] = name
        return name

    def _stitched(self, new: list[int], held: dict[int, int], xyxy: np.ndarray,
                  class_id: np.ndarray, pts: float) -> dict[int, int]:
        """Lost names for new rows, nearest pairs first: row -> name."""
        lost = [(n, s) for n, s in self._names.items()
                if n not in held and 0 < pts - s.pts <= self.window_s]
        if not lost or not new:
            return {}
        boxes = xyxy[new].astype(np.float64)
        off = _offsets([s for _, s in lost], boxes, class_id[new], pts)
        chosen: dict[int, int] = {}
        for i, j in zip(*np.unravel_index(np.argsort(off, axis=None), off.shape), strict=True):
            if not np.isfinite(off[i, j]):
                break
            name, row = lost[i][0], new[j]
            if row not in chosen and name not in chosen.values():
                chosen[row] = name
        return chosen

    def _seen(self, name: int, box: np.ndarray, cls: int, holder: int, pts: float) -> None:
        last = self._names.get(name)
        velocity = None
        if last is not None and pts > last.pts:
            step = (box_centres(box) - box_centres(last.box)) / (pts - last.pts)
            velocity = step if last.velocity is None else \
                VELOCITY_MEMORY * last.velocity + (1 - VELOCITY_MEMORY) * step
        elif last is not None:
            velocity = last.velocity
        self._names[name] = _Named(box, pts, cls, holder, velocity)

    def _forget(self, pts: float) -> None:
        stale = [n for n, s in self._names.items() if pts - s.pts > self.window_s]
        for name in stale:
            del self._names[name]
        if stale:
            gone = set(stale)
            self._given = {t: n for t, n in self._given.items() if n not in gone}


def _offsets(lost: list[_Named], boxes: np.ndarray, class_id: np.ndarray,
             pts: float) -> np.ndarray:
    """(lost, boxes): how far each box lies from where each lost track's motion has taken
    it, in sizes; inf for another class or size, or beyond the gate."""
    last = np.stack([s.box for s in lost])
    velocity = np.stack([np.zeros(2) if s.velocity is None else s.velocity for s in lost])
    carried = velocity * (pts - np.array([s.pts for s in lost]))[:, None]
    expected = box_centres(last) + carried
    off = np.hypot(*(box_centres(boxes)[None, :, :] - expected[:, None, :]).transpose(2, 0, 1))
    size_lost, size_box = box_sides(last)[:, None], box_sides(boxes)[None, :]
    size = np.maximum(size_lost, size_box)
    fits = (np.array([s.class_id for s in lost])[:, None] == class_id[None, :]) & \
        (size_box <= SIZE_RATIO * size_lost) & (size_lost <= SIZE_RATIO * size_box) & \
        (off <= GATE * size + SPREAD * np.hypot(*carried.T)[:, None])
    return np.where(fits, off / size, np.inf)
