"""PacketRing: a stream's last seconds of *encoded* packets, for clips cut without
re-encoding; RecordingSource: a source that keeps its packets in one as they are read.

The decode thread appends (a copy of each packet's bytes, a memcpy); the clip writer reads.
What a clip needs to be muxed is kept beside the packets: a *template* of the video stream
(codec, size, extradata) copied into a muxer that is never written, so it outlives the
source's container. A new connection (an RTSP reconnect) starts a new segment: the packets
before it are dropped, since one clip cannot hold both codecs' packets.

The ring's times never go back and follow the stream's timeline (``StreamTimeline``, which
the results' pts and the events are on): a file played in a loop restarts its pts, and the
ring shifts the later packets' pts and dts to follow on from the last ones, so an object seen
across the loop gets one clip with steadily rising timestamps; a new connection's packets
follow on by the time the camera was away. Each packet keeps the wall-clock time it was read,
so a clip can say when it began.
"""

from __future__ import annotations

import io
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av

# pts that go back by more than this are a restart (a looped file), not B-frame reordering
LOOPED_S = 1.0


@dataclass(frozen=True, slots=True)
class StoredPacket:
    data: bytes
    pts: int | None
    dts: int | None
    duration: int
    keyframe: bool
    time_base: Fraction
    at: float  # pts in seconds, on the ring's clock
    wall: float  # Unix time it was read


@dataclass(frozen=True, slots=True)
class ClipPackets:
    """What a clip is cut from: packets starting on a key frame, and their stream's
    template."""

    template: Any  # av.VideoStream of a muxer that is never written
    packets: list[StoredPacket]

    @property
    def start(self) -> float:
        return self.packets[0].at

    @property
    def end(self) -> float:
        return max(p.at for p in self.packets)

    @property
    def started_at(self) -> float:
        """Unix time its first packet was read: when the clip begins."""
        return self.packets[0].wall


class PacketRing:
    def __init__(self, seconds: float, max_bytes: int) -> None:
        if seconds <= 0 or max_bytes <= 0:
            raise ValueError(f"a packet ring needs seconds and bytes > 0, got {seconds}, "
                             f"{max_bytes}")
        self.seconds, self.max_bytes = seconds, max_bytes
        self._packets: deque[StoredPacket] = deque()
        self._bytes = 0
        self._template: Any = None
        self._holder: Any = None  # the never-written muxer that owns the template
        self._lock = threading.Condition()
        self.closed = False
        self._offset_s = 0.0  # stream pts -> the ring's clock
        self._latest: float | None = None  # the latest time on the ring's clock
        self._read_at = 0.0  # monotonic time the latest packet was read
        self._resumed = False  # a new connection: its first packet follows on by the time away
        self._anchor: float | None = None  # where the next packet shows (align)

    def new_segment(self, stream: av.video.stream.VideoStream) -> None:
        """Packets from now on belong to ``stream`` (a first or a new connection)."""
        holder = av.open(io.BytesIO(), "w", format="mp4")
        template = holder.add_stream_from_template(stream, opaque=True)
        with self._lock:
            self._packets.clear()
            self._bytes = 0
            self._template, self._holder = template, holder
            self._resumed = self._latest is not None

    def align(self, at: float) -> None:
        """The next packet appended shows at ``at`` (seconds on the ring's clock): a recorded
        input placed on its detected input's timeline (``pipelines.events.record``)."""
        with self._lock:
            self._anchor = at

    def append(self, packet: av.Packet) -> None:
        if packet.size == 0 or packet.pts is None or packet.time_base is None:
            return  # a flush or a packet without a time: nothing a clip could place
        tb = packet.time_base
        raw = float(packet.pts * tb)
        now = time.monotonic()
        with self._lock:
            if self._template is None:
                return
            step = float(packet.duration * tb) if packet.duration else 1 / 30
            if self._anchor is not None:  # placed by whoever feeds it
                self._offset_s, self._anchor, self._resumed = self._anchor - raw, None, False
            elif self._resumed and self._latest is not None:  # back after time away
                self._offset_s = self._latest + max(now - self._read_at, step) - raw
                self._resumed = False
            elif self._latest is not None and raw + self._offset_s < self._latest - LOOPED_S:
                self._offset_s = self._latest + step - raw  # the pts went back: a loop
            shift = round(self._offset_s / tb)
            at = float((packet.pts + shift) * tb)
            dts = None if packet.dts is None else packet.dts + shift
            stored = StoredPacket(bytes(packet), packet.pts + shift, dts, packet.duration or 0,
                                  bool(packet.is_keyframe), tb, at, time.time())
            self._read_at = now
            self._latest = at if self._latest is None else max(self._latest, at)
            self._packets.append(stored)
            self._bytes += len(stored.data)
            self._trim()
            self._lock.notify_all()

    def _trim(self) -> None:
        """Drop the oldest packets beyond the ring's seconds or bytes."""
        newest = self._latest or 0.0
        while len(self._packets) > 1 and (newest - self._packets[0].at > self.seconds
                                          or self._bytes > self.max_bytes):
            self._bytes -= len(self._packets.popleft().data)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    @property
    def newest(self) -> float | None:
        """The latest time a packet shows (on the ring's clock)."""
        with self._lock:
            return self._latest if self._packets else None

    def wait_until(self, at: float, timeout: float) -> bool:
        """Wait until a packet at or after ``at`` seconds is in, the ring closed, or
        ``timeout`` passed; whether the packet came."""
        with self._lock:
            self._lock.wait_for(lambda: self.closed or (
                self._latest is not None and self._latest >= at), timeout)
            return self._latest is not None and self._latest >= at

    def cut(self, start: float, end: float) -> ClipPackets | None:
        """The packets, in decoding order, from the last key frame at or before ``start``
        (or the oldest one kept, when the ring no longer reaches back to it) through the
        last one shown at or before ``end``, with every packet between (a reference frame
        shown after ``end`` that an earlier B-frame needs is kept); None when the ring holds
        nothing of that span."""
        with self._lock:
            packets = list(self._packets)
            template = self._template
        first = None
        for i, p in enumerate(packets):
            if p.keyframe and (p.at <= start or first is None):
                first = i
            if p.at > start and first is not None:
                break
        if first is None:
            return None
        last = max((i for i in range(first, len(packets)) if packets[i].at <= end),
                   default=None)
        if last is None:
            return None
        chosen = packets[first:last + 1]
        if max(p.at for p in chosen) < start:
            return None
        return ClipPackets(template, chosen)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._lock.notify_all()


class RecordingSource:
    """A packet source that also keeps its packets in ``ring``; everything else is the
    wrapped source's."""

    def __init__(self, source: Any, ring: PacketRing) -> None:
        self._source = source
        self.ring = ring

    def packets(self) -> Iterator[av.Packet | None]:
        epoch = None
        for packet in self._source.packets():
            if packet is None:  # a paced file's end: the decoder's flush, nothing to keep
                yield packet
                continue
            if self._source.epoch != epoch:
                epoch = self._source.epoch
                self.ring.new_segment(self._source.video)
            self.ring.append(packet)
            yield packet
        self.ring.close()

    def close(self) -> None:
        self.ring.close()
        self._source.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def __enter__(self) -> RecordingSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
