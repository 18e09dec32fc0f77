"""Clips for scoring tracking: shapes moving along lanes, with their identities, as MOT truth.

A tracking scene puts one classed shape in each of several horizontal lanes, moving sideways
at its own speed and bouncing off the sides of the frame, over the same textured backgrounds,
lighting and noise the detector was trained on. ``occluded=False``: lanes apart and nothing in
front, so every object is always in view and a line across the lanes has an exact count;
``occluded=True``: lanes overlapping and bars sweeping across them in front, so objects pass
behind others and tracks must survive it. Seeds differ from training's (default 2000).

MOT truth (``clip.mot.txt`` beside ``clip.mp4``), one row per object and frame, MOT
Challenge's columns: ``frame (1-based), id, x, y, w, h, 1, class, visibility``: class 1 for an
object to be tracked, 8 ("distractor") for one too hidden to score, so that a tracker neither
gains nor loses for it. The boxes file (``clip.boxes.json``) is written too, so the same clips
score detection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from models.data import (
    CLIP_SIZE,
    ProgressFn,
    _contrasting_colour,
    make_background,
    sample_lighting,
    write_clip,
)
from models.scene import BAR, CLASSES, Scene, SceneObject, Truth, render

TRACKING_SEED = 2000
SCORED, HIDDEN = 1, 8  # MOT Challenge classes: pedestrian (scored), distractor (ignored)


def tracking_scene(rng: np.random.Generator, size: tuple[int, int], *,
                   occluded: bool) -> Scene:
    """Lanes of shapes moving sideways; with ``occluded``, overlapping lanes and bars."""
    width, height = size
    # 3-4 lanes: shapes 60-110 px across at 640x384, 30-55 at the model's 320 (the detector's
    # sure range: it scores AP@0.5 0.36 below 28 px at its scale, 0.69 at 28-45 px, 0.83 above)
    lanes = int(rng.integers(3, 5))
    margin = int(0.1 * max(size))
    background = make_background(rng, (width + margin, height + margin))
    lane_height = height / lanes
    objects = []
    for lane in range(lanes):
        # apart: even a box turned 45 degrees stays inside its lane
        radius = float(rng.uniform(0.26, 0.33)) * lane_height * (1.4 if occluded else 1.0)
        centre_y = (lane + 0.5) * lane_height + (rng.uniform(-0.25, 0.25) * lane_height
                                                 if occluded else 0.0)
        centre = (float(rng.uniform(radius, width - radius)), float(centre_y))
        speed = float(rng.uniform(2.0, 9.0)) * (1 if rng.uniform() < 0.5 else -1)
        objects.append(SceneObject(
            class_id=int(rng.integers(0, len(CLASSES))), centre=centre, velocity=(speed, 0.0),
            radius=radius, aspect=float(rng.uniform(0.9, 1.1)),
            angle=float(rng.uniform(0, 2 * np.pi)), spin=float(rng.uniform(-0.02, 0.02)),
            form=float(rng.uniform()), colour=_contrasting_colour(rng, background, centre,
                                                                  radius),
            second=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
            pattern=int(rng.choice(3, p=[0.6, 0.3, 0.1])),
            exposure=float(rng.uniform(0.3, 1.0))))
    if occluded:  # bars in front, sweeping across the lanes
        for _ in range(int(rng.integers(2, 4))):
            centre = (float(rng.uniform(0, width)), float(rng.uniform(0, height)))
            objects.append(SceneObject(
                class_id=BAR, centre=centre, velocity=(float(rng.uniform(-3, 3)),
                                                       float(rng.uniform(2, 5))),
                radius=0.45 * height, aspect=1.0, angle=float(np.pi / 2 + rng.uniform(-0.3, 0.3)),
                spin=0.0, form=0.0, colour=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
                second=(0, 0, 0), pattern=0, exposure=0.5))
    pan = (0.0, 0.0)
    return Scene(size, background, pan, tuple(objects), sample_lighting(rng, True))


def tracking_frames(seed: int, clip: int, frames: int, size: tuple[int, int], *,
                    occluded: bool) -> Iterator[tuple[np.ndarray, Truth]]:
    rng = np.random.default_rng([seed, 3, clip, int(occluded)])
    scene = tracking_scene(rng, size, occluded=occluded)
    for index in range(frames):
        yield render(scene, float(index), np.random.default_rng([seed, 4, clip, index]))


def mot_truth_path(clip: Path) -> Path:
    """Where a clip's MOT truth lives: ``a.mp4`` -> ``a.mot.txt``."""
    return Path(clip).with_suffix(".mot.txt")


