"""The harder clip: every frame a photograph (turned, zoomed, panned) with others inset on
it, people among them in half the shots, some of them small."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from pipelines.synthetic.demo import shot_lengths
from pipelines.synthetic.encode import ProgressFn, encode, frame_count_of
from pipelines.synthetic.photos import (
    BACKDROP_TURN,
    NON_PERSON_PHOTOS,
    PERSON_PHOTOS,
    filled,
    load_photo,
    photo_has_person,
    placement,
)
from pipelines.synthetic.truth import truth_path

BACKDROPS: tuple[str, ...] = ("coffee", "chelsea", "rocket", "hubble_deep_field")
# An inset's height as a fraction of the frame's. The shipped person detector finds the
# people of these photos from about half the frame's height (below 0.45 it scores them under
# 0.35), so "small" people are drawn at the edge of what it sees: where preprocessing matters.
PERSON_HEIGHT = (0.75, 1.0)
SMALL_PERSON_HEIGHT = (0.55, 0.75)
THING_HEIGHT = (0.22, 0.5)
INSET_TURN = 10.0  # degrees an inset is turned by at most
HARD_SHOT_SECONDS = 1.5


@dataclass(frozen=True, slots=True)
class Inset:
    """A photograph laid on a shot's backdrop, moving and turning over the shot."""

    photo: str
    height: float  # fraction of the frame height
    centre_from: tuple[float, float]  # fractions of the frame size
    centre_to: tuple[float, float]
    angle_from: float
    angle_to: float


@dataclass(frozen=True, slots=True)
class HardShot:
    """A backdrop photograph, turned and zoomed over the shot, with insets on it."""

    backdrop: str
    first_frame: int
    last_frame: int
    zoom: tuple[float, float]
    angle: tuple[float, float]
    insets: tuple[Inset, ...]

    @property
    def person(self) -> bool:
        return any(photo_has_person(i.photo) for i in self.insets)

    @property
    def frame_count(self) -> int:
        return self.last_frame - self.first_frame + 1


def plan_hard_shots(frame_count: int, fps: int, seed: int) -> list[HardShot]:
    """Shots alternating people / none, each with one or two insets; every second person shot
    shows them small (``SMALL_PERSON_HEIGHT``)."""
    rng = np.random.default_rng([seed, 3])
    count = max(1, min(frame_count, round(frame_count / (fps * HARD_SHOT_SECONDS))))
    lengths = shot_lengths(frame_count, count, rng)
    shots, first = [], 0
    for index, length in enumerate(lengths):
        person = index % 2 == 0
        heights = (SMALL_PERSON_HEIGHT if index % 4 == 2 else PERSON_HEIGHT) if person \
            else THING_HEIGHT
        pool = PERSON_PHOTOS if person else NON_PERSON_PHOTOS
        insets = [_inset(pool[int(rng.integers(len(pool)))], heights, rng)]
        if rng.uniform() < 0.5:  # a second photograph, never of a person, drawn beneath
            insets.insert(0, _inset(NON_PERSON_PHOTOS[int(rng.integers(len(NON_PERSON_PHOTOS)))],
                                    THING_HEIGHT, rng))
        backdrop = BACKDROPS[int(rng.integers(len(BACKDROPS)))]
        zoom = (float(rng.uniform(1.0, 1.15)), float(rng.uniform(1.15, 1.4)))
        angle = tuple(float(a) for a in rng.uniform(-BACKDROP_TURN, BACKDROP_TURN, 2))
        shots.append(HardShot(backdrop, first, first + length - 1,
                              zoom if index % 3 else zoom[::-1], angle,  # type: ignore[arg-type]
                              tuple(insets)))
        first += length
    return shots


def _inset(photo: str, heights: tuple[float, float], rng: np.random.Generator) -> Inset:
    height = float(rng.uniform(*heights))
    # centres keep most of the turned inset in the frame (at the frame's 16:9)
    margin_y = min(0.5, 0.5 * height * 1.1)
    margin_x = margin_y * 9 / 16

    def point() -> tuple[float, float]:
        return (float(rng.uniform(margin_x, 1 - margin_x)),
                float(rng.uniform(margin_y, max(margin_y, 1 - margin_y))))

    angles = rng.uniform(-INSET_TURN, INSET_TURN, 2)
    return Inset(photo, height, point(), point(), float(angles[0]), float(angles[1]))


def render_hard_frame(shot: HardShot, index: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``index`` (absolute) of a hard shot as HWC uint8 RGB."""
    width, height = size
    t = (index - shot.first_frame) / max(1, shot.frame_count - 1)
    t = t * t * (3.0 - 2.0 * t)

    def at(pair: tuple[float, float]) -> float:
        return pair[0] + (pair[1] - pair[0]) * t

    frame = filled(shot.backdrop, size, (width / 2, height / 2), at(shot.zoom) * 1.2,
                    at(shot.angle))
    for inset in shot.insets:
        photo = load_photo(inset.photo)
        centre = (at((inset.centre_from[0], inset.centre_to[0])) * width,
                  at((inset.centre_from[1], inset.centre_to[1])) * height)
        warp = placement(photo, centre, inset.height * height,
                          at((inset.angle_from, inset.angle_to)))
        cv2.warpAffine(photo, warp, (width, height), dst=frame, flags=cv2.INTER_AREA,
                       borderMode=cv2.BORDER_TRANSPARENT)
    return frame


def make_hard_clip(path: Path, *, seconds: float = 20.0, fps: int = 30,
                   size: tuple[int, int] = (1280, 720), seed: int = 0,
                   progress: ProgressFn | None = None) -> Path:
    """Write the harder person / no-person clip (H.264 MP4) and its ``.truth.json``: turned,
    zoomed photographs with photographs inset on them, people in every second shot, smaller
    in every fourth. Same truth format as the demo clip's; segments name their photos."""
    path = Path(path)
    frame_count = frame_count_of(seconds, fps, size)
    shots = plan_hard_shots(frame_count, fps, seed)
    frames = (render_hard_frame(s, i, size) for s in shots
              for i in range(s.first_frame, s.last_frame + 1))
    encode(path, frames, fps=fps, size=size, codec="h264", total=frame_count, progress=progress)
    segments = [{"photos": [s.backdrop, *(i.photo for i in s.insets)], "person": s.person,
                 "small": s.person and min(i.height for i in s.insets
                                           if photo_has_person(i.photo)) < PERSON_HEIGHT[0],
                 "first_frame": s.first_frame, "last_frame": s.last_frame} for s in shots]
    truth = {"clip": path.name, "fps": fps, "width": size[0], "height": size[1],
             "frame_count": frame_count, "segments": segments,
             "person": [s.person for s in shots for _ in range(s.frame_count)]}
    truth_path(path).write_text(json.dumps(truth, indent=1) + "\n")
    return path
