"""The synthetic world the shapes detector learns: objects, clutter, lighting, and their rendering.

A ``Scene`` is a frame size, a textured and cluttered background, and a list of objects in
depth order (the first drawn first, so later ones occlude earlier ones). Objects are the
detector's classes (``CLASSES``) or distractors (negative ``class_id``: irregular blobs and
long bars that occlude and must not be detected). Each object may move and spin, so one scene
renders both a single training image (``t = 0``) and every frame of a clip.

``render`` returns the image and its ground truth: the boxes of objects visible enough to be
fair game, and the boxes of those too hidden to count either way (``ignore``), which the loss
and the mAP both leave out — a detector is neither paid nor fined for a shape that is 80%
behind another or out of the frame. A box is the extent of what is *visible* of the object
(COCO's convention): cut by the frame edge or by an object in front, the box shrinks to the
part in view, since no detector can see where a hidden edge lies.

Everything is numpy and OpenCV on small patches, so rendering does not dominate CPU training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import cv2
import numpy as np

from models.shapes import BAR, BLOB, CLASSES, SceneObject, bounce, outline, velocity_at

VISIBLE_MIN = 0.6  # visible area / full area below which an object is ignored, not scored
VISIBLE_PIXEL = 0.5  # seen coverage from which a pixel counts in a visible part's extent
SUPERSAMPLE = 4  # coverage resolution of shape edges: 4x4 samples per pixel
SUBPIXEL = 4  # fillPoly's shift: vertices with 1/16 (fine) pixel precision


@dataclass(frozen=True, slots=True)
class Lighting:
    """Brightness gain, a linear gradient across the frame, a colour cast; varies over time."""

    gain: float
    swing: float  # relative amplitude of the slow brightness oscillation in clips
    period: float  # frames
    gradient: tuple[float, float]  # gain change per frame width / height
    cast: tuple[float, float, float]
    noise: float  # sensor noise sigma, 0-255 scale


@dataclass(frozen=True, slots=True)
class Scene:
    size: tuple[int, int]  # (width, height)
    background: np.ndarray  # HxWx3 uint8, larger than size when the camera pans
    pan: tuple[float, float]  # camera drift in pixels per frame
    objects: tuple[SceneObject, ...]
    lighting: Lighting


@dataclass(frozen=True, slots=True)
class Truth:
    """Ground truth of one rendered image: rows of x1, y1, x2, y2, class_id (float32), and
    each row's object: its index in the scene's objects (the identity tracking is scored on)."""

    boxes: np.ndarray  # (N, 5) objects to detect
    ignore: np.ndarray  # (M, 5) objects too hidden to score
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # (N,)
    ignore_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # (M,)


def render(scene: Scene, t: float = 0.0,
           rng: np.random.Generator | None = None) -> tuple[np.ndarray, Truth]:
    """The frame at time ``t`` as HxWx3 uint8 RGB, and its ground truth.

    ``rng`` draws the sensor noise; without one the frame is noiseless.
    """
    width, height = scene.size
    image = _background_view(scene, t).astype(np.float32)
    polygons = [outline(obj, t, scene.size) for obj in scene.objects]
    masks = [_rasterise(poly, scene.size) for poly in polygons]
    visible = _visible_parts(polygons, masks, scene.size)
    for obj, poly, mask in zip(scene.objects, polygons, masks, strict=True):
        if mask is not None:
            _composite(image, obj, poly, mask, t)
    _light(image, scene.lighting, t)
    if rng is not None and scene.lighting.noise > 0:
        noise = rng.standard_normal(image.shape, dtype=np.float32)
        noise *= scene.lighting.noise
        image += noise
    frame = np.clip(image, 0, 255).astype(np.uint8)
    return frame, _truth(scene, polygons, visible)


def _background_view(scene: Scene, t: float) -> np.ndarray:
    """The part of the (larger) background the panning camera sees at time ``t``."""
    width, height = scene.size
    bh, bw = scene.background.shape[:2]
    x = int(round(bounce(scene.pan[0] * t, bw - width)))
    y = int(round(bounce(scene.pan[1] * t, bh - height)))
    return scene.background[y:y + height, x:x + width]


Mask = tuple[int, int, np.ndarray]  # x0, y0 of the patch in the frame, patch coverage 0..1


def _rasterise(poly: np.ndarray, size: tuple[int, int], margin: int = 0) -> Mask | None:
    """Antialiased coverage of a polygon over its bounding patch, clipped to the frame."""
    width, height = size
    x0 = max(0, int(np.floor(poly[:, 0].min())) - margin)
    y0 = max(0, int(np.floor(poly[:, 1].min())) - margin)
    x1 = min(width, int(np.ceil(poly[:, 0].max())) + 1 + margin)
    y1 = min(height, int(np.ceil(poly[:, 1].max())) + 1 + margin)
    if x1 <= x0 or y1 <= y0:
        return None
    # Coverage by supersampling: fill at SUPERSAMPLE x resolution (OpenCV fills the pixels
    # whose centres are inside; its centres sit on integers), then average down. LINE_AA
    # would be cheaper but grows every shape by about half a pixel, which biases boxes.
    s = SUPERSAMPLE
    fine = np.zeros(((y1 - y0) * s, (x1 - x0) * s), dtype=np.uint8)
    pts = np.round(((poly - (x0, y0)) * s - 0.5) * (1 << SUBPIXEL)).astype(np.int32)
    cv2.fillPoly(fine, [pts], 255, lineType=cv2.LINE_8, shift=SUBPIXEL)
    patch = cv2.resize(fine, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
    return x0, y0, patch.astype(np.float32) / 255.0


class Visible(NamedTuple):
    """What later objects and the frame edge leave of one object."""

    fraction: float  # visible area / full area
    box: tuple[int, int, int, int] | None  # pixel extent x1, y1, x2, y2 (exclusive) in view


def _visible_parts(polygons: list[np.ndarray], masks: list[Mask | None],
                   size: tuple[int, int]) -> list[Visible]:
    """Per object, the fraction of its area in view and the pixel extent of that part."""
    width, height = size
    covered = np.zeros((height, width), dtype=np.float32)
    parts = [Visible(0.0, None)] * len(polygons)
    for i in range(len(polygons) - 1, -1, -1):  # front to back
        mask = masks[i]
        area = float(cv2.contourArea(polygons[i]))
        if mask is None or area <= 0:
            continue
        x0, y0, patch = mask
        region = covered[y0:y0 + patch.shape[0], x0:x0 + patch.shape[1]]
        seen = patch * (1.0 - region)
        rows, cols = np.nonzero(seen > VISIBLE_PIXEL)
        box = None if len(rows) == 0 else (x0 + int(cols.min()), y0 + int(rows.min()),
                                           x0 + int(cols.max()) + 1, y0 + int(rows.max()) + 1)
        parts[i] = Visible(float(seen.sum()) / area, box)
        np.maximum(region, patch, out=region)
    return parts


def _composite(image: np.ndarray, obj: SceneObject, poly: np.ndarray, mask: Mask,
               t: float) -> None:
    """Blend the object over ``image`` in place, smeared along its motion for the exposure."""
    kernel = _motion_kernel(obj, t)
    if kernel is not None:  # redo the mask with room for the smear, then blur it
        wider = _rasterise(poly, (image.shape[1], image.shape[0]), kernel.shape[0] // 2 + 1)
        if wider is None:
            return
        x0, y0, alpha = wider
        alpha = cv2.filter2D(alpha, -1, kernel, borderType=cv2.BORDER_CONSTANT)
    else:
        x0, y0, alpha = mask
    h, w = alpha.shape
    paint = _paint(obj, poly - (x0, y0), (w, h), t)
    region = image[y0:y0 + h, x0:x0 + w]
    a = alpha[:, :, None]
    region += (paint - region) * a


def _motion_kernel(obj: SceneObject, t: float) -> np.ndarray | None:
    """A normalised line kernel along the velocity, as long as the object moves while exposed."""
    vx, vy = velocity_at(obj, t)
    length = float(np.hypot(vx, vy)) * obj.exposure
    if length < 1.5:
        return None
    k = int(np.ceil(length)) | 1
    kernel = np.zeros((k, k), dtype=np.float32)
    c, half = k // 2, length / 2
    dx, dy = vx / np.hypot(vx, vy) * half, vy / np.hypot(vx, vy) * half
    cv2.line(kernel, (round(c - dx), round(c - dy)), (round(c + dx), round(c + dy)), 1.0, 1,
             cv2.LINE_AA)
    return kernel / kernel.sum()


def _paint(obj: SceneObject, poly: np.ndarray, size: tuple[int, int], t: float) -> np.ndarray:
    """The object's surface over its patch: one colour, shaded, or two-colour stripes."""
    w, h = size
    colour = np.asarray(obj.colour, dtype=np.float32)
    if obj.pattern == 0:
        return np.broadcast_to(colour, (h, w, 3))
    angle = obj.angle + obj.spin * t
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    cx, cy = poly.mean(0)
    along = ((xs - cx) * np.cos(angle) + (ys - cy) * np.sin(angle)) / max(obj.radius, 1.0)
    if obj.pattern == 1:
        shade = np.clip(1.0 + 0.35 * along, 0.5, 1.5)[:, :, None]
        return colour * shade
    stripes = (np.sin(along * np.pi * (2 + 3 * obj.form)) > 0)[:, :, None]
    return np.where(stripes, colour, np.asarray(obj.second, dtype=np.float32))


