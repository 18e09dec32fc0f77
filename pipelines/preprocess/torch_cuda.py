"""Preprocessing with torch ops on the GPU: the same letterbox, colour order, normalisation and
layout as OpenCVPreprocessor, written into one batch tensor on the stage's CUDA stream.

It is the GPU preprocessing that runs wherever torch has CUDA (CV-CUDA, when asked for, may be
faster, but its resize is not OpenCV's arithmetic and has never been measured against it), and
it reproduces OpenCV's arithmetic so that it can be checked against it pixel by pixel:

- Bilinear (the cards' usual filter) is OpenCV's own fixed-point arithmetic for uint8
  (``pipelines.preprocess.linear``): the resized levels are the reference's, bit for bit.
  A float resize was one grey level off on some pixels, which changed 1.5% of a trained
  detector's boxes on the first lent H200.
- The other filters (area, nearest, bicubic) are the card's OpenCV filter as two matrix
  products, ``Wy @ X @ Wx^T``: every one of OpenCV's filters is linear and separable, so its
  weights are read off by resizing an identity matrix with it (``resize_weights``), which
  gives OpenCV's own border handling, half-pixel centres and area edges; rounded, these are
  within one grey level of OpenCV's uint8 result, not equal to it.
- The resized picture's uint8 levels are looked up in the reference's normalisation table
  (``reference.normalisation_table``), as the OpenCV preprocessor does: the floats are the
  reference's, bit for bit, for a canvas that is.

The class is device-agnostic (``device="cpu"`` runs the same code, which is how the CPU tests
check it); on CUDA it waits for each frame's ``ready`` event, uploads CPU frames through pinned
staging buffers, and marks the frames ready again once their batch slot is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import cv2
import numpy as np
import torch

from models.spec import InputSpec
from pipelines.cuda import (
    PinnedStaging,
    parse_device,
    record_ready,
    require_cuda,
    wait_ready,
)
from pipelines.frame import Batch, Frame, on_device
from pipelines.geometry import Letterbox
from pipelines.preprocess.linear import resize_linear
from pipelines.preprocess.reference import OPENCV_FILTERS, normalisation_table


class TorchPreprocessor:
    """Turns RGB frames (CPU or GPU) into the input tensor ``spec`` describes, on ``device``.

    Passive and synchronous: one instance serves one thread (an inference worker thread),
    whose CUDA stream it owns (``stream``, made here unless given).
    """

    def __init__(self, spec: InputSpec, device: str | torch.device = "cuda:0", *,
                 stream: Any = None) -> None:
        self.spec = spec
        name = str(device)
        self.device = require_cuda(name) if parse_device(name).is_cuda else torch.device("cpu")
        self.is_cuda = self.device.type == "cuda"
        self.stream = (stream or torch.cuda.Stream(device=self.device)) if self.is_cuda else None
        self._staging = PinnedStaging(self.device) if self.is_cuda else None
        self._size = (spec.width, spec.height)
        # (3, 256): each grey level's value per channel, the reference's floats exactly
        self._table = torch.from_numpy(normalisation_table(spec).T.copy()).to(self.device)

    def prepare(self, frame: Frame) -> Batch:
        """A Batch of one frame."""
        return self.prepare_many([frame])

    def prepare_many(self, frames: Sequence[Frame]) -> Batch:
        """A Batch of the frames, in order; frames may differ in size. On CUDA the work is
        enqueued on this preprocessor's stream and each frame's ``ready`` marks it done."""
        if not frames:
            raise ValueError("prepare_many needs at least one frame, got none")
        if self.stream is None:
            return self._prepare(frames)
        with torch.cuda.stream(self.stream):
            batch = self._prepare(frames)
        ready = record_ready(self.stream)
        for frame in frames:
            frame.ready = ready
        return batch

    def _prepare(self, frames: Sequence[Frame]) -> Batch:
        images = [self._source(frame) for frame in frames]
        w, h = self._size
        shape = (len(frames), h, w, 3) if self.spec.layout == "NHWC" else (len(frames), 3, h, w)
        out = torch.empty(shape, dtype=getattr(torch, self.spec.dtype), device=self.device)
        letterboxes = []
        for i, (frame, image) in enumerate(zip(frames, images, strict=True)):
            letterbox = Letterbox.fit(frame.size, self._size, self.spec.resize)
            self._write(self.letterboxed(image, letterbox), out[i])
            letterboxes.append(letterbox)
        return Batch(frames=list(frames), tensor=out, letterboxes=letterboxes)

    def _source(self, frame: Frame) -> torch.Tensor:
        """The frame's (H, W, 3) uint8 pixels on this device, usable on this stream."""
        image = frame.image
        if image is None:
            raise ValueError(f"frame {frame.stream_id}#{frame.index} has no image to preprocess")
        if self.stream is None or self._staging is None:
            return torch.as_tensor(image, device=self.device)
        if on_device(image):
            wait_ready(self.stream, [frame.ready], [image])
            return image
        return self._staging.upload(image, self.stream)

    def letterboxed(self, image: torch.Tensor, letterbox: Letterbox) -> torch.Tensor:
        """(3, H, W) float32 canvas in model colour order, values 0..255 like OpenCV's uint8
        canvas: the resized picture where the letterbox puts it, ``pad_value`` around it."""
        w, h = self._size
        new_w, new_h = letterbox.resized
        x0, y0 = int(letterbox.pad_x), int(letterbox.pad_y)
        canvas = torch.full((3, h, w), float(self.spec.pad_value), device=self.device)
        if self.spec.interpolation == "bilinear" and image.dtype == torch.uint8:
            resized = resize_linear(image, new_w, new_h).permute(2, 0, 1).float()
        else:
            resized = self._resize(image.permute(2, 0, 1).float(), new_w, new_h)
            resized = resized.round_().clamp_(0, 255)
        canvas[:, y0:y0 + new_h, x0:x0 + new_w] = resized
        if self.spec.color == "BGR":
            canvas = canvas.flip(0)
        return canvas

    def _resize(self, pixels: torch.Tensor, new_w: int, new_h: int) -> torch.Tensor:
        """(C, H, W) float -> (C, new_h, new_w) with the card's OpenCV filter."""
        _, h, w = pixels.shape
        interpolation = self.spec.interpolation
        wy = resize_weights(h, new_h, interpolation, pixels.device)
        wx = resize_weights(w, new_w, interpolation, pixels.device)
        return torch.matmul(torch.matmul(wy, pixels), wx.T)

    def _write(self, canvas: torch.Tensor, out: torch.Tensor) -> None:
        """Canvas (3, H, W) into its slot ``out`` in the model's dtype and layout."""
        nhwc = self.spec.layout == "NHWC"
        if self.spec.dtype == "uint8":
            out.copy_(canvas.permute(1, 2, 0) if nhwc else canvas)
            return
        target = out.permute(2, 0, 1) if nhwc else out  # a (3, H, W) view of the slot
        levels = canvas.to(torch.int64).view(3, -1)
        target.copy_(torch.gather(self._table, 1, levels).view_as(target))

    def close(self) -> None:
        """Release the pinned staging buffers once their copies are done. Idempotent."""
        if self._staging is not None:
            self._staging.close()


def resize_weights(src: int, dst: int, interpolation: str,
                   device: str | torch.device = "cpu") -> torch.Tensor:
    """(dst, src) float32 matrix of OpenCV's ``interpolation`` weights along one axis, on
    ``device``: row ``d`` holds how much each source pixel adds to output pixel ``d``. Kept
    per device, so a frame of a size seen before copies nothing to the GPU for them."""
    if src <= 0 or dst <= 0:
        raise ValueError(f"resize weights need positive sizes, got src={src} dst={dst}")
    return _weights(src, dst, interpolation, str(device))


@lru_cache(maxsize=64)
def _weights(src: int, dst: int, interpolation: str, device: str) -> torch.Tensor:
    # Resizing the identity's columns (height src -> dst, width kept) gives column j = the
    # response to a unit impulse at source pixel j.
    impulses = np.eye(src, dtype=np.float32)
    weights = cv2.resize(impulses, (src, dst), interpolation=OPENCV_FILTERS[interpolation])
    return torch.from_numpy(np.ascontiguousarray(weights.reshape(dst, src))).to(device)
