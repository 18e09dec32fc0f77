"""Clips for scoring counting: shapes doing what fools counters, with truth counts.

Each clip (640x384, 30 fps, 10 s) mixes objects that pass through at speeds from 1.5 px a
frame to 3 times their size a frame, enter and leave at the frame's edges, stop on the
middle line for 3-5 s and go on, wander back and forth across it, cross side by side in
groups or close behind one another, bounce about the frame, and pass behind bars drawn in
front of them; over the detector's textured backgrounds, lighting and noise. Three lines
(``LINES``: a vertical one through the middle, a horizontal one, a short segment) and a zone
(``ZONE``) are scored.

Truth (``clip.counts.json`` beside ``clip.mp4``, ``models.counting_truth``): each line's
crossings per direction — those certain and those possible (an object swaying on the line) —
and the zone's entries and exits, walked by every object's whole outline (hidden or not: the
object is there) with the counter's anchor, apart from vidpipe's counter. The MOT truth and
boxes file are written too (``models.tracking_data``). ``noisy``: the same scene under
strong sensor noise and defocus — the same truth for a detector that sees worse.

Seeds split the set: ``TUNE_SEEDS`` to tune counting rules and trackers on, ``HELD_OUT_SEEDS``
only to report on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from models.counting_truth import TRUTH_VERSION, walked_counts
from models.data import (
    ProgressFn,
    _contrasting_colour,
    make_background,
    sample_lighting,
    write_clip,
)
from models.scene import BAR, CLASSES, Scene, SceneObject, Truth, render
from models.tracking_data import mot_rows, mot_truth_path

SIZE = (640, 384)
FPS, FRAMES = 30, 300
TUNE_SEEDS = tuple(range(3000, 3012))
HELD_OUT_SEEDS = tuple(range(4000, 4012))
SET_VERSION = 2  # 1: 6 clips a part, bars where a draw put them (none in the held-out part)
# (name, (x1, y1, x2, y2)): "in" is a crossing from the right-hand side of the line walked
# from its first point to its second (y down) to its left, as vidpipe's lines count
LINES = (("middle", (320.0, 0.0, 320.0, 384.0)), ("across", (0.0, 230.0, 640.0, 230.0)),
         ("short", (160.0, 40.0, 160.0, 200.0)))
ZONE = ("right", ((420.0, 0.0), (640.0, 0.0), (640.0, 384.0), (420.0, 384.0)))
NOISE_SIGMA, DEFOCUS_SIGMA = 22.0, 1.3  # the noisy variant's sensor noise and blur
MAX_BLUR_PX = 24.0  # a fast object's smear at most (a short shutter)

Path_ = tuple[tuple[float, float, float], ...]


def counts_path(clip: Path) -> Path:
    """Where a clip's truth counts live: ``a.mp4`` -> ``a.counts.json``."""
    return Path(clip).with_suffix(".counts.json")


def _across(rng: np.random.Generator, r: float, speed: float, start: float,
            y: float | None = None, direction: int | None = None) -> Path_:
    """From outside one side of the frame to outside the other, drifting a little."""
    width, height = SIZE
    direction = direction if direction is not None else (1 if rng.uniform() < 0.5 else -1)
    y0 = y if y is not None else float(rng.uniform(r, height - r))
    x0, x1 = (-1.3 * r, width + 1.3 * r)[::direction]
    duration = abs(x1 - x0) / speed
    y1 = float(np.clip(y0 + rng.uniform(-0.25, 0.25) * height, r, height - r))
    return ((start, x0, y0), (start + duration, x1, y1))


def _stop_on_line(rng: np.random.Generator, r: float, speed: float, start: float) -> Path_:
    """To the middle line, still on it for 3-5 s, then on through."""
    width, height = SIZE
    direction = 1 if rng.uniform() < 0.5 else -1
    y = float(rng.uniform(r, height - r))
    x0, x1 = (-1.3 * r, width + 1.3 * r)[::direction]
    on = width / 2 + float(rng.uniform(-0.15, 0.15)) * r
    arrive = start + abs(on - x0) / speed
    leave = arrive + float(rng.uniform(3, 5)) * FPS
    return ((start, x0, y), (arrive, on, y), (leave, on, y),
            (leave + abs(x1 - on) / speed, x1, y))


