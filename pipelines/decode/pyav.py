"""PyAVDecoder: FFmpeg decoding on the CPU, to RGB numpy arrays.

A passive part: it decodes the packets it is given, on the caller's thread, and starts no
threads of its own beyond FFmpeg's internal ones (``threads``).

With a ``ScaleTo``, each picture leaves the decoder at the size the model's letterbox draws
it at, so that the preprocessor only pads and normalises, and what crosses to its thread is a
picture of the model's size, not a full one. By default (``scaler="opencv"``) it is what the
reference preprocessing does, done here: FFmpeg converts to full-size RGB, and one
``cv2.resize`` with the card's filter shrinks it, from FFmpeg's own buffer (no copy); the
pixels are the reference's, bit for bit. ``scaler="ffmpeg"`` has ``sws_scale`` convert and
shrink in one pass instead: cheaper, but FFmpeg's filters are not OpenCV's (its bilinear
averages when it shrinks, and it scales the chroma planes on their own), so the model sees
other pixels and some frames get other boxes (measured: docs/MODELS.md, "What the model
sees"); it is used only when the user asks for it (``--ffmpeg-resize``, ``build.py``).

With ``lazy`` (a live stream), a picture is converted only when a stage asks for it
(``Frame.materialize``, when it is prepared): most of a busy camera's frames are replaced by
newer ones before the detector can take them, and converting them was a third of the cost of
decoding (1.1 of 3.4 ms per 720p frame, docs/BENCHMARKS.md).

``RGBConverter`` keeps one swscale context per stream, used by one thread at a time.
``VideoFrame.to_ndarray`` alone makes a new context for every frame, with a pool of threads
sized to the machine: setting the filters and threads up again for each picture cost more
than the conversion itself (docs/BENCHMARKS.md, "Measurements behind code choices").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Literal

import av
import cv2
import numpy as np
from av.sidedata.sidedata import SideDataContainer
from av.video.reformatter import VideoReformatter

from models.spec import InputSpec, Interpolation
from pipelines.decode.motion import MotionInput
from pipelines.decode.picture import DecodedPicture
from pipelines.errors import DecodeError
from pipelines.geometry import Letterbox, ResizeMode
from pipelines.preprocess.reference import OPENCV_FILTERS

Scaler = Literal["opencv", "ffmpeg"]
# The card's ``input.interpolation`` as swscale filters: the nearest FFmpeg has to each.
SWS_FILTERS = {"bilinear": "BILINEAR", "area": "AREA", "nearest": "POINT", "bicubic": "BICUBIC"}


@dataclass(frozen=True, slots=True)
class ScaleTo:
    """Decode pictures at the size a ``mode`` letterbox into ``input_size`` draws them."""

    input_size: tuple[int, int]  # (width, height) of the model input
    mode: ResizeMode = "letterbox"
    interpolation: Interpolation = "bilinear"
    scaler: Scaler = "opencv"  # opencv: the reference's pixels; ffmpeg: one sws_scale pass

    def __post_init__(self) -> None:
        if len(self.input_size) != 2 or min(self.input_size) <= 0:
            raise ValueError(f"input size must be two positive numbers, got {self.input_size}")
        if self.scaler not in ("opencv", "ffmpeg"):
            raise ValueError(f"scaler must be 'opencv' or 'ffmpeg', got {self.scaler!r}")

    @classmethod
    def for_input(cls, spec: InputSpec, scaler: Scaler = "opencv") -> ScaleTo:
        """Pictures the size ``spec``'s letterbox draws them at, with its filter."""
        return cls((spec.width, spec.height), spec.resize, spec.interpolation, scaler)

    def size_for(self, source: tuple[int, int]) -> tuple[int, int]:
        """(width, height) of a ``source`` picture once scaled into the letterbox."""
        return Letterbox.fit(source, self.input_size, self.mode).resized


# swscale's own threads: one. The decoder runs on a stage's thread beside FFmpeg's decoding
# threads and the other stages; a converter that spread each picture over every core would
# only contend with them.
CONVERT_THREADS = 1


