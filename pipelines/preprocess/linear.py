"""OpenCV's bilinear resize of uint8 pictures (``cv2.INTER_LINEAR``), bit for bit, in torch.

The reference preprocessing resizes with ``cv2.resize`` on uint8 RGB; for 8-bit pictures
OpenCV does not compute in floats but in fixed point, and a float resize (the weight matrices
TorchPreprocessor multiplies by for the other filters) lands one grey level off on some pixels.
On a trained detector that was enough to change 1.5% of the boxes between the GPU and the CPU
pipeline (shapes-yolo, FP32, 60 frames of a tracking clip, on the first lent H200). So the GPU
path redoes OpenCV's arithmetic:

- each output column ``d`` reads source columns ``floor(fx)`` and the next, with
  ``fx = (d + 0.5) * src / dst - 0.5`` in float32, weights ``1 - frac`` and ``frac`` rounded
  to 11 bits (2048 = 1.0); at the picture's edges the column is clamped and its weight is 1;
- rows take their two source rows the same way, but keep their weights at the edges (only the
  row index is clamped), as OpenCV does;
- horizontal pass first, in integers; the vertical pass multiplies each row, shifted right by
  4, by its weight and keeps the high 16 bits of each product, then ``(sum + 2) >> 2``.

tests/pipelines/test_preprocess.py checks it against ``cv2.resize`` for downscales, upscales,
exact halves and odd sizes: equal, every value, also with OpenCV held to its SSE3 or AVX2 code
(``OPENCV_CPU_DISABLE``) on an AVX-512 machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
COEF_SCALE = 1 << COEF_BITS


@dataclass(frozen=True, slots=True)
class AxisTaps:
    """Along one axis: both taps of every output index, first taps then second taps."""

    sources: torch.Tensor  # int64 (2 * dst,): the source indices
    weights: torch.Tensor  # int32 (2 * dst,): their 11-bit weights


@cache
def axis_taps(src: int, dst: int, clamp_weights: bool, device: str) -> AxisTaps:
    """OpenCV's taps along one axis (``clamp_weights``: columns; rows keep their weights).
    Kept for the process (a few sizes, kilobytes): freed, their memory would go back to the
    stream that made them while another preprocessor's stream may still read them."""
    if src <= 0 or dst <= 0:
        raise ValueError(f"resize needs positive sizes, got src={src} dst={dst}")
    scale = 1.0 / (dst / src)  # OpenCV keeps the inverse scale and inverts it
    position = ((np.arange(dst) + 0.5) * scale - 0.5).astype(np.float32)
    first = np.floor(position).astype(np.int64)
    frac = (position - first).astype(np.float32)
    if clamp_weights:
        before, after = first < 0, first >= src - 1
        frac[before | after] = 0
        first[before], first[after] = 0, src - 1
    one = np.float32(1.0)
    weights = np.concatenate([np.rint((one - frac) * np.float32(COEF_SCALE)),
                              np.rint(frac * np.float32(COEF_SCALE))]).astype(np.int32)
    sources = np.clip(np.concatenate([first, first + 1]), 0, src - 1)
    taps = AxisTaps(torch.from_numpy(sources).to(device), torch.from_numpy(weights).to(device))
    if torch.device(device).type == "cuda":  # other streams will read them: copies done first
        torch.cuda.current_stream(torch.device(device)).synchronize()
    return taps


def resize_linear(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """(H, W, C) uint8 on any device -> (height, width, C) uint8, equal to
    ``cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)``. Both taps of both
    axes are gathered at once and the arithmetic is done in place: a dozen kernels a picture
    (the inference stage's preparing launches them from Python, so their number is its cost)."""
    if image.dtype != torch.uint8 or image.ndim != 3:
        raise ValueError(f"resize_linear takes (H, W, C) uint8, got {tuple(image.shape)} "
                         f"{image.dtype}")
    src_h, src_w, channels = image.shape
    device = str(image.device)
    cols = axis_taps(src_w, width, True, device)
    rows = axis_taps(src_h, height, False, device)
    # (2 * height rows: top taps then bottom taps, 2 * width columns: left then right taps)
    taps = image.index_select(0, rows.sources).index_select(1, cols.sources).to(torch.int32)
    taps.mul_(cols.weights[None, :, None])
    horizontal = taps.view(2 * height, 2, width, channels).sum(dim=1, dtype=torch.int32)
    horizontal.bitwise_right_shift_(4).mul_(rows.weights[:, None, None])
    vertical = horizontal.bitwise_right_shift_(16).view(2, height, width, channels).sum(
        dim=0, dtype=torch.int32)
    return vertical.add_(2).bitwise_right_shift_(2).clamp_(0, 255).to(torch.uint8)
