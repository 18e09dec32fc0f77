"""What every media file or camera vidpipe opens is opened with.

``METADATA_ERRORS``: how PyAV decodes a container's metadata tags. Its default ("strict")
raises ``UnicodeDecodeError`` from ``av.open`` for a tag that is not UTF-8 (one flipped byte,
or a camera writing Latin-1), though the video itself is intact; "replace" keeps the video and
shows the odd bytes as U+FFFD.
"""

METADATA_ERRORS = "replace"
