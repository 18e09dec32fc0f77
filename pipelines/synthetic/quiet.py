"""A quiet camera: one still picture, with sensor noise and a slow change of light, that
people now and then walk into, stop in for a while, and leave — as a camera shows most of
the day. Two distractors a motion mask should hide: a clock overlay that changes every
second, and a patch of swaying texture (leaves in the wind). The truth (``.truth.json``) says
when each visitor is in the picture and the distractors' boxes: motion gating and the
capacity bench are measured against it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from pipelines.analytics.config import MaskConfig
from pipelines.synthetic.encode import ProgressFn, encode, frame_count_of
from pipelines.synthetic.photos import PERSON_PHOTOS, filled, load_photo, placement
from pipelines.synthetic.truth import truth_path

BACKDROPS: tuple[str, ...] = ("coffee", "chelsea", "rocket")
VISITOR_HEIGHT = (0.72, 0.9)  # of the frame's: where the shipped person detector is sure
CLOCK_BOX = (0.78, 0.02, 0.99, 0.12)  # the clock overlay (x1, y1, x2, y2), of the frame
SWAY_BOX = (0.0, 0.7, 0.18, 1.0)  # the swaying texture, of the frame
GRAINS = 16  # planes of sensor noise a clip's frames pick from
# A camera's bitrate cap, in bits per pixel and frame: 518 kbit/s for a 640x360@15 sub-stream,
# 4.1 Mbit/s for a 1280x720@30 main stream, about what cameras ship with (512 kbit/s, 2-4
# Mbit/s); uncapped, x264 spends 2.3 Mbit/s on the sub-stream's sensor noise.
CAMERA_BITS_PER_PIXEL = 0.15

@dataclass(frozen=True, slots=True)
class Visit:
    """A visitor (a person photograph ``height`` of the frame tall) entering at ``enter_s``
    from one side, standing still from ``stop_s`` to ``go_s`` at ``stand_x`` (a fraction of
    the width), and gone past the other side at ``leave_s``."""

    photo: str
    height: float
    enter_s: float
    stop_s: float
    go_s: float
    leave_s: float
    stand_x: float
    from_left: bool

    def centre_x(self, t: float, width: int, inset_width: float) -> float | None:
        """The visitor's centre at ``t`` (pixels), None when out of the picture."""
        if not self.enter_s <= t <= self.leave_s:
            return None
        outside = -inset_width / 2 if self.from_left else width + inset_width / 2
        beyond = width + inset_width / 2 if self.from_left else -inset_width / 2
        stand = self.stand_x * width
        if t < self.stop_s:
            f = (t - self.enter_s) / max(1e-6, self.stop_s - self.enter_s)
            return outside + (stand - outside) * f
        if t <= self.go_s:
            return stand
        f = (t - self.go_s) / max(1e-6, self.leave_s - self.go_s)
        return stand + (beyond - stand) * f


def plan_visits(seconds: float, seed: int, active: float = 0.2) -> list[Visit]:
    """Visits of 4-10 s, about ``active`` of the time, at random times after the first 2 s."""
    rng = np.random.default_rng([seed, 31])
    visits: list[Visit] = []
    if active <= 0:
        return visits
    t = 2.0 + float(rng.uniform(0, 4))
    while True:
        length = float(rng.uniform(4, 10))
        if t + length > seconds - 1:
            return visits
        walk = float(rng.uniform(1.2, 2.0))
        stand = float(rng.uniform(0, length - 2 * walk))
        visits.append(Visit(PERSON_PHOTOS[int(rng.integers(len(PERSON_PHOTOS)))],
                            float(rng.uniform(*VISITOR_HEIGHT)), t, t + walk,
                            t + walk + stand, t + length, float(rng.uniform(0.3, 0.7)),
                            bool(rng.integers(2))))
        t += length + float(rng.exponential(length * (1 - active) / active))


