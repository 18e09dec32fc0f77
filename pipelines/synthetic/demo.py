"""The demo clip: pans and zooms (Ken Burns) over photographs, shots with a person
alternating with shots without, joined by hard cuts so that every frame is unambiguously one
or the other."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from pipelines.synthetic.encode import ProgressFn, encode, frame_count_of
from pipelines.synthetic.photos import (
    NON_PERSON_PHOTOS,
    PERSON_PHOTOS,
    load_photo,
    photo_has_person,
)
from pipelines.synthetic.truth import truth_path

# About 1.7 s a shot lets a 20 s clip show every photo at least twice while alternating kinds.
SHOT_SECONDS = 1.7
SHOT_JITTER = 0.2  # each shot's length varies by up to this fraction of the mean
ZOOM_NEAR = (1.0, 1.08)  # the wide end of a shot's zoom; 1.0 = photo as tall as the frame
ZOOM_FAR = (1.15, 1.25)  # the close end: modest, so the person stays whole in frame
PAN_SLACK = 0.06  # fraction of the frame width a photo may drift into the dark side bars
BACKGROUND = (18, 18, 18)  # plain dark: nothing in it a detector could mistake for a person


@dataclass(frozen=True, slots=True)
class Shot:
    """One segment between hard cuts: a photo and the camera move across it.

    Zooms are relative to the photo scaled to the frame height. Offsets are in [-1, 1], a fraction
    of how far the photo may move at that moment without uncovering the frame top or bottom.
    """

    photo: str
    first_frame: int
    last_frame: int
    zoom: tuple[float, float]
    offset_from: tuple[float, float]
    offset_to: tuple[float, float]

    @property
    def person(self) -> bool:
        return photo_has_person(self.photo)

    @property
    def frame_count(self) -> int:
        return self.last_frame - self.first_frame + 1


def plan_shots(frame_count: int, fps: int, seed: int) -> list[Shot]:
    """Cut ``frame_count`` frames into shots that alternate person / no person, from the seed.

    Each photo's successive appearances alternate zooming in and out, so a photo never repeats
    the same motion.
    """
    rng = np.random.default_rng(seed)
    count = max(1, min(frame_count, round(frame_count / (fps * SHOT_SECONDS))))
    lengths = shot_lengths(frame_count, count, rng)
    photos = _photo_order(count, rng)
    seen: Counter[str] = Counter()
    shots, first = [], 0
    for photo, length in zip(photos, lengths, strict=True):
        zoom_in = seen[photo] % 2 == 0
        seen[photo] += 1
        shots.append(_shot(photo, first, first + length - 1, zoom_in, rng))
        first += length
    return shots


def shot_lengths(frame_count: int, count: int, rng: np.random.Generator) -> list[int]:
    """Near-equal lengths that differ a little, so that cuts do not fall on a regular beat."""
    weights = 1.0 + rng.uniform(-SHOT_JITTER, SHOT_JITTER, count)
    cuts = np.round(np.cumsum(weights) / weights.sum() * frame_count).astype(int)
    return [int(n) for n in np.diff(cuts, prepend=0)]


def _photo_order(count: int, rng: np.random.Generator) -> list[str]:
    """Alternate person and non-person photos, each kind cycling through all of its photos."""
    decks: dict[bool, list[str]] = {True: [], False: []}
    order = []
    for index in range(count):
        person = index % 2 == 0
        if not decks[person]:
            pool = PERSON_PHOTOS if person else NON_PERSON_PHOTOS
            decks[person] = [pool[i] for i in rng.permutation(len(pool))]
        order.append(decks[person].pop())
    return order


def _shot(photo: str, first: int, last: int, zoom_in: bool, rng: np.random.Generator) -> Shot:
    near, far = float(rng.uniform(*ZOOM_NEAR)), float(rng.uniform(*ZOOM_FAR))
    start = rng.uniform(-1.0, 1.0, 2)
    end = -start * rng.uniform(0.5, 1.0, 2)  # pan across the photo, not back and forth
    return Shot(
        photo, first, last, (near, far) if zoom_in else (far, near),
        (float(start[0]), float(start[1])), (float(end[0]), float(end[1])),
    )


def render_shot_frame(shot: Shot, index: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``index`` (absolute) of a shot as HWC uint8 RGB: one affine warp of the photo."""
    width, height = size
    photo = load_photo(shot.photo)
    ph, pw = photo.shape[:2]
    t = (index - shot.first_frame) / max(1, shot.frame_count - 1)
    t = t * t * (3.0 - 2.0 * t)  # ease in and out, as a camera operator would
    zoom = shot.zoom[0] + (shot.zoom[1] - shot.zoom[0]) * t
    scale = zoom * (height + 2) / ph  # 1 px overscan: no border line at the top and bottom
    fx, fy = (a + (b - a) * t for a, b in zip(shot.offset_from, shot.offset_to, strict=True))
    room_x = max(0.0, (scale * pw - width) / 2) + PAN_SLACK * width
    room_y = max(0.0, (scale * ph - height) / 2)
    cx, cy = width / 2 + fx * room_x, height / 2 + fy * room_y
    warp = np.array([[scale, 0, cx - scale * pw / 2], [0, scale, cy - scale * ph / 2]])
    return cv2.warpAffine(photo, warp, (width, height), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=BACKGROUND)


def make_demo_clip(path: Path, *, seconds: float = 20.0, fps: int = 30,
                   size: tuple[int, int] = (1280, 720), seed: int = 0,
                   progress: ProgressFn | None = None, camera_like: bool = False) -> Path:
    """Write the person / no-person demo clip (H.264 MP4) and its ``.truth.json``; return path.

    ``camera_like`` encodes as a live camera does — no B-frames, so no frame waits in the decoder
    for a later one, and a key frame every 2 s (a common camera default) — which a live
    benchmark needs."""
    path = Path(path)
    frame_count = frame_count_of(seconds, fps, size)
    shots = plan_shots(frame_count, fps, seed)
    frames = (render_shot_frame(s, i, size) for s in shots
              for i in range(s.first_frame, s.last_frame + 1))
    encode(path, frames, fps=fps, size=size, codec="h264", total=frame_count, progress=progress,
           camera_like=camera_like)
    truth = truth_record(path.name, shots, fps, size)
    truth_path(path).write_text(json.dumps(truth, indent=1) + "\n")
    return path


def truth_record(clip: str, shots: list[Shot], fps: int, size: tuple[int, int]) -> dict[str, Any]:
    """The ground truth of a demo clip: its shots, and one person / no-person label per frame."""
    person = [s.person for s in shots for _ in range(s.frame_count)]
    segments = [{"photo": s.photo, "person": s.person, "first_frame": s.first_frame,
                 "last_frame": s.last_frame} for s in shots]
    return {"clip": clip, "fps": fps, "width": size[0], "height": size[1],
            "frame_count": len(person), "segments": segments, "person": person}
