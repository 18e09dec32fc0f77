"""FastLinker: tracks for objects the tracker cannot follow because they move more than half
their size a frame — their boxes on two frames barely overlap, so an overlap tracker starts a
new tentative track on every frame and confirms none, and a line never sees them cross.

It is given the boxes the tracker left without an id, frame by frame. Two boxes of one class
and about one size, on detected frames at most ``MAX_GAP_S`` apart and at least
``MIN_SPEED`` sizes a frame apart, start a chain (a box may start several: the third
decides); a third box where the chain's motion puts it (within ``GATE`` sizes)
confirms it: the chain gets an id (counted from ``FIRST_ID``, apart from the tracker's) and
its earlier boxes are handed on (``confirmed``), so a line judges the path it took before it
was confirmed. Three boxes in a straight line at one speed are not chance; a chain missing
one frame is dropped (a fast object is not seen for long).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SPEED = 0.5  # sizes a frame: slower objects overlap from frame to frame
GATE = 0.25  # sizes between a chain's predicted box and the box it takes
SIZE_RATIO = 1.6  # a box at most this many times larger or smaller (side) than the last
FIRST_ID = 1 << 20  # its ids, apart from the tracker's
MAX_GAP_S = 0.15  # a box seen once waits this long for its next (about 4 frames at 30 fps)
HYPOTHESES = 3  # next boxes tried for a box seen once


@dataclass(slots=True, eq=False)
class _Chain:
    boxes: list[np.ndarray]  # its boxes, oldest first
    times: list[float]  # their pts (seconds)
    class_id: int
    id: int = -1  # -1 until confirmed

    def predicted(self, pts: float) -> np.ndarray:
        """Its box at ``pts``: the last one moved on at the speed of its last step."""
        (a, b), (ta, tb) = self.boxes[-2:], self.times[-2:]
        velocity = (box_centres(b) - box_centres(a)) / max(tb - ta, 1e-6)
        return b + np.tile(velocity * (pts - tb), 2)

    def then(self, box: np.ndarray, pts: float) -> _Chain:
        """The chain with ``box`` added (a confirmed one keeps its last two: its speed)."""
        keep = -1 if self.id >= 0 else 0
        return _Chain([*self.boxes[keep:], box], [*self.times[keep:], pts], self.class_id,
                      self.id)


class FastLinker:
    def __init__(self, fps: float) -> None:
        self.fps = fps or 30.0
        self._chains: list[_Chain] = []
        self._next_id = FIRST_ID
        # the chains confirmed on the last update: their boxes before it, oldest first
        self.confirmed: dict[int, np.ndarray] = {}

    def update(self, xyxy: np.ndarray, class_id: np.ndarray, pts: float) -> np.ndarray:
        """The ids of the boxes given (those the tracker left without one, at ``pts``): a
        confirmed chain's, or -1."""
        self.confirmed = {}
        if not len(xyxy) and not self._chains:  # nothing seen, nothing to follow
            return np.full(0, -1, np.int64)
        chains = [c for c in self._chains if pts - c.times[-1] <= MAX_GAP_S]
        ids = np.full(len(xyxy), -1, np.int64)
        free = np.ones(len(xyxy), bool)
        boxes = xyxy.astype(np.float64)
        kept: list[_Chain] = []
        # chains with a speed, the confirmed first, take the box their motion predicts
        for chain in sorted((c for c in chains if len(c.boxes) > 1),
                            key=lambda c: (c.id < 0, -len(c.boxes))):
            row = self._predicted_box(chain, boxes, class_id, free, pts)
            if row < 0:
                continue  # a chain missing a frame is dropped
            free[row] = False
            chain = chain.then(boxes[row], pts)
            if chain.id < 0:
                chain.id, self._next_id = self._next_id, self._next_id + 1
                self.confirmed[chain.id] = np.stack(chain.boxes[:-1])
            ids[row] = chain.id
            kept.append(chain)
        # a box seen once goes on with every box far enough to be its next: the third decides
        for chain in (c for c in chains if len(c.boxes) == 1):
            rows = self._second_boxes(chain, boxes, class_id, free, pts)
            kept += [chain.then(boxes[row], pts) for row in rows] if len(rows) else [chain]
        kept += [_Chain([boxes[row]], [pts], int(class_id[row])) for row in np.flatnonzero(free)]
        self._chains = kept
        return ids

    def _fits(self, last: np.ndarray, cls: int, boxes: np.ndarray, class_id: np.ndarray,
              free: np.ndarray) -> np.ndarray:
        ratio = box_sides(boxes) / box_sides(last)
        return free & (class_id == cls) & (ratio <= SIZE_RATIO) & (ratio >= 1 / SIZE_RATIO)

    def _predicted_box(self, chain: _Chain, boxes: np.ndarray, class_id: np.ndarray,
                       free: np.ndarray, pts: float) -> int:
        """The row of the box nearest where ``chain`` is now, within GATE (-1: none)."""
        off = _centre_distance(chain.predicted(pts), boxes) / box_sides(chain.boxes[-1])
        fits = self._fits(chain.boxes[-1], chain.class_id, boxes, class_id, free) & (off <= GATE)
        return int(np.argmin(np.where(fits, off, np.inf))) if fits.any() else -1

    def _second_boxes(self, chain: _Chain, boxes: np.ndarray, class_id: np.ndarray,
                      free: np.ndarray, pts: float) -> np.ndarray:
        """Rows of the boxes, nearest first (at most HYPOTHESES), that ``chain`` seen once
        could have moved to by ``pts`` at MIN_SPEED or more."""
        frames = (pts - chain.times[-1]) * self.fps
        if frames <= 0:
            return np.zeros(0, np.intp)
        away = _centre_distance(chain.boxes[-1], boxes) / box_sides(chain.boxes[-1]) / frames
        fits = self._fits(chain.boxes[-1], chain.class_id, boxes, class_id, free) & \
            (away >= MIN_SPEED)
        rows = np.flatnonzero(fits)
        return rows[np.argsort(away[rows], kind="stable")][:HYPOTHESES]


def box_centres(boxes: np.ndarray) -> np.ndarray:
    return (boxes[..., :2] + boxes[..., 2:]) / 2


def box_sides(boxes: np.ndarray) -> np.ndarray:
    """Boxes' sizes: the square root of their areas (at least a pixel)."""
    w = np.maximum(boxes[..., 2] - boxes[..., 0], 0.0)
    h = np.maximum(boxes[..., 3] - boxes[..., 1], 0.0)
    return np.maximum(np.sqrt(w * h), 1.0)


def _centre_distance(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    return np.hypot(*(box_centres(boxes) - box_centres(box)).T)
