"""Synthetic scenes with ground truth: image batches for training, H.264 clips for evaluation.

Everything is deterministic by seed: training batch ``i`` of seed ``s`` comes from
``default_rng([s, 0, i])`` and clip ``k`` from ``default_rng([s, 1, k])``, so a run can be
repeated exactly, batches can be made in any order, and clips of another seed are held out
from training by construction. See ``models/scene.py`` for what a scene holds.

Training images are rendered straight at the size the model sees (320x192, a 640x384 clip
letterboxed into 320x320, without the padding bands), some with letterbox bands of their own,
some JPEG-compressed, so that what the network learns matches what the pipeline feeds it.

Boxes file (``clip.boxes.json`` beside ``clip.mp4``)::

    {"format": "vidpipe-boxes/1", "clip": "clip.mp4", "width": 640, "height": 384, "fps": 30,
     "classes": ["disc", "box", "triangle", "ring", "cross"],
     "frames": [[[x1, y1, x2, y2, class_id], ...], ...],
     "ignore": [[[x1, y1, x2, y2, class_id], ...], ...]}

``frames`` has one entry per frame of the clip, in decode order: the boxes (source pixels,
x2/y2 exclusive edges, floats) of every object to detect. ``ignore`` (optional, same shape)
holds objects too hidden to score (under ``VISIBLE_MIN`` of their area in view): a detection
there is neither a hit nor a false alarm.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from models.scene import BAR, BLOB, CLASSES, Lighting, Scene, SceneObject, Truth, render

TRAIN_SIZE = (320, 192)  # (width, height) of a training image
CLIP_SIZE = (640, 384)
PAD_VALUE = 114
# Object half-extent as a fraction of frame height, and the widest width/height ratio. The
# smallest object is about 54 px across in a 640x384 clip, 27 px at the model's 320x192.
# From 0.05 (19 px at the model, 2.4 cells of stride 8), an earlier 1,500-step run scored
# AP@0.5 0.36 on objects 18-28 px across at the model's scale, 0.69 at 28-45 px and 0.83
# above: a single stride-8 grid is not made for objects of two or three cells.
RADIUS = (0.07, 0.2)
ASPECT = 1.7
BOXES_FORMAT = "vidpipe-boxes/1"
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class TrainBatch:
    """Images [B, H, W, 3] uint8 RGB; per image, boxes (N, 5) and ignored boxes (M, 5)."""

    images: np.ndarray
    boxes: list[np.ndarray]
    ignore: list[np.ndarray]


def sample_scene(rng: np.random.Generator, size: tuple[int, int], *, moving: bool) -> Scene:
    """A random scene: background, 4-11 classed objects and 1-4 distractors in random depth.

    Dense scenes on purpose: positives carry most of what a detector learns from an image,
    so more objects per rendered (and trained-on) pixel is cheaper learning on a CPU."""
    width, height = size
    margin = int(0.15 * max(size)) if moving else 0
    background = make_background(rng, (width + margin, height + margin))
    count, distractors = int(rng.integers(4, 12)), int(rng.integers(1, 5))
    kinds = [int(c) for c in rng.integers(0, len(CLASSES), count)]
    kinds += [int(k) for k in rng.choice([BLOB, BLOB, BAR], distractors)]
    order = rng.permutation(len(kinds))
    objects = tuple(sample_object(rng, kinds[i], size, background, moving) for i in order)
    pan = tuple(float(v) for v in rng.uniform(-0.6, 0.6, 2)) if moving else (0.0, 0.0)
    return Scene(size, background, (pan[0], pan[1]), objects, sample_lighting(rng, moving))


def sample_object(rng: np.random.Generator, class_id: int, size: tuple[int, int],
                  background: np.ndarray, moving: bool) -> SceneObject:
    """One object; sizes are fractions of the frame height, so scenes scale with the frame."""
    width, height = size
    radius = float(np.exp(rng.uniform(np.log(RADIUS[0]), np.log(RADIUS[1])))) * height
    if class_id == BAR:
        radius *= 2.0
    centre = (float(rng.uniform(0, width)), float(rng.uniform(0, height)))
    speed = rng.uniform(0.002, 0.02) * height if moving else rng.exponential(0.01) * height
    heading = rng.uniform(0, 2 * np.pi)
    colour = _contrasting_colour(rng, background, centre, radius)
    return SceneObject(
        class_id=class_id, centre=centre,
        velocity=(float(speed * np.cos(heading)), float(speed * np.sin(heading))),
        radius=radius, aspect=float(np.exp(rng.uniform(-np.log(ASPECT), np.log(ASPECT)))),
        angle=float(rng.uniform(0, 2 * np.pi)),
        spin=float(rng.uniform(-0.04, 0.04)) if moving else 0.0,
        form=float(rng.uniform()), colour=colour,
        second=tuple(int(v) for v in rng.integers(0, 256, 3)),  # type: ignore[arg-type]
        pattern=int(rng.choice(3, p=[0.6, 0.3, 0.1])), exposure=float(rng.uniform(0.3, 1.0)),
    )


def _contrasting_colour(rng: np.random.Generator, background: np.ndarray,
                        centre: tuple[float, float], radius: float) -> tuple[int, int, int]:
    """A random colour, drawn again (up to 8 times) while its summed channel difference from
    the background under it is below 120: a shape that matches its surroundings is invisible,
    and no detector should be scored on it."""
    x, y, r = int(centre[0]), int(centre[1]), max(2, int(radius))
    under = background[max(0, y - r):y + r, max(0, x - r):x + r].reshape(-1, 3).mean(0)
    colour = rng.integers(0, 256, 3)
    for _ in range(8):
        if np.abs(colour - under).sum() >= 120:
            break
        colour = rng.integers(0, 256, 3)
    return int(colour[0]), int(colour[1]), int(colour[2])


def sample_lighting(rng: np.random.Generator, moving: bool) -> Lighting:
    return Lighting(
        gain=float(rng.uniform(0.6, 1.3)), swing=float(rng.uniform(0.05, 0.3)) if moving else 0.0,
        period=float(rng.uniform(40, 200)),
        gradient=(float(rng.uniform(-0.6, 0.6)), float(rng.uniform(-0.6, 0.6))),
        cast=tuple(float(v) for v in rng.uniform(0.85, 1.15, 3)),  # type: ignore[arg-type]
        noise=float(rng.uniform(0, 6)),
    )


def make_background(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """Colour blotches, noise texture at a random scale, sometimes a tiled pattern, then
    lines and arcs of clutter: busy, but with nothing shaped like a filled class object."""
    width, height = size
    blotches = rng.uniform(0, 255, (int(rng.integers(2, 6)), int(rng.integers(2, 8)), 3))
    image: np.ndarray = cv2.resize(blotches.astype(np.float32), size,
                                   interpolation=cv2.INTER_CUBIC)
    for scale in rng.choice([2, 4, 8, 16], int(rng.integers(1, 3)), replace=False):
        grain = rng.standard_normal((height // scale + 1, width // scale + 1), dtype=np.float32)
        image += cv2.resize(grain, size)[:, :, None] * float(rng.uniform(8, 40))
    canvas = np.clip(image, 0, 255).astype(np.uint8)
    if rng.uniform() < 0.3:
        _draw_tiles(rng, canvas)
    for _ in range(int(rng.integers(4, 20))):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        a, b = rng.uniform(0, 1, 2) * size, rng.uniform(0, 1, 2) * size
        if rng.uniform() < 0.7:
            cv2.line(canvas, tuple(a.astype(int)), tuple(b.astype(int)), colour,
                     int(rng.integers(1, 4)), cv2.LINE_AA)
        else:
            axes = tuple(int(v) for v in rng.uniform(5, 0.3 * height, 2))
            start = float(rng.uniform(0, 360))
            cv2.ellipse(canvas, tuple(a.astype(int)), axes, 0.0, start,
                        start + float(rng.uniform(40, 270)), colour, int(rng.integers(1, 3)),
                        cv2.LINE_AA)
    return canvas


def _draw_tiles(rng: np.random.Generator, canvas: np.ndarray) -> None:
    """A grid of thin lines (tiles, bricks, fences): regular clutter next to the random."""
    height, width = canvas.shape[:2]
    step = int(rng.integers(12, 48))
    colour = tuple(int(v) for v in rng.integers(0, 256, 3))
    for x in range(int(rng.integers(0, step)), width, step):
        cv2.line(canvas, (x, 0), (x, height), colour, 1)
    for y in range(int(rng.integers(0, step)), height, step):
        cv2.line(canvas, (0, y), (width, y), colour, 1)


def training_image(rng: np.random.Generator,
                   size: tuple[int, int] = TRAIN_SIZE) -> tuple[np.ndarray, Truth]:
    """One still image and its truth. A third get letterbox bands (the padding the pipeline
    adds around frames of another aspect), half are JPEG-compressed like a real stream."""
    width, height = size
    content = size
    if rng.uniform() < 0.33:
        content = (width, int(rng.integers(height // 2, height)) // 2 * 2) if rng.uniform() < 0.5 \
            else (int(rng.integers(width // 2, width)) // 2 * 2, height)
    image, truth = render(sample_scene(rng, content, moving=False), 0.0, rng)
    if content != size:
        image, truth = _pad(image, truth, size)
    return maybe_jpeg(rng, image), truth


def maybe_jpeg(rng: np.random.Generator, image: np.ndarray) -> np.ndarray:
    """Half the time, ``image`` through JPEG at a random quality (40-94), as a stream's
    pictures may have been; else the image itself."""
    if rng.uniform() < 0.5:
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY,
                                                   int(rng.integers(40, 95))])
        decoded = cv2.imdecode(encoded, cv2.IMREAD_UNCHANGED) if ok else None
        if decoded is not None:
            return decoded
    return image


def _pad(image: np.ndarray, truth: Truth, size: tuple[int, int]) -> tuple[np.ndarray, Truth]:
    """Centre ``image`` on a PAD_VALUE canvas of ``size``, as a letterbox would."""
    width, height = size
    canvas = np.full((height, width, 3), PAD_VALUE, dtype=np.uint8)
    y0, x0 = (height - image.shape[0]) // 2, (width - image.shape[1]) // 2
    canvas[y0:y0 + image.shape[0], x0:x0 + image.shape[1]] = image
    shift = np.array([x0, y0, x0, y0, 0], dtype=np.float32)
    return canvas, Truth(truth.boxes + shift, truth.ignore + shift)


def training_batch(seed: int, index: int, batch_size: int,
                   size: tuple[int, int] = TRAIN_SIZE) -> TrainBatch:
    """Batch ``index`` of the training stream of ``seed``: the same every time it is asked."""
    rng = np.random.default_rng([seed, 0, index])
    pairs = [training_image(rng, size) for _ in range(batch_size)]
    return TrainBatch(np.stack([image for image, _ in pairs]),
                      [truth.boxes for _, truth in pairs], [truth.ignore for _, truth in pairs])


def clip_frames(seed: int, clip: int, frames: int,
                size: tuple[int, int]) -> Iterator[tuple[np.ndarray, Truth]]:
    """The frames of clip ``clip`` of ``seed`` and their truth, one moving scene."""
    rng = np.random.default_rng([seed, 1, clip])
    scene = sample_scene(rng, size, moving=True)
    for index in range(frames):
        yield render(scene, float(index), np.random.default_rng([seed, 2, clip, index]))


def make_clip(path: Path, *, seed: int, clip: int = 0, frames: int = 150,
              size: tuple[int, int] = CLIP_SIZE, fps: int = 30,
              progress: ProgressFn | None = None) -> Path:
    """Write an H.264 MP4 of one moving scene and its boxes file beside it; returns the clip."""
    width, height = size
    if width % 2 or height % 2 or min(size) < 32:
        raise ValueError(f"clip size must be even and at least 32x32, got {size}")
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    write_clip(Path(path), clip_frames(seed, clip, frames, size), frames=frames, size=size,
               fps=fps, progress=progress)
    return Path(path)


def write_clip(path: Path, rendered: Iterator[tuple[np.ndarray, Truth]], *, frames: int,
               size: tuple[int, int], fps: int,
               progress: ProgressFn | None = None) -> list[Truth]:
    """Encode rendered frames as an H.264 MP4 and write their boxes file beside it; returns
    each frame's truth."""
    width, height = size
    truths = []
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps,
                                      options={"preset": "veryfast", "crf": "20"})
        if not isinstance(stream, av.VideoStream):  # cannot happen; tells the type checker
            raise TypeError(f"libx264 made a {type(stream).__name__}, not video")
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for done, (image, truth) in enumerate(rendered, start=1):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            truths.append(truth)
            if progress is not None:
                progress(done, frames)
        container.mux(stream.encode(None))
    record = {"format": BOXES_FORMAT, "clip": path.name, "width": width, "height": height,
              "fps": fps, "classes": list(CLASSES), "frames": [_rows(t.boxes) for t in truths],
              "ignore": [_rows(t.ignore) for t in truths]}
    boxes_path(path).write_text(json.dumps(record, separators=(",", ":")) + "\n")
    return truths


