"""The wall-clock time a frame was captured, as results and events carry it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pipelines.frame import Frame


def wall_time(frame: Frame) -> str:
    """When the frame was captured (decoded, for a file), as UTC ISO 8601 with milliseconds:
    the ``time`` of result lines and events. The frame keeps its capture on the monotonic
    clock; the wall clock is read here, so a clock step in between cannot reorder frames."""
    return iso_utc(time.time() - (time.monotonic() - frame.captured_at))


def iso_utc(unix_s: float) -> str:
    """Unix time as UTC ISO 8601 with milliseconds and a Z."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
