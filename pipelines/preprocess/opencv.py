"""CPU preprocessing with OpenCV: letterbox, colour order, normalisation and layout.

It computes what ``reference.reference_input`` computes (the card's filter, pad, colour,
normalisation), and is tested against it on photographs; only the memory traffic differs.

This runs once per frame at 720p and more, so it writes straight into its final buffers:
``cv2.resize`` draws into the middle of a canvas (only the padding bands are filled), the
colour swap happens in place, and the float conversion looks each grey level up in a table
(``cv2.LUT``, exact to the reference's floats) straight into the batch tensor. The batch
tensor is allocated once per call and each frame is written into its slot, so
``prepare_many`` does no concatenation copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from models.spec import InputSpec
from pipelines.frame import Batch, Frame, host_array, on_device
from pipelines.geometry import Letterbox
from pipelines.preprocess.reference import OPENCV_FILTERS, normalisation_table


class OpenCVPreprocessor:
    """Turns RGB frames into the input tensor ``spec`` describes.

    Passive and synchronous: it starts no threads. It keeps one scratch canvas between calls,
    so one instance serves one thread (an inference worker thread).
    """

    def __init__(self, spec: InputSpec) -> None:
        self.spec = spec
        self._size = (spec.width, spec.height)
        self._filter = OPENCV_FILTERS[spec.interpolation]
        self._is_float = spec.dtype == "float32"
        self._nhwc = spec.layout == "NHWC"
        self._swap_rb = spec.color == "BGR"
        # each grey level's value per channel, looked up: the reference's floats exactly
        table = normalisation_table(spec)
        self._table = table.reshape(1, 256, 3)  # NHWC: cv2.LUT maps each channel by its own
        self._plane_tables = [np.ascontiguousarray(table[:, c].reshape(1, 256))
                              for c in range(3)]
        self._canvas = np.empty((spec.height, spec.width, 3), dtype=np.uint8)
        self._planes = np.empty((3, spec.height, spec.width), dtype=np.uint8)

    def prepare(self, frame: Frame) -> Batch:
        """A Batch of one frame."""
        return self.prepare_many([frame])

    def prepare_many(self, frames: Sequence[Frame]) -> Batch:
        """A Batch of the frames, in order; frames may differ in size."""
        if not frames:
            raise ValueError("prepare_many needs at least one frame, got none")
        tensor = np.empty(self._batch_shape(len(frames)), dtype=self.spec.dtype)
        letterboxes = [self._prepare_into(frame, tensor[i]) for i, frame in enumerate(frames)]
        return Batch(frames=list(frames), tensor=tensor,
                     letterboxes=letterboxes)

    def close(self) -> None:
        """Nothing to release."""

    def _batch_shape(self, n: int) -> tuple[int, int, int, int]:
        w, h = self._size
        return (n, h, w, 3) if self._nhwc else (n, 3, h, w)

    def _prepare_into(self, frame: Frame, out: np.ndarray) -> Letterbox:
        """Write one frame into its slot ``out`` of the batch tensor; returns its letterbox."""
        image = _source_pixels(frame)
        letterbox = Letterbox.fit(frame.size, self._size, self.spec.resize)
        # uint8 NHWC RGB is the canvas itself; every other form is converted from the canvas
        direct = self._nhwc and not self._is_float
        canvas = out if direct else self._canvas
        self._draw_letterbox(image, letterbox, canvas)
        if self._swap_rb:
            cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR, dst=canvas)
        if not direct:
            self._convert(canvas, out)
        return letterbox

    def _draw_letterbox(self, image: np.ndarray, letterbox: Letterbox, canvas: np.ndarray) -> None:
        """Resize ``image`` into the canvas where the letterbox places it; pad the rest."""
        new_w, new_h = letterbox.resized
        x0, y0 = int(letterbox.pad_x), int(letterbox.pad_y)
        x1, y1 = x0 + new_w, y0 + new_h
        pad = self.spec.pad_value
        canvas[:y0] = pad
        canvas[y1:] = pad
        canvas[y0:y1, :x0] = pad
        canvas[y0:y1, x1:] = pad
        if image.shape[:2] == (new_h, new_w):  # the decoder drew it at this size already
            np.copyto(canvas[y0:y1, x0:x1], image)
            return
        cv2.resize(image, (new_w, new_h), dst=canvas[y0:y1, x0:x1], interpolation=self._filter)

    def _convert(self, canvas: np.ndarray, out: np.ndarray) -> None:
        """Canvas (HWC uint8, model colour order) into ``out`` in the model's dtype and layout.
        Floats are looked up per grey level (``cv2.LUT``); NCHW: the planes are separated in
        uint8 first (one pass), so each plane's lookup reads contiguous memory."""
        if self._nhwc:
            cv2.LUT(canvas, self._table, dst=out)
            return
        if not self._is_float:  # uint8 NCHW: de-interleave only
            np.copyto(out, canvas.transpose(2, 0, 1))
            return
        np.copyto(self._planes, canvas.transpose(2, 0, 1))
        for plane, table, target in zip(self._planes, self._plane_tables, out, strict=True):
            cv2.LUT(plane, table, dst=target)


def _source_pixels(frame: Frame) -> np.ndarray:
    """The frame's pixels as a C-contiguous numpy array, without a copy when possible."""
    if frame.image is None:
        raise ValueError(f"frame {frame.stream_id}#{frame.index} has no image to preprocess")
    if on_device(frame.image):
        raise ValueError(
            f"OpenCVPreprocessor needs frames on the CPU, got {frame.stream_id}#{frame.index} "
            f"on {frame.image.device}; use the CV-CUDA preprocessor for GPU frames"
        )
    # OpenCV reads row-strided views but not arbitrary strides (e.g. a flipped view)
    return np.ascontiguousarray(host_array(frame.image))
