"""RotatingJsonlSink: a live stream's results as JSON lines that are never half on disk.

The service writes ``<directory>/detections.jsonl`` for each stream, in ``vidpipe run``'s
line format, and appends to it across restarts. When the next line would take it past
``rotate_bytes``, it is renamed to ``detections.<n>.jsonl`` (1, 2, ... in the order written:
a name once given never changes, so a reader can follow them) and a new one begun. Each line
is one ``write`` to a file opened for appending, so a reader or a crash sees whole lines only;
a short write (a full disk) is cut back off, and a half line left by a crash of an older
writer is cut off when the file is opened again.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.jsonl import detection_line
from pipelines.sinks.stage import ClosingSink

log = logging.getLogger(__name__)

CURRENT = "detections.jsonl"
_NUMBERED = re.compile(r"^detections\.(\d+)\.jsonl$")
_TAIL_CHUNK = 65536


class RotatingJsonlSink(ClosingSink):
    wants_images = False

    def __init__(self, directory: Path, spec: ModelSpec, rotate_bytes: int) -> None:
        if rotate_bytes < 1:
            raise ValueError(f"rotate_bytes must be >= 1, got {rotate_bytes}")
        self.directory = directory
        self.spec = spec
        self.rotate_bytes = rotate_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / CURRENT
        self.lines = 0
        self.rotations = 0
        self._fd = -1
        self._size = 0
        self._open()

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = _cut_half_line(self._fd, self.path)

    def write(self, result: Result) -> None:
        data = (detection_line(result, self.spec) + "\n").encode()
        if self._size and self._size + len(data) > self.rotate_bytes:
            self._rotate()
        written = os.write(self._fd, data)
        if written != len(data):  # a full disk: no half line stays behind
            os.ftruncate(self._fd, self._size)
            raise OSError(f"{self.path}: wrote {written} of {len(data)} bytes (disk full?)")
        self._size += written
        self.lines += 1

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        numbered = self.directory / f"detections.{next_number(self.directory)}.jsonl"
        os.replace(self.path, numbered)
        self.rotations += 1
        log.info("%s: rotated to %s at %d bytes", self.path, numbered.name, self._size)
        self._open()

    def close(self, commit: bool = True) -> None:
        """Results of a live stream are kept whatever happens: ``commit`` changes nothing."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _numbered(directory: Path) -> list[tuple[int, Path]]:
    """The rotated files of ``directory`` with their numbers, oldest first."""
    return sorted((int(m.group(1)), p) for p in directory.iterdir()
                  if (m := _NUMBERED.match(p.name)))


def next_number(directory: Path) -> int:
    """The number the next rotated file gets: one past the highest there."""
    numbered = _numbered(directory)
    return numbered[-1][0] + 1 if numbered else 1


def result_files(directory: Path) -> list[Path]:
    """A stream's result files, oldest first: the numbered ones, then the current one."""
    files = [p for _, p in _numbered(directory)]
    if (directory / CURRENT).exists():
        files.append(directory / CURRENT)
    return files


def _cut_half_line(fd: int, path: Path) -> int:
    """The file's size once a trailing partial line (an older writer's crash) is cut off."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    os.ftruncate(fd, end)
    log.warning("%s: cut off a half line of %d bytes left by an interrupted writer", path,
                size - end)
    return end
