"""What every media file or camera vidpipe opens is opened with.

``METADATA_ERRORS``: how PyAV decodes a container's metadata tags. Its default ("strict")
raises ``UnicodeDecodeError`` from ``av.open`` for a tag that is not UTF-8 (one flipped byte,
or a camera writing Latin-1), though the video itself is intact; "replace" keeps the video and
shows the odd bytes as U+FFFD. ``picture_size``: a source's picture size, once known.
"""

from __future__ import annotations

from typing import Any

from pipelines.errors import SourceError

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


def picture_size(source: Any) -> tuple[int, int] | None:
    """The (width, height) of a source's pictures, when known: a file's; a camera's once it
    has connected (None before)."""
    try:
        video = source.video
    except SourceError:
        return None
    return (int(video.width), int(video.height)) if video is not None else None