def _wander(rng: np.random.Generator, r: float, speed: float, start: float) -> Path_:
    """Back and forth across the middle line, turning 1-3 sizes past it."""
    width, height = SIZE
    y = float(rng.uniform(r, height - r))
    side = 1 if rng.uniform() < 0.5 else -1
    x = width / 2 + side * float(rng.uniform(1.5, 3.5)) * r
    points, t = [(start, x, y)], start
    for _ in range(int(rng.integers(2, 5))):
        side = -side
        nx = width / 2 + side * float(rng.uniform(1.0, 3.0)) * r
        t += abs(nx - x) / speed
        x = nx
        y = float(np.clip(y + rng.uniform(-0.3, 0.3) * r, r, height - r))
        points.append((t, x, y))
    return tuple(points)


def _vertical(rng: np.random.Generator, r: float, speed: float, start: float) -> Path_:
    """From outside the top or bottom edge to outside the other, across the horizontal line."""
    width, height = SIZE
    down = rng.uniform() < 0.5
    x0 = float(rng.uniform(r, width - r))
    y0, y1 = (-1.3 * r, height + 1.3 * r) if down else (height + 1.3 * r, -1.3 * r)
    x1 = float(np.clip(x0 + rng.uniform(-0.3, 0.3) * width, r, width - r))
    return ((start, x0, y0), (start + abs(y1 - y0) / speed, x1, y1))


def _shifted(path: Path_, dt: float, dx: float, dy: float) -> Path_:
    return tuple((t + dt, x + dx, y + dy) for t, x, y in path)


def _paths(rng: np.random.Generator, behaviour: str, r: float, speed: float,
           start: float) -> Iterator[Path_]:
    """The paths of one behaviour's objects (a group's or a trail's two or three), each
    drawn when the one before has been used (the clips' draws follow that order)."""
    if behaviour in ("pass", "fast"):
        yield _across(rng, r, speed, start)
    elif behaviour == "stop":
        yield _stop_on_line(rng, r, speed, float(rng.uniform(0, 20)))
    elif behaviour == "wander":
        yield _wander(rng, r, speed, start)
    elif behaviour == "vertical":
        yield _vertical(rng, r, speed, start)
    else:
        path = _across(rng, r, speed, start, y=float(rng.uniform(2.5 * r, SIZE[1] - 2.5 * r)))
        for k in range(int(rng.integers(2, 4))):
            if behaviour == "group":  # side by side, a little apart
                yield _shifted(path, float(rng.uniform(-3, 3)), 0.0, (k - 1) * 2.2 * r)
            else:  # a trail: one behind the other, a fraction of a size between them
                gap = k * (2 + float(rng.uniform(0.2, 1.0))) * r
                yield _shifted(path, gap / speed, 0.0, float(rng.uniform(-0.2, 0.2)) * r)


BEHAVIOURS = ("pass", "pass", "pass", "stop", "wander", "group", "trail", "bounce", "bounce",
              "vertical", "fast")


def counting_objects(rng: np.random.Generator, background: np.ndarray) -> list[SceneObject]:
    """Eight to ten behaviours, started at staggered times."""
    width, height = SIZE
    objects: list[SceneObject] = []

    def add(path: Path_, r: float, speed: float, velocity: tuple[float, float] = (0.0, 0.0),
            centre: tuple[float, float] | None = None) -> None:
        centre = centre or (path[0][1], path[0][2])
        exposure = min(float(rng.uniform(0.3, 1.0)), MAX_BLUR_PX / max(speed, 1e-6))
        objects.append(SceneObject(
            class_id=int(rng.integers(0, len(CLASSES))), centre=centre, velocity=velocity,
            radius=r, aspect=float(rng.uniform(0.9, 1.1)), angle=float(rng.uniform(0, 2 * np.pi)),
            spin=float(rng.uniform(-0.02, 0.02)), form=float(rng.uniform()),
            colour=_contrasting_colour(rng, background, (width / 2, height / 2), r),
            second=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
            pattern=int(rng.choice(3, p=[0.6, 0.3, 0.1])), exposure=exposure, path=path))

    for behaviour in rng.choice(BEHAVIOURS, int(rng.integers(8, 11))):
        r = float(rng.uniform(24, 42))
        speed = float(rng.uniform(1.5, 8.0))
        start = float(rng.uniform(0, 0.6 * FRAMES))
        if behaviour == "fast":
            speed = float(rng.uniform(0.5, 3.0)) * 2 * r
        if behaviour != "bounce":
            for path in _paths(rng, str(behaviour), r, speed, start):
                add(path, r, speed)
            continue
        velocity = (float(rng.uniform(1, 6)) * rng.choice([-1, 1]),  # as the tracking clips'
                    float(rng.uniform(0.5, 4)) * rng.choice([-1, 1]))
        centre = (float(rng.uniform(r, width - r)), float(rng.uniform(r, height - r)))
        add((), r, float(np.hypot(*velocity)), velocity, centre)
    return objects


