"""RotatingLines: a live stream's JSON lines that are never half on disk; RotatingJsonlSink,
its results in it.

The service writes ``<directory>/detections.jsonl`` for each stream, in ``vidpipe run``'s
line format (and ``events.jsonl``, its events), and appends to it across restarts. When the
next line would take it past ``rotate_bytes``, it is renamed to ``detections.<n>.jsonl``
(1, 2, ... in the order written: a name once given never changes, so a reader can follow
them) and a new one begun. Each line
is one ``write`` to a file opened for appending, so a reader or a crash sees whole lines only;
a short write (a full disk) is cut back off, and a half line left by a crash of an older
writer is cut off when the file is opened again.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from models.spec import ModelSpec
from pipelines.frame import Result
from pipelines.sinks.jsonl import detection_line
from pipelines.sinks.stage import ClosingSink

log = logging.getLogger(__name__)

_TAIL_CHUNK = 65536


class RotatingLines:
    """``<directory>/<name>.jsonl``, appended a whole line at a time, rotated at
    ``rotate_bytes``. One thread writes at a time."""

    def __init__(self, directory: Path, rotate_bytes: int, name: str = "detections") -> None:
        if rotate_bytes < 1:
            raise ValueError(f"rotate_bytes must be >= 1, got {rotate_bytes}")
        self.directory = directory
        self.name = name
        self.rotate_bytes = rotate_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.jsonl"
        self.lines = 0
        self.rotations = 0
        self._fd = -1
        self._size = 0
        self._open()

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = _cut_half_line(self._fd, self.path)

    def write_line(self, text: str) -> None:
        self.write_lines([text])

    def write_lines(self, texts: Sequence[str]) -> None:
        """Whole lines appended in one write, or one more for each rotation among them: the
        file rotates before a line that would take it past ``rotate_bytes``, as it would
        written one by one."""
        chunk: list[bytes] = []
        pending = 0
        for text in texts:
            data = (text + "\n").encode()
            if self._size + pending and self._size + pending + len(data) > self.rotate_bytes:
                self._append(chunk, pending)
                chunk, pending = [], 0
                self._rotate()
            chunk.append(data)
            pending += len(data)
        self._append(chunk, pending)

    def _append(self, lines: list[bytes], size: int) -> None:
        if not lines:
            return
        data = b"".join(lines)
        written = os.write(self._fd, data)
        if written != size:  # a full disk: no half line stays behind
            os.ftruncate(self._fd, self._size)
            raise OSError(f"{self.path}: wrote {written} of {size} bytes (disk full?)")
        self._size += written
        self.lines += len(lines)

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        number = next_number(self.directory, self.name)
        numbered = self.directory / f"{self.name}.{number}.jsonl"
        os.replace(self.path, numbered)
        self.rotations += 1
        log.info("%s: rotated to %s at %d bytes", self.path, numbered.name, self._size)
        self._open()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def discard(self) -> None:
        """Closed, and gone if nothing was ever written to it (a stream refused after its
        outputs opened leaves nothing behind); its folder too, if that is left empty."""
        self.close()
        if self.rotations == 0 and self.path.exists() and self.path.stat().st_size == 0:
            self.path.unlink()
            try:
                self.directory.rmdir()
            except OSError:  # other files of the stream's: kept
                pass


class RotatingJsonlSink(ClosingSink):
    """A stream's results, ``detection_line`` a line, in ``<directory>/detections.jsonl``."""

    wants_images = False

    def __init__(self, directory: Path, spec: ModelSpec, rotate_bytes: int,
                 every_line: bool = False) -> None:
        self.spec, self.every_line = spec, every_line
        self.file = RotatingLines(directory, rotate_bytes)
        self.path = self.file.path

    def write(self, result: Result) -> None:
        self.write_all([result])

    def write_all(self, results: Sequence[Result]) -> None:
        lines = [detection_line(r, self.spec, self.every_line) for r in results]
        self.file.write_lines([line for line in lines if line is not None])

    @property
    def lines(self) -> int:
        return self.file.lines

    @property
    def rotations(self) -> int:
        return self.file.rotations

    def close(self, commit: bool = True) -> None:
        """Results of a live stream are kept whatever happens: ``commit`` changes nothing."""
        self.file.close()


def _numbered(directory: Path, name: str) -> list[tuple[int, Path]]:
    """The rotated files of ``directory`` with their numbers, oldest first."""
    pattern = re.compile(rf"^{re.escape(name)}\.(\d+)\.jsonl$")
    return sorted((int(m.group(1)), p) for p in directory.iterdir()
                  if (m := pattern.match(p.name)))


def next_number(directory: Path, name: str = "detections") -> int:
    """The number the next rotated file gets: one past the highest there."""
    numbered = _numbered(directory, name)
    return numbered[-1][0] + 1 if numbered else 1


def result_files(directory: Path, name: str = "detections") -> list[Path]:
    """A stream's files of ``name``, oldest first: the numbered ones, then the current one."""
    files = [p for _, p in _numbered(directory, name)]
    if (directory / f"{name}.jsonl").exists():
        files.append(directory / f"{name}.jsonl")
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
