"""What every media file or camera vidpipe opens is opened with.

``METADATA_ERRORS``: how PyAV decodes a container's metadata tags. Its default ("strict")
raises ``UnicodeDecodeError`` from ``av.open`` for a tag that is not UTF-8 (one flipped byte,
or a camera writing Latin-1), though the video itself is intact; "replace" keeps the video and
shows the odd bytes as U+FFFD. ``VideoFacts``: what a source's video stream declares, read
once on the thread that opened it. ``picture_size``: a source's picture size, once known.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

DEFAULT_FPS = 30.0  # a stream that declares no rate

METADATA_ERRORS = "replace"

# The demuxers a file under the service's media roots may be read with (FFmpeg's
# ``format_whitelist``): video containers and raw streams, no playlist (hls, dash), list
# (concat), image-sequence or device format, which would open other files or devices than the
# one checked against the roots.
MEDIA_FORMATS = ",".join((
    "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm", "avi", "mpegts", "flv",
    "h264", "hevc", "mjpeg", "mpeg", "mpegvideo", "m4v", "asf", "ivf", "nut", "ogg",
    "yuv4mpegpipe", "obu",
))


@dataclass(frozen=True)
class VideoFacts:
    """What a video stream declares, as plain values. Read once, when the stream is opened, on
    the thread that opened it: another thread asking FFmpeg while the reader demuxes, or after
    the reader closed the container, reads freed memory (a sink asking a file's rate after the
    file ended crashed the service)."""

    width: int
    height: int
    fps: float  # the average rate, else FFmpeg's guess, else DEFAULT_FPS
    time_base: Fraction
    frames: int | None  # what the container declares; None where it does not say
    codec: str

    @classmethod
    def of(cls, video: Any) -> VideoFacts:
        """From a PyAV video stream."""
        rate = video.average_rate or video.guessed_rate
        codec = video.codec_context
        return cls(width=int(codec.width), height=int(codec.height),
                   fps=float(rate) if rate else DEFAULT_FPS,
                   time_base=video.time_base or Fraction(1, 90_000),
                   frames=int(video.frames) or None, codec=str(codec.name))


def picture_size(source: Any) -> tuple[int, int] | None:
    """The (width, height) of a source's pictures, when known: a file's; a camera's once it
    has connected (None before)."""
    facts = getattr(source, "facts", None)
    return (facts.width, facts.height) if facts is not None else None
