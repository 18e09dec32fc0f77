"""DecodedPicture: what a decoder hands the decode stage, which makes it a Frame."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipelines.frame import Picture


@dataclass(slots=True)
class DecodedPicture:
    """What a decoder hands the decode stage: (H, W, 3) uint8 RGB on the decoder's device,
    ready once ``ready`` (the CUDA event of the decoder's stream, or None) completes.
    ``source_size`` is the (width, height) decoded when the decoder already shrank ``image``
    to the model's letterbox; None when ``image`` is full size. A live stream's CPU decoder
    leaves ``image`` None and gives ``load``, which makes it: a frame that is dropped before
    it is prepared is then never converted from YUV at all."""

    image: Picture | None
    pts: float | None  # seconds
    source_size: tuple[int, int] | None = None
    ready: Any = None
    load: Callable[[], Picture] | None = None
    motion: Any = None  # with motion gating: what to measure it on (decode.motion.MotionInput)

    def __post_init__(self) -> None:
        if self.image is None and self.load is None:
            raise ValueError("a DecodedPicture needs an image or a load to make it")
