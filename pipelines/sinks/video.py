"""AnnotatedVideoSink: the frames with their boxes (label, track id, score), lines and zones
(with their counts) drawn, one H.264 MP4 per stream."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.frame import Detections, Result, host_array
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.stage import ClosingSink

_LINE = (255, 220, 0)
_ZONE = (0, 230, 255)
_COLOURS = [(255, 56, 56), (72, 249, 10), (0, 194, 255), (255, 157, 151), (146, 204, 23),
            (187, 212, 0), (255, 178, 29), (207, 210, 49), (52, 69, 147), (255, 112, 31)]


def draw_detections(image: np.ndarray, detections: Detections, spec: ModelSpec,
                    attributes: dict[int, dict[str, tuple[str, float]]] | None = None
                    ) -> np.ndarray:
    """A copy of an RGB image with each box and its label, track id (where tracked), score
    and its track's classifier answers (``attributes``) drawn on it."""
    out = np.ascontiguousarray(image).copy()
    thickness = _thickness(out)
    for box, score, cls, tid in zip(detections.xyxy, detections.score, detections.class_id,
                                    detections.track_id.tolist(), strict=True):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        colour = _COLOURS[int(cls) % len(_COLOURS)]
        cv2.rectangle(out, (x1, y1), (x2, y2), colour, thickness)
        track = f" #{int(tid)}" if tid >= 0 else ""
        said = "".join(f" {label}" for label, _ in (attributes or {}).get(tid, {}).values())
        _text(out, f"{spec.label(int(cls))}{track} {score:.2f}{said}",
              (x1 + 2, max(y1 - 4, 12)), colour, thickness)
    return out


def draw_analytics(image: np.ndarray, config: AnalyticsConfig,
                   counts: dict[str, Any] | None) -> np.ndarray:
    """``image`` (drawn on in place) with the stream's counting lines and zones, each named
    with its counts after the frame (``Result.analytics``)."""
    thickness = _thickness(image)
    counts = counts or {"lines": {}, "zones": {}}
    for zone in config.zones:
        points = np.array([[round(x), round(y)] for x, y in zone.polygon], np.int32)
        cv2.polylines(image, [points], True, _ZONE, thickness, cv2.LINE_AA)
        c = counts["zones"].get(zone.name, {})
        top = points[points[:, 1].argmin()]  # its label above its highest point, in view
        _text(image, f"{zone.name} {c.get('occupancy', 0)} in",
              (int(top[0]) + 2, max(int(top[1]) - 4, 12 * thickness)), _ZONE, thickness)
    for line in config.lines:
        x1, y1, x2, y2 = (round(v) for v in line.points)
        cv2.line(image, (x1, y1), (x2, y2), _LINE, thickness + 1, cv2.LINE_AA)
        c = counts["lines"].get(line.name, {})
        _text(image, f"{line.name} in {c.get('in', 0)} out {c.get('out', 0)}",
              ((x1 + x2) // 2, (y1 + y2) // 2), _LINE, thickness)
    return image


def _thickness(image: np.ndarray) -> int:
    return max(1, round(min(image.shape[:2]) / 360))


def _text(image: np.ndarray, text: str, at: tuple[int, int], colour: tuple[int, int, int],
          thickness: int) -> None:
    """``text`` in ``colour`` on a dark outline, readable on any picture."""
    for ink, width in (((0, 0, 0), thickness + 2), (colour, thickness)):
        cv2.putText(image, text, (int(at[0]), int(at[1])), cv2.FONT_HERSHEY_SIMPLEX,
                    0.4 * thickness, ink, width, cv2.LINE_AA)


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
                 spec: ModelSpec, analytics: AnalyticsConfig | None = None) -> None:
        """``analytics``: the streams' lines and zones, drawn with their counts."""
        self._path_for = path_for
        self._fps_for = fps_for
        self.spec = spec
        self.analytics = analytics
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
        image = draw_detections(host_array(frame.image), result.detections, self.spec,
                                result.attributes)
        if self.analytics is not None:
            draw_analytics(image, self.analytics, result.analytics)
        encoder.encode(image)

    def close(self, commit: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        for encoder in self._encoders.values():
            encoder.close(commit)
