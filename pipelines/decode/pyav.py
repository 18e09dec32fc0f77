"""PyAVDecoder: FFmpeg decoding on the CPU, to RGB numpy arrays.

A passive part: it decodes the packets it is given, on the caller's thread, and starts no
threads of its own beyond FFmpeg's internal ones (``threads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

from pipelines.errors import DecodeError


@dataclass(slots=True)
class DecodedPicture:
    image: np.ndarray  # (H, W, 3) uint8 RGB
    pts: float | None  # seconds


class PyAVDecoder:
    """Decode one video stream's packets. ``threads=0`` lets FFmpeg choose."""

    def __init__(self, stream: av.video.stream.VideoStream, *, threads: int = 0) -> None:
        if threads < 0:
            raise ValueError(f"decoder threads must be >= 0, got {threads}")
        self._codec = stream.codec_context
        self._codec.thread_type = "AUTO"
        self._codec.thread_count = threads
        self._time_base: Fraction = stream.time_base or Fraction(1, 90_000)

    def decode(self, packet: av.Packet | None) -> list[DecodedPicture]:
        """The pictures this packet completes (often none or one; several at a flush).
        ``None`` flushes the decoder: the pictures it still held come out."""
        try:
            frames = self._codec.decode(packet)
        except av.FFmpegError as e:
            where = "flush" if packet is None else f"packet at pts {packet.pts}"
            raise DecodeError(f"{where} could not be decoded: {e}") from e
        return [self._picture(frame) for frame in frames]

    def _picture(self, frame: av.VideoFrame) -> DecodedPicture:
        pts = float(frame.pts * self._time_base) if frame.pts is not None else None
        return DecodedPicture(frame.to_ndarray(format="rgb24"), pts)

    def close(self) -> None:
        """Nothing to release: the codec context belongs to the source's container."""