def _light(image: np.ndarray, lighting: Lighting, t: float) -> None:
    """Scale the frame in place by brightness (slowly swinging), a gradient and a colour cast."""
    height, width = image.shape[:2]
    gain = lighting.gain * (1.0 + lighting.swing * np.sin(2 * np.pi * t / lighting.period))
    gx = np.linspace(-0.5, 0.5, width, dtype=np.float32) * lighting.gradient[0]
    gy = np.linspace(-0.5, 0.5, height, dtype=np.float32) * lighting.gradient[1]
    field = (1.0 + gy[:, None] + gx[None, :]) * np.float32(gain)
    image *= field[:, :, None] * np.asarray(lighting.cast, dtype=np.float32)


def _truth(scene: Scene, polygons: list[np.ndarray], visible: list[Visible]) -> Truth:
    """Boxes of the visible part of each classed object (the outline's exact extent where
    nothing cuts it, else cut down to the pixels in view); too-hidden ones go to ignore."""
    width, height = scene.size
    keep: list[list[float]] = []
    ignore: list[list[float]] = []
    keep_ids: list[int] = []
    ignore_ids: list[int] = []
    for index, (obj, poly, (fraction, seen)) in enumerate(zip(scene.objects, polygons, visible,
                                                              strict=True)):
        if obj.class_id < 0 or fraction <= 0 or seen is None:
            continue
        # a pixel at least half seen is in; half a pixel of slack each way keeps the exact
        # outline extent where nothing cuts the object
        x1, y1 = np.maximum(np.clip(poly.min(0), 0, (width, height)), np.add(seen[:2], -0.5))
        x2, y2 = np.minimum(np.clip(poly.max(0), 0, (width, height)), np.add(seen[2:], 0.5))
        if x2 - x1 < 1 or y2 - y1 < 1:
            continue
        row = [float(x1), float(y1), float(x2), float(y2), float(obj.class_id)]
        (keep if fraction >= VISIBLE_MIN else ignore).append(row)
        (keep_ids if fraction >= VISIBLE_MIN else ignore_ids).append(index)
    return Truth(np.asarray(keep, np.float32).reshape(-1, 5),
                 np.asarray(ignore, np.float32).reshape(-1, 5),
                 np.asarray(keep_ids, np.int32), np.asarray(ignore_ids, np.int32))


__all__ = ["BAR", "BLOB", "CLASSES", "VISIBLE_MIN", "Lighting", "Scene", "SceneObject", "Truth",
           "render"]