class RGBConverter:
    """Decoded frames to RGB arrays (at ``scale``'s size when given), through one swscale
    context kept for the stream: FFmpeg sets it up again only when the frames' size or
    format changes. One thread uses it at a time."""

    def __init__(self, scale: ScaleTo | None = None) -> None:
        self.scale = scale
        self._sws = VideoReformatter()
        self._lock = threading.Lock()  # lazy pictures are converted on the preparing threads

    def convert(self, frame: av.VideoFrame) -> tuple[np.ndarray, tuple[int, int] | None]:
        """The (H, W, 3) uint8 RGB picture, and the frame's (width, height) when scaled."""
        with self._lock:
            return self._convert(frame)

    def _convert(self, frame: av.VideoFrame) -> tuple[np.ndarray, tuple[int, int] | None]:
        if self.scale is None:
            rgb = self._sws.reformat(frame, format="rgb24", threads=CONVERT_THREADS)
            return rgb.to_ndarray(), None
        source = (frame.width, frame.height)
        width, height = self.scale.size_for(source)
        if self.scale.scaler == "ffmpeg":
            rgb = self._sws.reformat(frame, width=width, height=height, format="rgb24",
                                     interpolation=SWS_FILTERS[self.scale.interpolation],
                                     threads=CONVERT_THREADS)
            return rgb.to_ndarray(), source
        full = self._sws.reformat(frame, format="rgb24", threads=CONVERT_THREADS)
        return cv2.resize(_pixels(full), (width, height),
                          interpolation=OPENCV_FILTERS[self.scale.interpolation]), source


def _pixels(rgb: av.VideoFrame) -> np.ndarray:
    """An rgb24 frame's (H, W, 3) pixels as a view of its own buffer (rows may be padded to
    FFmpeg's alignment: a strided view, which OpenCV reads as it is)."""
    plane = rgb.planes[0]
    rows = np.frombuffer(memoryview(plane), dtype=np.uint8).reshape(rgb.height, plane.line_size)
    return rows[:, : rgb.width * 3].reshape(rgb.height, rgb.width, 3)


class PyAVDecoder:
    """Decode one video stream's packets. ``threads=0`` lets FFmpeg choose."""

    resumes_after_flush = True  # decode(None) drains, then it takes packets again

    def __init__(self, stream: av.video.stream.VideoStream, *, threads: int = 0,
                 scale: ScaleTo | None = None, lazy: bool = False) -> None:
        if threads < 0:
            raise ValueError(f"decoder threads must be >= 0, got {threads}")
        self._codec = stream.codec_context
        self._codec.thread_type = "AUTO"
        self._codec.thread_count = threads
        self._time_base: Fraction = stream.time_base or Fraction(1, 90_000)
        self._rgb = RGBConverter(scale)
        self.lazy = lazy
        self._motion: str | None = None  # what each picture carries for motion gating

    def export_motion(self, vectors: bool) -> None:
        """Give each picture its brightness, and with ``vectors`` the codec's motion vectors
        (FFmpeg's ``export_mvs``; set before the first packet is decoded)."""
        if vectors:
            self._codec.options = {**self._codec.options, "flags2": "+export_mvs"}
        self._motion = "vectors" if vectors else "pixels"

    def decode(self, packet: av.Packet | None) -> list[DecodedPicture]:
        """The pictures this packet completes (often none or one; several at a flush).
        ``None`` flushes the decoder: the pictures it still held come out, and it takes
        packets again after (a file played in a loop flushes at the end of each pass)."""
        try:
            frames = self._codec.decode(packet)
            if packet is None:
                self._codec.flush_buffers()
        except av.FFmpegError as e:
            where = "flush" if packet is None else f"packet at pts {packet.pts}"
            raise DecodeError(f"{where} could not be decoded: {e}") from e
        return [self._picture(frame) for frame in frames]

    def _picture(self, frame: av.VideoFrame) -> DecodedPicture:
        pts = float(frame.pts * self._time_base) if frame.pts is not None else None
        motion = None if self._motion is None else self._motion_of(frame)
        if self.lazy:
            source = None if self._rgb.scale is None else (frame.width, frame.height)
            return DecodedPicture(None, pts, source, load=partial(self._load, frame),
                                  motion=motion)
        image, source = self._rgb.convert(frame)
        return DecodedPicture(image, pts, source, motion=motion)

    def _motion_of(self, frame: av.VideoFrame) -> MotionInput:
        """The frame's brightness (a view of its Y plane) and its motion vectors, if any."""
        plane = frame.planes[0]
        rows = np.frombuffer(memoryview(plane), np.uint8).reshape(-1, plane.line_size)
        luma = rows[:frame.height, :frame.width]
        vectors = None
        if self._motion == "vectors":
            # not ``frame.side_data``: the frame keeps that container, which refers to the
            # frame, and the cycle held every decoded picture until the garbage collector's
            # next full pass (+180 MB for one 720p30 camera, docs/BENCHMARKS.md)
            data = SideDataContainer(frame).get("MOTION_VECTORS")  # type: ignore[call-arg]
            vectors = None if data is None else data.to_ndarray()
        return MotionInput(luma, vectors, key=frame.key_frame or int(frame.pict_type) == 1)

    def _load(self, frame: av.VideoFrame) -> np.ndarray:
        return self._rgb.convert(frame)[0]

    def close(self) -> None:
        """Nothing to release: the codec context belongs to the source's container."""

