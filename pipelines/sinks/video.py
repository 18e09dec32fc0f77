"""AnnotatedVideoSink: the frames with their boxes drawn, one H.264 MP4 per stream."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from models.spec import ModelSpec
from pipelines.frame import Detections, Result, host_array
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.stage import ClosingSink

_COLOURS = [(255, 56, 56), (72, 249, 10), (0, 194, 255), (255, 157, 151), (146, 204, 23),
            (187, 212, 0), (255, 178, 29), (207, 210, 49), (52, 69, 147), (255, 112, 31)]


def draw_detections(image: np.ndarray, detections: Detections, spec: ModelSpec) -> np.ndarray:
    """A copy of an RGB image with each box and its label and score drawn on it."""
    out = np.ascontiguousarray(image).copy()
    thickness = max(1, round(min(out.shape[:2]) / 360))
    for box, score, cls in zip(detections.xyxy, detections.score, detections.class_id, strict=True):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        colour = _COLOURS[int(cls) % len(_COLOURS)]
        cv2.rectangle(out, (x1, y1), (x2, y2), colour, thickness)
        text = f"{spec.label(int(cls))} {score:.2f}"
        cv2.putText(out, text, (x1 + 2, max(y1 - 4, 12)), cv2.FONT_HERSHEY_SIMPLEX,
                    0.4 * thickness, colour, thickness, cv2.LINE_AA)
    return out


class _Encoder:
    def __init__(self, path: Path, size: tuple[int, int], fps: float) -> None:
        self.atomic = AtomicPath(path)
        self.container = av.open(str(self.atomic.partial), mode="w", format="mp4")
        rate = Fraction(fps).limit_denominator(1001)
        self.stream = self.container.add_stream("libx264", rate=rate)
        self.stream.width, self.stream.height = size
        self.stream.pix_fmt = "yuv420p"
        self.stream.options = {"preset": "veryfast", "crf": "23"}

    def encode(self, image: np.ndarray) -> None:
        frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        self.container.mux(self.stream.encode(frame))

    def close(self, commit: bool) -> None:
        if commit:
            self.container.mux(self.stream.encode(None))
        self.container.close()
        if commit:
            self.atomic.commit()
        else:
            self.atomic.discard()


class AnnotatedVideoSink(ClosingSink):
    """Encodes each stream's annotated frames to ``path_for(stream_id)``."""

    wants_images = True

    def __init__(self, path_for: Callable[[str], Path], fps_for: Callable[[str], float],
                 spec: ModelSpec) -> None:
        self._path_for = path_for
        self._fps_for = fps_for
        self.spec = spec
        self._encoders: dict[str, _Encoder] = {}
        self._closed = False

    @property
    def paths(self) -> list[Path]:
        return [e.atomic.final for e in self._encoders.values()]

    def write(self, result: Result) -> None:
        frame = result.frame
        if frame.image is None:
            raise ValueError("AnnotatedVideoSink needs frames with their images")
        if frame.scaled:
            raise ValueError(f"AnnotatedVideoSink needs full pictures, got one decoded at "
                             f"{frame.image_size} of {frame.size}: give it to the pipeline's "
                             f"builder, whose decoders then keep full pictures")
        stream = frame.stream_id
        encoder = self._encoders.get(stream)
        if encoder is None:
            encoder = _Encoder(self._path_for(stream), frame.size, self._fps_for(stream))
            self._encoders[stream] = encoder
        encoder.encode(draw_detections(host_array(frame.image), result.detections, self.spec))

    def close(self, commit: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        for encoder in self._encoders.values():
            encoder.close(commit)
