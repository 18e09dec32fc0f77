"""The reference preprocessing: what a model card's ``input`` means, written plainly.

Full-size RGB picture -> one ``cv2.resize`` with the card's filter to the letterbox's inner
size -> pad -> colour order -> ``(pixel / 255 - mean) / std`` in float64 -> layout. No buffer
reuse, no fused steps, no shortcut: every fast path (the OpenCV preprocessor, the GPU ones,
the decoder drawing at the model's size) is tested against this, on photographs, and
``vidpipe model check`` measures how far a run's model input is from it.

Differences are reported in grey levels (0..255 pixel units, whatever the input's dtype and
normalisation), so that one tolerance reads the same for every model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import av
import cv2
import numpy as np

from models.spec import InputSpec
from pipelines.geometry import Letterbox

# The card's ``input.interpolation`` as OpenCV filters: the definition of each name.
OPENCV_FILTERS: Mapping[str, int] = {
    "bilinear": cv2.INTER_LINEAR,
    "area": cv2.INTER_AREA,
    "nearest": cv2.INTER_NEAREST,
    "bicubic": cv2.INTER_CUBIC,
}

# How far a fast path's model input may be from the reference's, in grey levels. OpenCV's
# uint8 filters compute in fixed point, so a path doing the same filter in float (the torch
# preprocessor) rounds up to a tenth of the values the other way: one level, on average under
# 0.1 (0.08 measured at most, tests/pipelines/test_reference.py). More is a different picture.
MAX_DIFF_TOLERANCE = 1.001  # one level, and float rounding
MEAN_DIFF_TOLERANCE = 0.1


def reference_picture(frame: av.VideoFrame) -> np.ndarray:
    """A decoded frame as full-size (H, W, 3) uint8 RGB, by FFmpeg's own conversion."""
    return np.ascontiguousarray(frame.to_ndarray(format="rgb24"))


def reference_input(image: np.ndarray, spec: InputSpec) -> tuple[np.ndarray, Letterbox]:
    """One (H, W, 3) uint8 RGB picture as the model's input for one image (``spec``'s
    ``image_shape`` and dtype), and the letterbox that placed it."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"reference input needs (H, W, 3) uint8 RGB, got {image.shape} "
                         f"{image.dtype}")
    letterbox = Letterbox.fit((image.shape[1], image.shape[0]), (spec.width, spec.height),
                              spec.resize)
    new_w, new_h = letterbox.resized
    resized = cv2.resize(image, (new_w, new_h), interpolation=OPENCV_FILTERS[spec.interpolation])
    canvas = np.full((spec.height, spec.width, 3), spec.pad_value, dtype=np.uint8)
    x0, y0 = int(letterbox.pad_x), int(letterbox.pad_y)
    canvas[y0:y0 + new_h, x0:x0 + new_w] = resized
    if spec.color == "BGR":
        canvas = canvas[:, :, ::-1]
    if spec.dtype == "float32":
        mean, std = np.asarray(spec.mean), np.asarray(spec.std)
        pixels = ((canvas.astype(np.float64) / 255.0 - mean) / std).astype(np.float32)
    else:
        pixels = canvas
    if spec.layout == "NCHW":
        pixels = pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(pixels), letterbox


def normalisation_table(spec: InputSpec) -> np.ndarray:
    """(256, 3) float32: each grey level's model value per channel (model colour order),
    ``(level / 255 - mean) / std`` in float64 rounded once, as the reference computes it. A
    fast path that looks values up here gives the reference's floats bit for bit; multiplying
    by a float32 ``1 / 255`` rounds some of them one unit the other way, which is enough to
    move an INT8 model's quantized input by a step."""
    levels = np.arange(256, dtype=np.float64)[:, None]
    mean, std = np.asarray(spec.mean), np.asarray(spec.std)
    return np.ascontiguousarray(((levels / 255.0 - mean) / std).astype(np.float32))


@dataclass(frozen=True, slots=True)
class InputDifference:
    """How far one model input is from another, in grey levels."""

    max: float
    mean: float

    def within(self, max_diff: float = MAX_DIFF_TOLERANCE,
               mean_diff: float = MEAN_DIFF_TOLERANCE) -> bool:
        return self.max <= max_diff and self.mean <= mean_diff


def input_difference(a: np.ndarray, b: np.ndarray, spec: InputSpec) -> InputDifference:
    """The absolute difference of two model inputs of one image (or of one batch), as pixel
    values: float inputs are mapped back through the card's normalisation first."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"inputs differ in shape: {a.shape} and {b.shape}")
    diff = np.abs(_grey_levels(a, spec) - _grey_levels(b, spec))
    return InputDifference(float(diff.max(initial=0.0)), float(diff.mean()) if diff.size else 0.0)


def _grey_levels(x: np.ndarray, spec: InputSpec) -> np.ndarray:
    values = x.astype(np.float64)
    if spec.dtype == "uint8":
        return values
    axis = -3 if spec.layout == "NCHW" else -1  # the channel axis, with or without a batch
    shape = [1] * values.ndim
    shape[axis] = 3
    std = np.asarray(spec.std).reshape(shape)
    mean = np.asarray(spec.mean).reshape(shape)
    return (values * std + mean) * 255.0
