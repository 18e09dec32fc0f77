"""What every media file or camera vidpipe opens is opened with.

``METADATA_ERRORS``: how PyAV decodes a container's metadata tags. Its default ("strict")
raises ``UnicodeDecodeError`` from ``av.open`` for a tag that is not UTF-8 (one flipped byte,
or a camera writing Latin-1), though the video itself is intact; "replace" keeps the video and
shows the odd bytes as U+FFFD.
"""

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
