"""Tiny clips of rectangles moving over texture, for fast pipeline tests, in any of the codecs
the decoders must handle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from pipelines.synthetic.encode import ENCODERS, check_size, encode


def make_test_clip(path: Path, *, frames: int = 30, size: tuple[int, int] = (320, 240),
                   fps: int = 30, codec: str = "h264", seed: int = 0,
                   colour: tuple[int, int] | None = None) -> Path:
    """Write a tiny MP4 of coloured rectangles moving over texture: exactly ``frames`` frames
    (``colour``: the (colour space, range) tag, ``encode``'s)."""
    if codec not in ENCODERS:
        raise ValueError(f"codec must be one of {sorted(ENCODERS)}, got {codec!r}")
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    check_size(size)
    path = Path(path)
    encode(path, moving_rectangles(frames, size, seed), fps=fps, size=size, codec=codec,
           total=frames, colour=colour)
    return path


def moving_rectangles(frames: int, size: tuple[int, int], seed: int) -> Iterator[np.ndarray]:
    """Frames of a few solid rectangles bouncing over a fixed, blurred-noise texture."""
    width, height = size
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    texture = cv2.GaussianBlur(noise, (0, 0), 3)  # texture gives the encoder real work to do
    boxes = [(rng.uniform(0, width), rng.uniform(0, height), rng.uniform(-6, 6),
              rng.uniform(-6, 6), tuple(int(c) for c in rng.integers(0, 256, 3)))
             for _ in range(3)]
    box_w, box_h = max(2, width // 6), max(2, height // 6)
    for index in range(frames):
        image = texture.copy()
        for x0, y0, vx, vy, colour in boxes:
            x = int(_bounce(x0 + vx * index, width - box_w))
            y = int(_bounce(y0 + vy * index, height - box_h))
            image[y:y + box_h, x:x + box_w] = colour
        yield image


def _bounce(position: float, span: int) -> float:
    """Reflect a position off the walls at 0 and ``span``."""
    if span <= 0:
        return 0.0
    period = position % (2 * span)
    return period if period <= span else 2 * span - period