def mot_rows(truths: list[Truth]) -> list[str]:
    """MOT Challenge ground-truth rows of per-frame truths (ids 1-based)."""
    rows = []
    for frame, truth in enumerate(truths, start=1):
        for boxes, ids, kind in ((truth.boxes, truth.ids, SCORED),
                                 (truth.ignore, truth.ignore_ids, HIDDEN)):
            for (x1, y1, x2, y2, _), oid in zip(boxes, ids, strict=True):
                rows.append(f"{frame},{int(oid) + 1},{x1:.2f},{y1:.2f},{x2 - x1:.2f},"
                            f"{y2 - y1:.2f},1,{kind},1")
    return rows


def make_tracking_clip(path: Path, *, seed: int = TRACKING_SEED, clip: int = 0,
                       frames: int = 300, size: tuple[int, int] = CLIP_SIZE, fps: int = 30,
                       occluded: bool = False, progress: ProgressFn | None = None) -> Path:
    """Write a tracking clip, its boxes file and its MOT truth; returns the clip."""
    path = Path(path)
    truths = write_clip(path, tracking_frames(seed, clip, frames, size, occluded=occluded),
                        frames=frames, size=size, fps=fps, progress=progress)
    mot_truth_path(path).write_text("\n".join(mot_rows(truths)) + "\n")
    return path


def scene_patterns(seed: int, clip: int, size: tuple[int, int], *, occluded: bool) -> list[int]:
    """The fill pattern (``SceneObject.pattern``) of each object of a tracking clip, by its
    index (MOT id - 1): the truth a classifier of patterns is scored against."""
    scene = tracking_scene(np.random.default_rng([seed, 3, clip, int(occluded)]), size,
                           occluded=occluded)
    return [obj.pattern for obj in scene.objects]


def crowd_frames(seed: int, frames: int, size: tuple[int, int] = CLIP_SIZE, *,
                 columns: int = 10, rows: int = 5) -> Iterator[tuple[np.ndarray, Truth]]:
    """A crowd: ``columns`` x ``rows`` shapes, one a cell, each drifting about its cell (the
    detector's sure size at 640x384: 56-62 px across), over the usual backgrounds: a scene
    of about 50 boxes a frame for measuring what per-object work costs."""
    rng = np.random.default_rng([seed, 9])
    width, height = size
    background = make_background(rng, (width, height))
    cell_w, cell_h = width / columns, height / rows
    objects = []
    for row in range(rows):
        for column in range(columns):
            radius = float(rng.uniform(28, 31))
            centre = ((column + 0.5) * cell_w, (row + 0.5) * cell_h)
            drift = [(float(t), centre[0] + float(rng.uniform(-4, 4)),
                      centre[1] + float(rng.uniform(-4, 4))) for t in range(0, frames + 60, 60)]
            objects.append(SceneObject(
                class_id=int(rng.integers(0, len(CLASSES))), centre=centre, velocity=(0, 0),
                radius=radius, aspect=1.0, angle=float(rng.uniform(0, 2 * np.pi)),
                spin=0.0, form=float(rng.uniform()),
                colour=_contrasting_colour(rng, background, centre, radius),
                second=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
                pattern=int(rng.choice(3, p=[0.6, 0.3, 0.1])), exposure=0.5,
                path=tuple(drift)))
    scene = Scene(size, background, (0.0, 0.0), tuple(objects), sample_lighting(rng, False))
    for index in range(frames):
        yield render(scene, float(index), np.random.default_rng([seed, 10, index]))


def make_crowd_clip(path: Path, *, seed: int = TRACKING_SEED, frames: int = 300,
                    fps: int = 30) -> Path:
    """Write the crowd clip (``crowd_frames``) and its boxes file; returns the clip."""
    write_clip(Path(path), crowd_frames(seed, frames), frames=frames, size=CLIP_SIZE, fps=fps)
    return Path(path)