def bars_in_front(seed: int) -> list[SceneObject]:
    """One or two bars drifting across in front of everything, in the clips of odd seeds:
    half of each part passes behind occluders (drawn apart from the objects' draws)."""
    if seed % 2 == 0:
        return []
    rng = np.random.default_rng([seed, 7])
    width, height = SIZE
    return [SceneObject(
        class_id=BAR, centre=(float(rng.uniform(0, width)), height / 2),
        velocity=(float(rng.uniform(-1.5, 1.5)), 0.0), radius=0.55 * height,
        aspect=1.0, angle=float(np.pi / 2 + rng.uniform(-0.2, 0.2)), spin=0.0,
        form=0.0, colour=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
        second=(0, 0, 0), pattern=0, exposure=0.5) for _ in range(int(rng.integers(1, 3)))]


def counting_scene(seed: int) -> Scene:
    rng = np.random.default_rng([seed, 5])
    width, height = SIZE
    margin = int(0.1 * width)
    background = make_background(rng, (width + margin, height + margin))
    objects = counting_objects(rng, background) + bars_in_front(seed)
    return Scene(SIZE, background, (0.0, 0.0), tuple(objects), sample_lighting(rng, True))


def counting_frames(scene: Scene, seed: int, noisy: bool) -> Iterator[tuple[np.ndarray, Truth]]:
    for index in range(FRAMES):
        rng = np.random.default_rng([seed, 6, index])
        image, truth = render(scene, float(index), rng)
        if noisy:
            image = cv2.GaussianBlur(image, (0, 0), DEFOCUS_SIGMA).astype(np.float32)
            image += rng.standard_normal(image.shape, dtype=np.float32) * NOISE_SIGMA
            image = np.clip(image, 0, 255).astype(np.uint8)
        yield image, truth


def truth_counts(scene: Scene) -> dict[str, Any]:
    """The scene's certain and possible crossings of ``LINES`` and its ``ZONE`` visits
    (``models.counting_truth``)."""
    return walked_counts(scene, LINES, ZONE, FRAMES)


def make_counting_clip(path: Path, seed: int, *, noisy: bool = False,
                       progress: ProgressFn | None = None) -> Path:
    """Write a counting clip, its boxes file, MOT truth and truth counts; returns the clip."""
    path = Path(path)
    scene = counting_scene(seed)
    truths = write_clip(path, counting_frames(scene, seed, noisy), frames=FRAMES, size=SIZE,
                        fps=FPS, progress=progress)
    mot_truth_path(path).write_text("\n".join(mot_rows(truths)) + "\n")
    write_truth(path, scene, seed, noisy)
    return path


def write_truth(clip: Path, scene: Scene, seed: int, noisy: bool) -> None:
    """The clip's truth counts, with the versions of the set and truth they were made by."""
    counts_path(clip).write_text(json.dumps(
        {"seed": seed, "noisy": noisy, "set_version": SET_VERSION,
         "truth_version": TRUTH_VERSION, **truth_counts(scene), "lines_at": dict(LINES),
         "zone_at": ZONE[1]}, indent=1))


def counting_set(folder: Path, seeds: tuple[int, ...], *, noisy: bool = False,
                 made: Callable[[Path], None] | None = None) -> list[Path]:
    """The clips of ``seeds`` under ``folder``, each made once: again when the set's
    definition has changed since (``SET_VERSION``), its truth alone again when the truth's
    has (``TRUTH_VERSION``)."""
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for seed in seeds:
        clip = folder / f"count-{seed}{'-noisy' if noisy else ''}.mp4"
        made_as = json.loads(counts_path(clip).read_text()) if clip.is_file() and \
            counts_path(clip).is_file() else {}
        if made_as.get("set_version") != SET_VERSION:
            make_counting_clip(clip, seed, noisy=noisy)
            if made is not None:
                made(clip)
        elif made_as.get("truth_version") != TRUTH_VERSION:
            write_truth(clip, counting_scene(seed), seed, noisy)
        clips.append(clip)
    return clips