def _rows(boxes: np.ndarray) -> list[list[float]]:
    return [[round(float(v), 2) for v in row[:4]] + [int(row[4])] for row in boxes]


def boxes_path(clip: Path) -> Path:
    """Where a clip's boxes live: ``a.mp4`` -> ``a.boxes.json``."""
    return Path(clip).with_suffix(".boxes.json")


def load_boxes(path: Path) -> dict[str, Any]:
    """Read a boxes file and check its shape; errors name the file and what is wrong."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read boxes file {path}: {e}") from e
    if not isinstance(record, dict) or not isinstance(record.get("frames"), list):
        raise ValueError(f"boxes file {path}: expected a mapping with a 'frames' list "
                         f"(format {BOXES_FORMAT})")
    ignore = record.setdefault("ignore", [[] for _ in record["frames"]])
    if len(ignore) != len(record["frames"]):
        raise ValueError(f"boxes file {path}: 'ignore' has {len(ignore)} frames, "
                         f"'frames' has {len(record['frames'])}")
    for index, rows in enumerate(record["frames"]):
        if any(not isinstance(r, list) or len(r) != 5 for r in rows):
            raise ValueError(f"boxes file {path}: frame {index} must be a list of "
                             f"[x1, y1, x2, y2, class_id]")
    return record
