"""An event's media: the best snapshot of an object (clean, and with its box drawn) and its
clip, remuxed from the packet ring without re-encoding; and the folder they are kept in,
pruned by age and total size.

Every file is written under a temporary name and renamed into place, so a reader (the API,
a user's player) never sees half of one. Files are named by the id of the event that
carries them (``<folder>/<stream>/<id>.mp4``, ``<id>.jpg`` with the box, ``<id>.clean.jpg``).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import av
import cv2
import numpy as np

from models.spec import ModelSpec
from pipelines.events.lifecycle import BestPicture
from pipelines.events.ring import ClipPackets
from pipelines.frame import Detections, host_array
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.video import draw_detections

log = logging.getLogger(__name__)

EVENT_ID = re.compile(r"^[0-9a-f]{32}$")
MB = 1024 * 1024
KINDS = {"clip": ".mp4", "snapshot": ".jpg", "clean": ".clean.jpg"}


def write_clip(path: Path, clip: ClipPackets) -> float:
    """Mux ``clip``'s packets into an MP4 at ``path`` (atomically), copied as they are but on
    the clip's own timeline: its first frame at 0, whatever the camera's clock said, and its
    wall-clock start in the file's ``creation_time``. The clip's length in seconds."""
    atomic = AtomicPath(path)
    first = clip.packets[0]  # the key frame the clip starts on: shown at 0
    base = first.pts if first.pts is not None else (first.dts or 0)
    started = datetime.fromtimestamp(clip.started_at, UTC).isoformat(timespec="microseconds")
    try:
        with av.open(str(atomic.partial), "w", format="mp4",
                     options={"movflags": "+faststart"}) as out:
            out.metadata["creation_time"] = started.replace("+00:00", "Z")
            stream = out.add_stream_from_template(clip.template, opaque=True)
            for p in clip.packets:
                packet = av.Packet(p.data)
                packet.pts = None if p.pts is None else p.pts - base
                packet.dts = None if p.dts is None else p.dts - base
                packet.duration = p.duration
                packet.time_base = p.time_base
                packet.is_keyframe = p.keyframe
                packet.stream = stream
                out.mux(packet)
    except BaseException:
        atomic.discard()
        raise
    atomic.commit()
    shown_last = max(clip.packets, key=lambda p: p.at)
    tail = float(shown_last.duration * shown_last.time_base) if shown_last.duration else 0.0
    return clip.end - clip.start + tail  # the file's duration: its last frame lasts too


def write_snapshots(folder: Path, event_id: str, best: BestPicture, class_id: int,
                    spec: ModelSpec, quality: int = 90) -> None:
    """The object's best picture as two JPEGs: with its box drawn, and clean."""
    rgb = host_array(best.image)
    boxed = draw_detections(rgb, Detections(best.box.reshape(1, 4), np.array([best.score]),
                                            np.array([class_id])), spec)
    for suffix, picture in ((KINDS["snapshot"], boxed), (KINDS["clean"], rgb)):
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise ValueError(f"the snapshot of event {event_id} could not be encoded")
        atomic = AtomicPath(folder / f"{event_id}{suffix}")
        atomic.partial.write_bytes(data.tobytes())
        atomic.commit()


@dataclass
class MediaStore:
    """The folder of the events' media; ``prune`` keeps it within ``retain_hours`` and
    ``retain_mb`` (oldest files first)."""

    root: Path
    retain_hours: float = 168.0
    retain_mb: float = 2048.0

    def folder(self, stream: str) -> Path:
        path = self.root / stream
        path.mkdir(parents=True, exist_ok=True)
        return path

    def find(self, event_id: str, kind: str) -> Path | None:
        """The file of ``kind`` (clip, snapshot, clean) of event ``event_id``, if kept: a
        plain file in a stream's folder, never through a link (one placed in the folder must
        not serve what lies outside it)."""
        if not EVENT_ID.match(event_id) or kind not in KINDS or not self.root.is_dir():
            return None
        root = self.root.resolve()
        with os.scandir(self.root) as streams:
            for stream in streams:
                if not stream.is_dir(follow_symlinks=False):
                    continue
                candidate = Path(stream.path) / f"{event_id}{KINDS[kind]}"
                if (candidate.is_file() and not candidate.is_symlink()
                        and candidate.resolve().parent.parent == root):
                    return candidate
        return None

    def prune(self, now: float | None = None) -> int:
        """Remove files older than the retention, then the oldest until the rest fit;
        the number removed."""
        now = time.time() if now is None else now
        files = []
        folders = [Path(p) for p in self.root.iterdir() if p.is_dir()] \
            if self.root.is_dir() else []
        for folder in folders:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.is_file() and not entry.name.startswith("."):
                            info = entry.stat()
                            files.append((info.st_mtime, info.st_size, Path(entry.path)))
                    except FileNotFoundError:  # pruned meanwhile by another writer
                        continue
        files.sort()
        removed = 0
        total = sum(size for _, size, _ in files)
        for mtime, size, path in files:
            if now - mtime <= self.retain_hours * 3600 and total <= self.retain_mb * MB:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
        if removed:
            log.info("events media: removed %d file(s) past the retention", removed)
        return removed
