"""Letterbox geometry, shared by every preprocessing backend and by the output decoders.

A letterbox maps source pixels to model-input pixels as ``x_in = x_src * scale_x + pad_x``.
Keeping the aspect ratio (``letterbox``) gives ``scale_x ~= scale_y`` (equal up to rounding the
resized picture to whole pixels) and pads the short side;
``stretch`` fills the input with no padding and two scales. One record serves both, so the
decoders never need to know which was used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

ResizeMode = Literal["letterbox", "stretch"]

@dataclass(frozen=True, slots=True)
class Letterbox:
    """How one source image was placed into the model input."""

    src_size: tuple[int, int]  # (width, height) of the source image
    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float

    @classmethod
    def fit(cls, src_size: tuple[int, int], dst_size: tuple[int, int],
            mode: ResizeMode = "letterbox") -> Letterbox:
        """The placement of a ``src_size`` image into a ``dst_size`` input, centred."""
        sw, sh = src_size
        dw, dh = dst_size
        if min(sw, sh, dw, dh) <= 0:
            raise ValueError(f"sizes must be positive, got src={src_size} dst={dst_size}")
        if mode == "stretch":
            return cls(src_size, dw / sw, dh / sh, 0.0, 0.0)
        if mode != "letterbox":
            raise ValueError(f"resize mode must be 'letterbox' or 'stretch', got {mode!r}")
        new_w, new_h = resized_size(src_size, min(dw / sw, dh / sh))
        # The scales of the pixels actually drawn (sizes are whole pixels), so that mapping a box
        # back lands on the picture exactly; they differ from each other by under a pixel.
        return cls(src_size, new_w / sw, new_h / sh, (dw - new_w) // 2, (dh - new_h) // 2)

    @property
    def resized(self) -> tuple[int, int]:
        """(width, height) of the source once scaled, before padding."""
        sw, sh = self.src_size
        return max(1, round(sw * self.scale_x)), max(1, round(sh * self.scale_y))

    def to_source(self, xyxy: np.ndarray) -> np.ndarray:
        """Map (N, 4) boxes from model-input pixels back to source pixels, clipped to the image."""
        out = np.asarray(xyxy, dtype=np.float32).copy()
        x, y = out[:, 0::2], out[:, 1::2]  # views on (x1, x2) and (y1, y2), not copies
        sw, sh = self.src_size
        np.clip((x - self.pad_x) / self.scale_x, 0, sw, out=x)
        np.clip((y - self.pad_y) / self.scale_y, 0, sh, out=y)
        return out

    def to_input(self, xyxy: np.ndarray) -> np.ndarray:
        """Map (N, 4) boxes from source pixels to model-input pixels (the inverse of to_source)."""
        out = np.asarray(xyxy, dtype=np.float32).copy()
        out[:, [0, 2]] = out[:, [0, 2]] * self.scale_x + self.pad_x
        out[:, [1, 3]] = out[:, [1, 3]] * self.scale_y + self.pad_y
        return out


def resized_size(src_size: tuple[int, int], scale: float) -> tuple[int, int]:
    sw, sh = src_size
    return max(1, round(sw * scale)), max(1, round(sh * scale))
