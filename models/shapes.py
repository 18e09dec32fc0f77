"""The shapes of the synthetic world: the detector's classes and the distractors, each a
``SceneObject`` whose outline and position at time ``t`` (frames) are pure functions of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Shapes that stay distinct at 20 px after blur and JPEG (a five-pointed star gave way to the
# ring: at that size "spiky" was all the network could tell a star and a cross by).
CLASSES: tuple[str, ...] = ("disc", "box", "triangle", "ring", "cross")
BLOB, BAR = -1, -2  # distractors: irregular blobs and long bars, never to be detected


@dataclass(frozen=True, slots=True)
class SceneObject:
    """One shape. Positions and sizes are in pixels of the scene's frame, speeds per frame."""

    class_id: int  # index into CLASSES, or BLOB / BAR
    centre: tuple[float, float]
    velocity: tuple[float, float]
    radius: float  # half the extent before aspect and rotation
    aspect: float  # width / height before rotation
    angle: float  # radians
    spin: float  # radians per frame
    form: float  # class-specific: ring hole size, cross arm width, triangle apex...
    colour: tuple[int, int, int]
    second: tuple[int, int, int]  # the other colour of a two-tone pattern
    pattern: int  # 0 solid, 1 shaded, 2 striped
    exposure: float  # fraction of a frame the shutter is open: motion blur length / speed
    # keyframes (t, x, y) of the centre, straight between them and still before the first
    # and after the last (may lie outside the frame); empty: ``centre`` + ``velocity``,
    # bouncing
    path: tuple[tuple[float, float, float], ...] = ()


def outline(obj: SceneObject, t: float, size: tuple[int, int]) -> np.ndarray:
    """The object's polygon at time ``t`` (frames), in frame pixels, as (K, 2) float32."""
    unit = _unit_outline(obj.class_id, obj.form)
    stretch = np.array([obj.aspect ** 0.5, obj.aspect ** -0.5], dtype=np.float32)
    angle = obj.angle + obj.spin * t
    c, s = np.cos(angle), np.sin(angle)
    rotation = np.array([[c, -s], [s, c]], dtype=np.float32)
    centre = np.asarray(position(obj, t, size), dtype=np.float32)
    return (unit * stretch) @ rotation.T * obj.radius + centre


def position(obj: SceneObject, t: float, size: tuple[int, int]) -> tuple[float, float]:
    """Centre at time ``t``: along its ``path``, or straight lines that bounce off walls a
    little outside the frame, so objects in clips stay around and are sometimes cut by the
    frame edge."""
    if obj.path:
        times, xs, ys = np.asarray(obj.path, np.float64).T
        return float(np.interp(t, times, xs)), float(np.interp(t, times, ys))
    out = []
    for start, speed, extent in zip(obj.centre, obj.velocity, size, strict=True):
        low = obj.radius * 0.2
        out.append(low + bounce(start - low + speed * t, int(extent - 2 * low)))
    return out[0], out[1]


def velocity_at(obj: SceneObject, t: float) -> tuple[float, float]:
    """Pixels per frame at time ``t`` (what its motion blur follows)."""
    if not obj.path:
        return obj.velocity
    size = (1 << 30, 1 << 30)  # a path is not bounced: no walls
    (x0, y0), (x1, y1) = position(obj, t - 0.5, size), position(obj, t + 0.5, size)
    return x1 - x0, y1 - y0


def _unit_outline(class_id: int, form: float) -> np.ndarray:
    """A shape of extent about [-1, 1]^2 before stretch and rotation."""
    if class_id == 0:  # disc (an ellipse once stretched)
        a = np.linspace(0, 2 * np.pi, 40, endpoint=False)
        pts = np.stack([np.cos(a), np.sin(a)], 1)
    elif class_id == 1:  # box
        pts = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]])
    elif class_id == 2:  # triangle, apex anywhere along the top edge
        pts = np.array([[-1, 1], [1, 1], [form * 2 - 1, -1]])
    elif class_id == 3:  # ring, hole radius 0.45..0.65: one "keyhole" polygon, outer circle
        a = np.linspace(0, 2 * np.pi, 41)  # then the hole backwards; the seam has no width
        circle = np.stack([np.cos(a), np.sin(a)], 1)
        pts = np.concatenate([circle, circle[::-1] * (0.45 + 0.2 * form)])
    elif class_id == 4:  # plus-shaped cross, arm half-width 0.22..0.36
        w = 0.22 + 0.14 * form
        pts = np.array([[-w, -1], [w, -1], [w, -w], [1, -w], [1, w], [w, w], [w, 1], [-w, 1],
                        [-w, w], [-1, w], [-1, -w], [-w, -w]])
    elif class_id == BLOB:
        pts = _blob(form)
    elif class_id == BAR:  # long and thin: 6 to 15 times longer than wide
        pts = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * (1.0, 1.0 / (6 + 9 * form))
    else:
        raise ValueError(f"class_id must be in 0..{len(CLASSES) - 1}, {BLOB} or {BAR}, "
                         f"got {class_id}")
    return np.asarray(pts, dtype=np.float32)


def _blob(form: float) -> np.ndarray:
    """An irregular polygon, the same for the same ``form``: clutter that is no class."""
    rng = np.random.default_rng(int(form * 1e6))
    count = int(rng.integers(6, 12))
    a = np.sort(rng.uniform(0, 2 * np.pi, count))
    r = rng.uniform(0.35, 1.0, count)
    return np.stack([np.cos(a) * r, np.sin(a) * r], 1)


def bounce(offset: float, span: int) -> float:
    if span <= 0:
        return 0.0
    period = abs(offset) % (2 * span)
    return period if period <= span else 2 * span - period
