"""What the service keeps on disk, and for how long: each stream's rotated results and events
files under ``results_dir`` past ``results_retain_hours`` or beyond ``results_retain_mb``
(oldest first; never a stream's current file), the events' snapshots and clips by the
``events:`` block's retention (``MediaStore.prune``), the events index by the same, and the
heap's free pages given back to the system (``give_back_memory``). Run every ``EVERY_S`` by
the service; ``usage`` is what the dashboard and ``/api/stats`` show.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from app.malloc import give_back_memory
from app.service.store import ServiceStore
from pipelines.events.media import MediaStore

log = logging.getLogger(__name__)

MB = 1024 * 1024
EVERY_S = 60.0
ROTATED = re.compile(r"^(detections|events)\.\d+\.jsonl$")  # a stream's past files


@dataclass(frozen=True, slots=True)
class Usage:
    """One kind of stored data: how much there is, and what it may grow to."""

    mb: float
    files: int
    oldest: float | None  # Unix time of the oldest file's last write
    retain_mb: float
    retain_hours: float


def _files(root: Path, rotated_only: bool) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of the files one folder below ``root``, oldest first."""
    found = []
    folders = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    for folder in folders:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.is_file() or entry.name.startswith("."):
                    continue
                if rotated_only and not ROTATED.match(entry.name):
                    continue
                try:
                    info = entry.stat()
                except FileNotFoundError:  # removed meanwhile
                    continue
                found.append((info.st_mtime, info.st_size, Path(entry.path)))
    return sorted(found)


def prune_results(results_dir: Path, retain_hours: float, retain_mb: float,
                  now: float | None = None) -> int:
    """Remove rotated results and events files past the retention: those older than
    ``retain_hours``, then the oldest until all of ``results_dir`` fits ``retain_mb``. The
    number removed."""
    now = time.time() if now is None else now
    total = sum(size for _, size, _ in _files(results_dir, rotated_only=False))
    removed = 0
    for mtime, size, path in _files(results_dir, rotated_only=True):
        if now - mtime <= retain_hours * 3600 and total <= retain_mb * MB:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed += 1
    if removed:
        log.info("results: removed %d rotated file(s) past the retention (%g h, %g MB)",
                 removed, retain_hours, retain_mb)
    return removed


def usage(root: Path, retain_hours: float, retain_mb: float) -> Usage:
    files = _files(root, rotated_only=False)
    return Usage(mb=round(sum(size for _, size, _ in files) / MB, 3), files=len(files),
                 oldest=files[0][0] if files else None, retain_mb=retain_mb,
                 retain_hours=retain_hours)


class Housekeeper:
    """Prunes what the service keeps, every ``EVERY_S`` on a worker thread, and keeps the
    latest ``usage`` of each kind for the API (measured at once when it starts)."""

    def __init__(self, results_dir: Path | None, results_retain: tuple[float, float],
                 media: MediaStore | None, index: ServiceStore,
                 index_retain_hours: float) -> None:
        """``results_retain``: (hours, MB); the index keeps events as long as their media
        (``index_retain_hours``), and ``index.index_max`` at most."""
        self.results_dir, self.results_retain = results_dir, results_retain
        self.media, self.index = media, index
        self.index_retain_hours = index_retain_hours
        self.results: Usage | None = None
        self.media_usage: Usage | None = None
        self.events_indexed = 0
        self.measured_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="housekeeping")

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.once)
            except OSError as e:  # a disk that went away must not stop the service
                log.error("housekeeping: %s", e)
            await asyncio.sleep(EVERY_S)

    def once(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        hours, mb = self.results_retain
        if self.results_dir is not None:
            prune_results(self.results_dir, hours, mb, now)
            self.results = usage(self.results_dir, hours, mb)
        if self.media is not None:
            self.media.prune(now)
            self.media_usage = usage(self.media.root, self.media.retain_hours,
                                     self.media.retain_mb)
        self.index.prune_events(now - 3600 * self.index_retain_hours, self.index.index_max)
        self.events_indexed = self.index.count_events()
        self.measured_at = time.time()
        give_back_memory()  # what streams removed since, and frames gone, freed

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
