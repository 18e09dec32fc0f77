"""The counting set's truth: each line's crossings per direction, walked from the objects'
whole outlines (hidden or not: the object is there) apart from vidpipe's counter, and the
count error of found counts against it.

A crossing is *certain* when the anchor (the bottom-centre of the outline's part inside the
picture: a camera sees no further, and a line drawn to the picture's edge ends there) gets
more than ``MARGIN`` times the object's radius past the line on one side and then on the
other, its path between cutting the line between its two ends. Each change of side of the
anchor is a *possible* crossing: an object stopped on the line sways across it as it turns
(up to a third of its radius in the set), one gliding along the line sits a few pixels past
it, and one still on the line when the clip ends has not settled anywhere — whether such a
crossing counted, nobody watching could say. Found counts between the certain and possible
counts are right; the error is how far outside that range they fall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from models.scene import Scene
from models.shapes import outline

# how far past the line, in the object's radii, makes a side certain: more than the set's
# stopped objects halt from the line (0.15) plus the sway of most of them as they turn
MARGIN = 0.25
TRUTH_VERSION = 2  # 1: every change of side counted, the anchor not cut at the picture

Segment = tuple[float, float, float, float]


@dataclass(slots=True)
class _Walk:
    """One object's walk against one line: its last side (any distance) and where, and its
    last side beyond the margin and where."""

    side: float = 0.0
    at: np.ndarray | None = None
    settled: float = 0.0
    settled_at: np.ndarray | None = None


def walked_counts(scene: Scene, lines: tuple[tuple[str, Segment], ...],
                 zone: tuple[str, tuple[tuple[float, float], ...]],
                 frames: int) -> dict[str, Any]:
    """Each line's certain crossings per direction (``lines``), every change of side
    (``lines_at_most``), and the zone's entries and exits (by the whole outline's anchor:
    leaving the picture is leaving the zone)."""
    size = scene.size
    classed = [k for k, o in enumerate(scene.objects) if o.class_id >= 0]
    certain = {name: {"in": 0, "out": 0} for name, _ in lines}
    possible = {name: {"in": 0, "out": 0} for name, _ in lines}
    walks = {(name, k): _Walk() for name, _ in lines for k in classed}
    polygon = np.asarray(zone[1], np.float32)
    inside: dict[int, bool] = {}
    entered = exited = 0
    for index in range(frames):
        for k in classed:
            obj = scene.objects[k]
            poly = outline(obj, float(index), size)
            whole = np.array([(poly[:, 0].min() + poly[:, 0].max()) / 2, poly[:, 1].max()])
            now = cv2.pointPolygonTest(polygon, (float(whole[0]), float(whole[1])), False) > 0
            entered += int(now and not inside.get(k, False))
            exited += int(inside.get(k, False) and not now)
            inside[k] = now
            anchor = _seen_anchor(poly, size)
            if anchor is None:
                continue
            for name, points in lines:
                _step(walks[(name, k)], points, anchor, MARGIN * obj.radius,
                      certain[name], possible[name])
    for name, _ in lines:
        for d in ("in", "out"):
            possible[name][d] = max(possible[name][d], certain[name][d])
    return {"lines": certain, "lines_at_most": possible,
            "zones": {zone[0]: {"entered": entered, "exited": exited}}}


def object_boxes(scene: Scene, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame ``index``'s classed objects: their ids (indices in the scene) and the boxes of
    their whole outlines' parts in the picture (xyxy), hidden or not; an object wholly
    outside is left out."""
    ids, boxes = [], []
    for k, obj in enumerate(scene.objects):
        box = _seen_box(outline(obj, float(index), scene.size), scene.size) \
            if obj.class_id >= 0 else None
        if box is not None:
            ids.append(k)
            boxes.append(box)
    return np.asarray(ids, np.int64), np.asarray(boxes, np.float64).reshape(-1, 4)


def _seen_anchor(poly: np.ndarray, size: tuple[int, int]) -> np.ndarray | None:
    """The bottom-centre of the outline's part in the picture (None: all of it outside)."""
    box = _seen_box(poly, size)
    return None if box is None else np.array([(box[0] + box[2]) / 2, box[3]])


def _seen_box(poly: np.ndarray, size: tuple[int, int]) -> np.ndarray | None:
    """The xyxy box of the outline's part in the picture, in the outline's float32 (None: all
    of it outside)."""
    xs = np.clip(poly[:, 0], 0, size[0])
    ys = np.clip(poly[:, 1], 0, size[1])
    if xs.max() <= xs.min() or ys.max() <= ys.min():
        return None
    return np.array([xs.min(), ys.min(), xs.max(), ys.max()])


def _step(walk: _Walk, points: Segment, anchor: np.ndarray, margin: float,
          certain: dict[str, int], possible: dict[str, int]) -> None:
    """One frame of an object's walk against a line: the crossings it completes."""
    distance = side_of(points, anchor)
    if distance == 0:
        return
    side = float(np.sign(distance))
    direction = "in" if side < 0 else "out"  # from the right-hand side to the left: in
    if walk.at is not None and walk.side != side and cuts_within(points, walk.at, anchor):
        possible[direction] += 1
    walk.side, walk.at = side, anchor
    if abs(distance) <= margin:
        return
    if walk.settled_at is not None and walk.settled != side and \
            cuts_within(points, walk.settled_at, anchor):
        certain[direction] += 1
    walk.settled, walk.settled_at = side, anchor


def side_of(points: Segment, p: np.ndarray) -> float:
    """Signed distance of ``p`` from the line (pixels): > 0 on its right-hand side walked
    from its first point to its second (y down), < 0 on its left."""
    x1, y1, x2, y2 = points
    return float(((x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1)) / np.hypot(x2 - x1, y2 - y1))


def cuts_within(points: Segment, p: np.ndarray, q: np.ndarray) -> bool:
    """Whether the path p -> q (on opposite sides) meets the line between its two ends."""
    x1, y1, x2, y2 = points
    dp, dq = side_of(points, p), side_of(points, q)
    at = p + (q - p) * (dp / (dp - dq))
    d = np.array([x2 - x1, y2 - y1])
    along = float(np.dot(at - (x1, y1), d) / np.dot(d, d))
    return 0.0 <= along <= 1.0


def count_error(found: dict[str, dict[str, dict[str, int]]],
                truth: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Clips' line counts (clip -> line -> {"in", "out"}) against their truth (clip -> its
    counts.json): per clip, line and direction, how far the count falls below the certain
    crossings or above the possible ones, summed, and over the certain crossings."""
    errors = crossings = possible = 0
    for clip, counts in truth.items():
        at_most = counts.get("lines_at_most", counts["lines"])
        for name, true in counts["lines"].items():
            for d in ("in", "out"):
                n = found[clip][name][d]
                errors += max(0, true[d] - n, n - at_most[name][d])
                crossings += true[d]
                possible += at_most[name][d] - true[d]
    return {"errors": errors, "crossings": crossings, "possible": possible,
            "error": round(errors / crossings, 4) if crossings else 0.0}
