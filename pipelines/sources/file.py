"""FileSource: packets of the video stream of a local file, demuxed by PyAV (FFmpeg).

A source only demuxes; a decoder (PyAV on the CPU, NVDEC on a GPU) turns its packets into
frames. The same split serves RTSP, where the source also owns timeouts and reconnection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av

from pipelines.errors import SourceError
from pipelines.sources.media import METADATA_ERRORS, VideoFacts

log = logging.getLogger(__name__)


class FileSource:
    """An open video file. Use as a context manager; ``close()`` is idempotent and may be
    called from any thread: while another thread reads ``packets()`` (and decodes with this
    container's codec context) it only asks that thread to stop — freeing FFmpeg's state under
    it would crash it — and the reader releases the container when it next resumes, or the
    owner does once the reading thread has ended."""

    live = False
    epoch = 0  # one connection for a file's whole life

    def __init__(self, path: str | Path, stream_id: str | None = None, *,
                 formats: str | None = None) -> None:
        """``formats``: the only demuxers FFmpeg may read it with (comma-separated; None: any),
        as the service limits the files under its media roots (``MEDIA_FORMATS``)."""
        self.path = Path(path)
        self.stream_id = stream_id or self.path.stem
        if not self.path.exists():
            raise SourceError(f"{self.path}: no such file")
        if not self.path.is_file():
            raise SourceError(f"{self.path}: not a file (expected a video file)")
        try:
            self._container = av.open(str(self.path), mode="r", metadata_errors=METADATA_ERRORS,
                                      options={} if formats is None
                                      else {"format_whitelist": formats})
        except av.FFmpegError as e:
            allowed = "" if formats is None else f"; the media roots allow {formats}"
            raise SourceError(f"{self.path}: not a video FFmpeg can read ({_reason(e)}"
                              f"{allowed})") from e
        if not self._container.streams.video:
            self._container.close()
            raise SourceError(f"{self.path}: has no video stream (expected a video file)")
        self.video = self._container.streams.video[0]
        if self.video.codec_context is None or self.video.codec_context.width == 0:
            self._container.close()
            raise SourceError(f"{self.path}: the video stream has no decodable picture size")
        self.facts = VideoFacts.of(self.video)  # what other threads read: never the container
        self._closed = False
        self._closing = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def size(self) -> tuple[int, int]:
        return self.facts.width, self.facts.height

    @property
    def fps(self) -> float:
        return self.facts.fps

    @property
    def frame_count(self) -> int | None:
        """Frames the container declares, or None when it does not say."""
        return self.facts.frames

    @property
    def time_base(self) -> Fraction:
        return self.facts.time_base

    def packets(self) -> Iterator[av.Packet]:
        """Packets of the video stream, ending with the flush packet. A container that breaks
        off (a truncated file) ends the iteration; the missing frames are the caller's count."""
        self._reader = threading.current_thread()
        demuxer = self._container.demux(self.video)
        try:
            while not self._closing.is_set():
                try:
                    packet = next(demuxer)
                except StopIteration:
                    return
                except av.FFmpegError as e:
                    log.warning("%s: demuxing stopped early: %s", self.path, _reason(e))
                    return
                yield packet
        finally:
            if self._closing.is_set():
                self._release()

    def arrival_time(self, pts: float | None) -> float | None:
        """None: a file's frames are captured when they are decoded."""
        return None

    def describe(self) -> str:
        w, h = self.size
        count = self.frame_count
        return (f"{self.path.name}: {self.facts.codec} {w}x{h} "
                f"{self.fps:.2f} fps, {count if count is not None else 'unknown'} frames")

    def close(self) -> None:
        self._closing.set()
        reader = self._reader
        if reader is None or reader is threading.current_thread() or not reader.is_alive():
            self._release()

    def _release(self) -> None:
        if not self._closed:
            self._closed = True
            self._container.close()

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(error: Exception) -> str:
    return getattr(error, "strerror", None) or str(error)
