"""Preprocessing with CV-CUDA: letterbox resize, normalisation and NCHW reformat on the GPU,
written into the batch tensor on the stage's CUDA stream.

Per frame, on one stream (``cvcuda.as_stream`` wraps the stage's torch stream, so CV-CUDA
operators and torch operations are ordered on it without any wait):

1. ``cvcuda.resize_into``: the picture to its letterboxed size with the card's filter
   (``CVCUDA_FILTERS``: the ``cvcuda.Interp`` of each OpenCV filter);
2. ``cvcuda.copymakeborder_into``: into the model-size canvas, ``Border.CONSTANT`` with the
   card's ``pad_value`` around it (the canvas size gives the bottom and right bands);
3. float inputs: each grey level looked up in the reference's normalisation table
   (``torch.gather`` on the same stream: the reference's floats exactly), written into the
   NHWC or NCHW slot of the batch tensor; a uint8 NCHW input is de-interleaved by
   ``cvcuda.reformat_into``.

Tensors are torch's (``cvcuda.as_tensor`` wraps them without a copy, with layout "NHWC" or
"NCHW"), so the caching allocator owns all memory and the hand-off to the inference stage is
the same as for TorchPreprocessor. A BGR model gets its channels swapped in torch. Torch
exports version 2 of the CUDA Array Interface, without a stream, and CV-CUDA then waits on
the legacy default stream before its first operator reads the tensor (a wait on all of the
device's stream-0 work, the opposite of "without any wait"); so each tensor is handed over
as ``OnStream``: the same interface as version 3, naming the stage's stream, on which the
tensor was written and CV-CUDA runs (CV-CUDA's ``Stream`` docs: it orders its first operator
after the named stream, here a no-op).

UNVERIFIED: written against CV-CUDA's Python API (python/mod_cvcuda Op*.cpp bindings) but
never run: no GPU it was tried on had CV-CUDA. ``tests/gpu/test_preprocess_gpu.py``
compares it with OpenCVPreprocessor where CV-CUDA is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from models.spec import InputSpec
from pipelines.cuda import (
    PinnedStaging,
    import_gpu_library,
    record_ready,
    require_cuda,
    wait_ready,
)
from pipelines.frame import Batch, Frame, on_device
from pipelines.geometry import Letterbox
from pipelines.preprocess.reference import normalisation_table

# The card's ``input.interpolation`` as ``cvcuda.Interp`` names (OpenCV's filters on the GPU).
CVCUDA_FILTERS = {"bilinear": "LINEAR", "area": "AREA", "nearest": "NEAREST",
                  "bicubic": "CUBIC"}


class OnStream:
    """A CUDA tensor's Array Interface as version 3, with the stream its data was written on
    (``stream``: a CUDA stream handle, never 0, which the interface forbids). Holds the
    tensor, so that what CV-CUDA wraps keeps it alive."""

    def __init__(self, tensor: Any, stream: int) -> None:
        if stream == 0:
            raise ValueError("a CUDA Array Interface stream of 0 is ambiguous: give the "
                             "stream's handle (1 for the legacy default stream)")
        self.tensor = tensor
        self.__cuda_array_interface__ = dict(tensor.__cuda_array_interface__) | {
            "version": 3, "stream": stream}


class CvCudaPreprocessor:
    """Turns RGB frames (CPU or GPU) into the input tensor ``spec`` describes, with CV-CUDA.

    Passive and synchronous: one instance serves one thread, whose CUDA stream it owns.
    """

    def __init__(self, spec: InputSpec, device: str = "cuda:0", *, stream: Any = None) -> None:
        self.spec = spec
        self._cv: Any = import_gpu_library("cvcuda", "cvcuda-cu12 (or cvcuda-cu13)",
                                           "CV-CUDA preprocessing")
        self.device = require_cuda(device)
        self.stream = stream or torch.cuda.Stream(device=self.device)
        self._cv_stream = self._cv.as_stream(self.stream)
        self._staging = PinnedStaging(self.device)
        self._size = (spec.width, spec.height)
        # (256, 3): each grey level's value per channel, the reference's floats exactly
        self._table = torch.from_numpy(normalisation_table(spec)).to(self.device)

    def prepare(self, frame: Frame) -> Batch:
        return self.prepare_many([frame])

    def prepare_many(self, frames: Sequence[Frame]) -> Batch:
        """A Batch of the frames, enqueued on this stream; each frame's ``ready`` marks it."""
        if not frames:
            raise ValueError("prepare_many needs at least one frame, got none")
        w, h = self._size
        nhwc = self.spec.layout == "NHWC"
        shape = (len(frames), h, w, 3) if nhwc else (len(frames), 3, h, w)
        with torch.cuda.stream(self.stream):
            out = torch.empty(shape, dtype=getattr(torch, self.spec.dtype), device=self.device)
            letterboxes = []
            for i, frame in enumerate(frames):
                letterbox = Letterbox.fit(frame.size, self._size, self.spec.resize)
                self._prepare_into(self._source(frame), letterbox, out[i:i + 1])
                letterboxes.append(letterbox)
        ready = record_ready(self.stream)
        for frame in frames:
            frame.ready = ready
        return Batch(frames=list(frames), tensor=out, letterboxes=letterboxes)

    def _source(self, frame: Frame) -> torch.Tensor:
        image = frame.image
        if image is None:
            raise ValueError(f"frame {frame.stream_id}#{frame.index} has no image to preprocess")
        if on_device(image):
            wait_ready(self.stream, [frame.ready], [image])
            return image
        return self._staging.upload(image, self.stream)

    def _tensor(self, tensor: torch.Tensor, layout: str) -> Any:
        """``tensor`` as a CV-CUDA tensor, written on (and read on) this stage's stream."""
        return self._cv.as_tensor(OnStream(tensor, self.stream.cuda_stream), layout)

    def _prepare_into(self, image: torch.Tensor, letterbox: Letterbox, out: torch.Tensor) -> None:
        """One frame into its (1, ...) slot ``out`` of the batch tensor."""
        cv, stream = self._cv, self._cv_stream
        w, h = self._size
        new_w, new_h = letterbox.resized
        source = self._tensor(image.contiguous().unsqueeze(0), "NHWC")
        resized = torch.empty((1, new_h, new_w, 3), dtype=torch.uint8, device=self.device)
        interp = getattr(cv.Interp, CVCUDA_FILTERS[self.spec.interpolation])
        cv.resize_into(self._tensor(resized, "NHWC"), source, interp, stream=stream)
        direct = self.spec.dtype == "uint8" and self.spec.layout == "NHWC" \
            and self.spec.color == "RGB"
        canvas = out if direct else torch.empty((1, h, w, 3), dtype=torch.uint8,
                                                device=self.device)
        cv.copymakeborder_into(self._tensor(canvas, "NHWC"), self._tensor(resized, "NHWC"),
                               cv.Border.CONSTANT, [float(self.spec.pad_value)] * 3,
                               top=int(letterbox.pad_y), left=int(letterbox.pad_x),
                               stream=stream)
        if direct:
            return
        if self.spec.color == "BGR":
            canvas = canvas.flip(-1).contiguous()
        if self.spec.dtype == "uint8":  # NCHW uint8: de-interleave only
            cv.reformat_into(self._tensor(out, "NCHW"), self._tensor(canvas, "NHWC"),
                             stream=stream)
            return
        levels = canvas.reshape(-1, 3).to(torch.int64)
        floats = torch.gather(self._table, 0, levels).view(h, w, 3)  # [i, c] = table[level, c]
        out.copy_(floats[None] if self.spec.layout == "NHWC" else floats.permute(2, 0, 1)[None])

    def close(self) -> None:
        self._staging.close()
