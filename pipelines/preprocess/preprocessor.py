"""Preprocessor: what turns decoded frames into the model's input on one device.

The inference stage prepares each call's frames with one just before it runs the model (one
per worker thread), for ``vidpipe run`` and the service alike: no frame is prepared that is
not inferred, and a live stream's waiting frame is its newest when it is taken.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.frame import Batch, Frame


class Preprocessor(Protocol):
    """Turns frames into model-ready batches on one device: OpenCV on the CPU, CV-CUDA or
    torch on a GPU. Passive and synchronous; one instance serves one thread."""

    def prepare(self, frame: Frame) -> Batch: ...

    def close(self) -> None: ...
