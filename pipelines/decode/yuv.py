"""YUV 4:2:0 to RGB the way the CPU path converts it, bit for bit, in torch on any device.

The CPU path's pictures are FFmpeg's: swscale turns each decoded 8-bit 4:2:0 frame into rgb24
(``RGBConverter``), and those pixels are what the model sees (the reference). NVDEC hands out
the same Y, U and V samples (H.264 and HEVC decoding is exact), but its own RGB conversion is
not swscale's: on the first lent GPU it matched only 64% of the CPU pipeline's boxes on a 720p
clip (docs/GPU.md). So NVDEC hands out NV12 and ``nv12_to_rgb`` converts it here with
swscale's arithmetic on x86-64 (its SIMD path for SSSE3 and up, which every CPU with AVX2
takes: equal with FFmpeg forced to its SSSE3 and AVX2 code and on an AVX-512 machine; its SSE2
and C code round otherwise):

- the matrix and range the frame is tagged with, as swscale reads them: each colour space's
  four coefficients (16.16 fixed point; unspecified and BT.601 alike) scaled to 13 bits, the
  luma gain 255/219 with an offset of 16 for limited range, chroma scaled by 224/255 for full;
- chroma is not interpolated: each 2x2 block of pixels shares its one U and V sample;
- each product is a 16-bit multiply-high (``(a * b) >> 16``, rounding down) of the sample
  shifted left by 3 and the coefficient, and each channel is luma's term plus chroma's, clipped
  to 0..255.

tests/pipelines/test_yuv.py checks it against FFmpeg for every colour space tag it keeps, both
ranges and camera sizes (odd-sized chroma planes too): equal, every pixel. Pictures of odd
width or height are not covered (FFmpeg converts odd heights another way): NvdecDecoder
refuses them. FFmpeg on an Arm processor converts with its own SIMD code, not measured
against this.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

# swscale's inverse matrices, per AVColorSpace: (crv, cbu, cgu, cgv) in 16.16 fixed point.
_BT709 = (117489, 138438, 13975, 34925)
_BT601 = (104597, 132201, 25675, 53279)
# Only the colour spaces measured equal to FFmpeg's own conversion (tests/pipelines/test_yuv.py):
# FFmpeg refuses BT.2020 constant luminance (10) and YCgCo (8), and converts 0 ("RGB", not a
# YUV matrix) otherwise than its table reads; those are refused here.
_COEFFICIENTS: dict[int, tuple[int, int, int, int]] = {
    1: _BT709,
    2: _BT601,  # unspecified
    3: _BT601,  # reserved
    4: (104448, 132798, 24759, 53109),  # FCC
    5: _BT601,  # BT.470 B/G
    6: _BT601,  # SMPTE 170M
    7: (117579, 136230, 16907, 35559),  # SMPTE 240M
    9: (110013, 140363, 12277, 42626),  # BT.2020 non-constant luminance
}
FULL_RANGE = 2  # AVColorRange: 0 unspecified, 1 limited ("tv", MPEG), 2 full ("pc", JPEG)


def _truncating_div(numerator: int, denominator: int) -> int:
    """C's integer division (towards zero), which swscale's set-up uses."""
    quotient = abs(numerator) // denominator
    return quotient if numerator >= 0 else -quotient


def _round_to_int16(value: int) -> int:
    return max(-0x7FFF, min(0x7FFF, (value + (1 << 15)) >> 16))


@dataclass(frozen=True, slots=True)
class YuvMatrix:
    """13-bit coefficients and the luma offset, as swscale's SIMD conversion holds them."""

    y_gain: int
    y_offset: int
    v_to_r: int
    u_to_b: int
    u_to_g: int  # negative
    v_to_g: int  # negative

    @classmethod
    def for_frames(cls, colorspace: int, color_range: int) -> YuvMatrix:
        """The matrix FFmpeg converts frames of this ``AVColorSpace`` and ``AVColorRange``
        with; ValueError for a colour space not measured equal to FFmpeg's conversion."""
        if int(colorspace) not in _COEFFICIENTS:
            raise ValueError(f"colour space {int(colorspace)} is not converted as FFmpeg "
                             f"converts it (known: {sorted(_COEFFICIENTS)})")
        crv, cbu, cgu, cgv = _COEFFICIENTS[int(colorspace)]
        cgu, cgv = -cgu, -cgv
        gain, offset = 1 << 16, 0
        if int(color_range) == FULL_RANGE:
            crv, cbu, cgu, cgv = (_truncating_div(c * 224, 255) for c in (crv, cbu, cgu, cgv))
        else:
            gain, offset = gain * 255 // 219, 16 << 16
        return cls(y_gain=_round_to_int16(gain << 13), y_offset=_round_to_int16(offset << 3),
                   v_to_r=_round_to_int16(crv << 13), u_to_b=_round_to_int16(cbu << 13),
                   u_to_g=_round_to_int16(cgu << 13), v_to_g=_round_to_int16(cgv << 13))