def distractors(truth: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    """A clip's distractors by name (``clock``, ``sway``), their boxes in pixels: what its
    camera's motion masks should cover."""
    return {name: tuple(truth[f"{name}_box"]) for name in ("clock", "sway")  # type: ignore[misc]
            if truth.get(f"{name}_box")}


def distractor_masks(truth: dict[str, Any]) -> list[MaskConfig]:
    """The distractors as the camera's motion masks."""
    return [MaskConfig(name=name, polygon=[(x1, y1), (x2, y1), (x2, y2), (x1, y2)])
            for name, (x1, y1, x2, y2) in distractors(truth).items()]


def mask_flags(truth: dict[str, Any]) -> list[str]:
    """The distractors as ``--mask`` flags (``NAME=x1,y1,...``)."""
    return [f"{name}={x1},{y1},{x2},{y1},{x2},{y2},{x1},{y2}"
            for name, (x1, y1, x2, y2) in distractors(truth).items()]


def box_of(fractions: tuple[float, float, float, float],
           size: tuple[int, int]) -> tuple[int, int, int, int]:
    """A box given as fractions of the frame, in pixels of a ``size`` (width, height) one."""
    x1, y1, x2, y2 = fractions
    return round(x1 * size[0]), round(y1 * size[1]), round(x2 * size[0]), round(y2 * size[1])


def render_quiet_frame(backdrop: np.ndarray, visits: list[Visit], t: float, *,
                       grain: np.ndarray, clock: bool) -> np.ndarray:
    """The picture at ``t`` seconds: the backdrop in its light, the visitors in it, the
    distractors (with ``clock``), then the sensor's noise (``grain``, int16)."""
    height, width = backdrop.shape[:2]
    light = 1.0 + 0.08 * np.sin(2 * np.pi * t / 90.0)  # a slow change: a cloud, the sun
    frame = cv2.convertScaleAbs(backdrop, alpha=light)
    if clock:
        x1, y1, x2, y2 = box_of(SWAY_BOX, (width, height))
        shift = 6.0 * np.sin(2 * np.pi * t / 1.7)  # leaves swaying, a few pixels
        warp = np.array([[1, 0, shift], [0, 1, shift / 2]], np.float32)
        patch = backdrop[y1:y2, x1:x2]
        frame[y1:y2, x1:x2] = cv2.warpAffine(patch[:, ::-1], warp, (x2 - x1, y2 - y1),
                                             borderMode=cv2.BORDER_REFLECT_101)
    for visit in visits:
        photo = load_photo(visit.photo)
        tall = visit.height * height
        x = visit.centre_x(t, width, tall * photo.shape[1] / photo.shape[0])
        if x is not None:
            cv2.warpAffine(photo, placement(photo, (x, height * 0.55), tall, 0.0),
                           (width, height), dst=frame, flags=cv2.INTER_AREA,
                           borderMode=cv2.BORDER_TRANSPARENT)
    if clock:
        x1, y1, x2, y2 = box_of(CLOCK_BOX, (width, height))
        cv2.rectangle(frame, (x1, y1), (x2, y2), (0, 0, 0), -1)
        text = f"{int(t) // 3600:02d}:{int(t) // 60 % 60:02d}:{int(t) % 60:02d}"
        cv2.putText(frame, text, (x1 + 4, y2 - 6), cv2.FONT_HERSHEY_SIMPLEX,
                    (y2 - y1) / 34, (255, 255, 255), 1, cv2.LINE_AA)
    return np.clip(frame.astype(np.int16) + grain, 0, 255).astype(np.uint8)


def make_quiet_clip(path: Path, *, seconds: float = 60.0, fps: int = 15,
                    size: tuple[int, int] = (640, 360), seed: int = 0, active: float = 0.2,
                    noise: float = 3.0, clock: bool = True, capped: bool = True,
                    progress: ProgressFn | None = None) -> Path:
    """Write a quiet camera's clip (H.264, a key frame every 2 s and, if ``capped``, the
    bitrate held to a camera's, as cameras send) and its truth: the visits (seconds), the
    distractors' boxes (pixels; null without ``clock``), the size and the bitrate cap."""
    path = Path(path)
    frame_count = frame_count_of(seconds, fps, size)
    visits = plan_visits(seconds, seed, active)
    rng = np.random.default_rng([seed, 37])
    backdrop = filled(BACKDROPS[seed % len(BACKDROPS)], size,
                      (size[0] / 2, size[1] / 2), 1.1, 0.0)
    # the sensor's noise: a few planes drawn once, one picked at random for each frame
    grains = [np.round(rng.normal(0.0, noise, (size[1], size[0], 3))).astype(np.int16)
              for _ in range(GRAINS)]
    frames = (render_quiet_frame(backdrop, visits, i / fps, clock=clock,
                                 grain=grains[int(rng.integers(GRAINS))])
              for i in range(frame_count))
    max_kbps = round(CAMERA_BITS_PER_PIXEL * size[0] * size[1] * fps / 1000) if capped else None
    encode(path, frames, fps=fps, size=size, codec="h264", total=frame_count,
           progress=progress, camera_like=True, max_kbps=max_kbps)
    truth = {"clip": path.name, "fps": fps, "width": size[0], "height": size[1],
             "max_kbps": max_kbps,
             "frame_count": frame_count, "seconds": seconds,
             "clock_box": list(box_of(CLOCK_BOX, size)) if clock else None,
             "sway_box": list(box_of(SWAY_BOX, size)) if clock else None,
             "visits": [asdict(v) for v in visits]}
    truth_path(path).write_text(json.dumps(truth, indent=1) + "\n")
    return path