UNTAGGED = YuvMatrix.for_frames(2, 0)


@dataclass(frozen=True, slots=True)
class _Tables:
    luma: torch.Tensor  # (256,) int16: luma's term for each Y
    chroma: torch.Tensor  # (65536, 3) int16: R, G, B chroma terms for U + 256 * V


@functools.cache
def _tables(matrix: YuvMatrix, device: torch.device) -> _Tables:
    """The conversion as lookup tables (each term depends on one sample, or on U and V), so
    that a picture costs a handful of kernels, not one per arithmetic step. Kept for the
    process (a few matrices, 390 kB each): freed, their memory would go back to the stream
    that made them while another decoder's stream may still read them."""
    samples = np.arange(256, dtype=np.int64)
    luma = (samples * 8 - matrix.y_offset) * matrix.y_gain >> 16
    u, v = np.meshgrid(samples * 8 - (128 << 3), samples * 8 - (128 << 3), indexing="xy")
    chroma = np.stack([v * matrix.v_to_r >> 16,
                       (u * matrix.u_to_g >> 16) + (v * matrix.v_to_g >> 16),
                       u * matrix.u_to_b >> 16], axis=-1).reshape(65536, 3)  # row U + 256 * V
    tables = _Tables(torch.from_numpy(luma.astype(np.int16)).to(device),
                     torch.from_numpy(chroma.astype(np.int16)).to(device))
    if device.type == "cuda":  # other streams will read them: the copies must be done
        torch.cuda.current_stream(device).synchronize()
    return tables


def nv12_to_rgb(nv12: torch.Tensor, height: int, width: int, matrix: YuvMatrix = UNTAGGED,
                *, chroma_row: int | None = None) -> torch.Tensor:
    """NV12 (the Y plane over interleaved U, V at half resolution, uint8, on any device) to a
    new (H, W, 3) uint8 RGB tensor on the same device, equal to FFmpeg's rgb24 of the frame.
    ``chroma_row``: where the U, V rows start when the Y plane is padded (default ``height``)."""
    tables = _tables(matrix, nv12.device)
    chroma_h, chroma_w = (height + 1) // 2, (width + 1) // 2
    first = height if chroma_row is None else chroma_row
    luma = tables.luma[nv12[:height, :width].to(torch.int32)]
    uv = nv12[first:first + chroma_h, :chroma_w * 2]
    if uv.stride(-1) != 1 or uv.stride(0) % 2:
        uv = uv.contiguous()
    # each U, V byte pair read as one little-endian int16, U + 256 * V: negative from V = 128
    # on, which indexes from the table's end, the same row as the unsigned value
    chroma = tables.chroma[uv.view(torch.int16).to(torch.int32)]
    chroma = chroma[:, None, :, None].expand(chroma_h, 2, chroma_w, 2, 3).reshape(
        chroma_h * 2, chroma_w * 2, 3)[:height, :width]
    return (luma[..., None] + chroma).clamp_(0, 255).to(torch.uint8)
