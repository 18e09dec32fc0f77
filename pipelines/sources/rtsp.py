"""RtspSource: packets of a live RTSP stream that survives its camera going away.

A camera reboots, a switch flaps, a server restarts: the source notices (an error, a read that
times out, or no video for ``stall_timeout_s``), closes the connection, waits a capped,
jittered, exponentially growing delay and connects again, for as long as it takes (or
``max_attempts`` consecutive failures). Each connection is a new ``epoch``: the decode stage
makes a new decoder for it. The outage shows in ``status`` (``pipelines.sources.status``: the
state, and past ``down_after_s`` why it is down, in words, the attempts and the next retry),
``reconnects`` and the callbacks; a failure that repeats is logged when the state changes.

It demuxes on the decode stage's thread; a TCP connection goes through an ``RtspGuard``
(its relay thread holds the address policy on every connection and redirect). The URL's
credentials never leave this object: logs and ``repr`` show ``redact(url)``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import av

from pipelines.errors import SourceError, StreamLost
from pipelines.sources.address import AddressPolicy, AddressRefused
from pipelines.sources.backoff import Backoff
from pipelines.sources.clock import ArrivalClock
from pipelines.sources.guard import RtspGuard, open_guarded
from pipelines.sources.media import DEFAULT_FPS, METADATA_ERRORS, VideoFacts
from pipelines.sources.settings import check_settings
from pipelines.sources.status import (
    FailureKind,
    SourceState,
    SourceStatus,
    StatusKeeper,
    describe_failure,
    failure_reason,
)
from pipelines.sources.url import redact, redact_text, validate_rtsp_url

log = logging.getLogger(__name__)

STABLE_S = 10.0  # a connection up this long resets the backoff; a shorter one lets it grow


class RtspSource:
    """A live RTSP stream. ``packets()`` yields video packets across reconnections until
    ``close()`` (state ``stopped``) or ``max_attempts`` consecutive failures (state ``failed``)."""

    live = True
    frame_count: int | None = None  # a live stream declares nothing

    def __init__(self, url: str, stream_id: str, *, transport: str = "tcp",
                 open_timeout_s: float = 5.0, read_timeout_s: float = 5.0,
                 stall_timeout_s: float = 5.0, backoff_initial_s: float = 0.25,
                 backoff_max_s: float = 2.0, jitter: float = 0.2,
                 max_attempts: int | None = None, probe_s: float = 0.2,
                 down_after_s: float = 5.0,
                 on_state: Callable[[str], None] | None = None,
                 on_reconnect: Callable[[], None] | None = None,
                 rng_seed: int | None = None, policy: AddressPolicy | None = None) -> None:
        """``policy``: the addresses and redirects each connection may reach (TCP only: the
        connection goes through an ``RtspGuard``); any address, 3 redirects by default."""
        self._url = validate_rtsp_url(url)
        self.url = redact(url)  # the only form that is shown anywhere
        self.policy = policy or AddressPolicy(allow_idn=True)  # `vidpipe run`: any host
        check_settings(self.url, stream_id, transport, max_attempts,
                        {"open timeout": open_timeout_s, "read timeout": read_timeout_s,
                         "stall timeout": stall_timeout_s, "probe time": probe_s,
                         "down after": down_after_s}, self.policy)
        self.stream_id = stream_id
        self.transport = transport
        # A read that waits longer than the stall timeout is a stall too: "no packet at all for
        # stall_timeout_s" ends inside FFmpeg, "packets, but none of video" ends in _connection.
        self.timeouts = (open_timeout_s, min(read_timeout_s, stall_timeout_s))
        self.stall_timeout_s = stall_timeout_s
        self.max_attempts = max_attempts
        self.probe_s = probe_s
        self.backoff = Backoff(backoff_initial_s, backoff_max_s, jitter,
                               rng=random.Random(rng_seed))
        self._on_reconnect = on_reconnect
        self._closing = threading.Event()
        self.keeper = StatusKeeper(self.url, down_after_s, backoff_max_s, self._closing.is_set,
                                   on_state)
        self.epoch = 0
        self.reconnects = 0
        self._container: Any = None  # av.container.InputContainer of the current connection
        self._guard: RtspGuard | None = None  # the relay of the current TCP connection
        self._up_at = 0.0  # when the current connection came up
        self._demuxer: Iterator[av.Packet] | None = None
        self._video: Any = None  # the reader's own; other threads read ``facts``
        self.facts: VideoFacts | None = None  # the last connection's, kept while it is down
        self._ever_up = False
        self._reader: threading.Thread | None = None  # the thread that iterates packets()
        self._io = threading.Lock()  # around every call into the container
        self._clock = ArrivalClock()

    @property
    def status(self) -> SourceStatus:
        return self.keeper.status

    @property
    def state(self) -> SourceState:
        return self.keeper.status.state

    @property
    def video(self) -> av.video.stream.VideoStream:
        """The video stream of the current connection (what PyAVDecoder decodes)."""
        if self._video is None:
            raise SourceError(f"{self.url}: not connected (state {self.state})")
        return self._video  # type: ignore[no-any-return]

    def arrival_time(self, pts: float | None) -> float | None:
        """When the camera sent the frame at ``pts``, from its timestamps (``ArrivalClock``):
        a frame that waited in buffers because the reader fell behind shows as that old."""
        return self._clock.arrival(pts)

    def packets(self) -> Iterator[av.Packet]:
        """Video packets, forever: connect, read until the connection breaks or stalls, wait
        the backoff, connect again. Ends on ``close()`` or after ``max_attempts`` failures."""
        self._reader = threading.current_thread()
        failures = 0
        try:
            while not self._closing.is_set():
                delivered = yield from self._connection()
                if self._closing.is_set():
                    return
                if delivered:
                    failures = 0
                    if time.monotonic() - self._up_at >= STABLE_S:  # a camera that drops each
                        self.backoff.reset()  # connection at once is not called again at once
                else:
                    failures += 1
                    if self.max_attempts is not None and failures >= self.max_attempts:
                        log.error("%s: giving up after %d failed attempts in a row (%s)",
                                  self.url, failures, self.status.reason)
                        self.keeper.set("failed")
                        return
                delay = self.backoff.next_delay()
                self.keeper.waiting(delay)
                self._closing.wait(delay)
        finally:
            self._release()
            if self.state != "failed":
                self.keeper.set("stopped")

    def connect(self) -> None:
        """Make the first connection now, on the caller's thread, so that a camera that cannot
        be reached is one clear error before anything runs: SourceError naming the URL (its
        password hidden) and why. Losses after that reconnect as usual."""
        failure = self._open()
        if failure is not None:
            raise SourceError(f"{self.url}: cannot connect ({failure[1]})")

    @property
    def fps(self) -> float:
        """The frame rate the camera declares (30 where it declares none)."""
        return self.facts.fps if self.facts is not None else DEFAULT_FPS

    def _connection(self) -> Generator[av.Packet, None, int]:
        """One connection's video packets; returns how many it delivered (0: it failed)."""
        if self._container is None:
            failure = self._open()
            if failure is not None:
                self.keeper.failed(*failure, ever_up=self._ever_up)
                return 0
        delivered = 0
        video_index = self._video.index
        last_video = time.monotonic()
        try:
            while True:
                packet = self._read()
                if packet is None:
                    return delivered  # closed from another thread
                now = time.monotonic()
                if packet.stream_index == video_index:
                    last_video = now
                    delivered += 1
                    if packet.pts is not None and packet.time_base is not None:
                        self._clock.observe(float(packet.pts * packet.time_base), now)
                    yield packet
                    self._reader = threading.current_thread()
                elif now - last_video > self.stall_timeout_s:
                    raise StreamLost(f"no video for {now - last_video:.1f} s")
        except (StreamLost, av.FFmpegError, OSError) as e:
            if delivered:
                log.warning("%s: stream lost after %d packets: %s", self.url, delivered,
                            failure_reason(e))
                self.keeper.lost(f"lost after {delivered} packets: {failure_reason(e)}")
            else:
                why = failure_reason(e)
                self.keeper.failed("error", f"connected, but no video arrived ({why})",
                                   ever_up=self._ever_up)
            return delivered
        finally:
            self._release()

    def _open(self) -> tuple[FailureKind, str] | None:
        """Connect; on success (None) the source is ``up`` in a new epoch, else why not: the
        kind of failure and its words (``describe_failure``)."""
        options = {"rtsp_transport": self.transport,
                   "analyzeduration": str(int(self.probe_s * 1_000_000))}
        with self._io:
            if self._closing.is_set():
                return "error", "closed"
            began = time.monotonic()
            try:
                container = self._connect(options)
            except AddressRefused as e:
                log.debug("%s: refused: %s", self.url, e)
                return "error", redact_text(str(e))
            except (av.FFmpegError, OSError) as e:
                log.debug("%s: cannot connect: %s", self.url, failure_reason(e))
                kind, words = describe_failure(e, self._url, timeout_s=self.timeouts[0],
                                               waited_s=time.monotonic() - began)
                return kind, redact_text(words)
            self._container = container  # released with its guard as any connection is
            problem = "closed" if self._closing.is_set() else (
                None if container.streams.video else "the stream has no video track")
            if problem is None:
                self._video, self._up_at = container.streams.video[0], time.monotonic()
                self.facts = VideoFacts.of(self._video)
                self._demuxer = container.demux()  # every track: stall means no *video*
                self._clock.reset()
        if problem is not None:
            self._release()
            return "error", problem
        self.epoch += 1
        if self._ever_up:
            self.reconnects += 1
            log.info("%s: reconnected (%d reconnections)", self.url, self.reconnects)
            if self._on_reconnect is not None:
                self._on_reconnect()
        self._ever_up = True
        self.keeper.up()
        return None

    def _connect(self, options: dict[str, str]) -> Any:
        """FFmpeg's connection to the camera: over TCP through a guard (the policy held on
        it and on each redirect), otherwise as it is."""
        def open_url(url: str) -> Any:
            return av.open(url, options=options, timeout=self.timeouts,
                           metadata_errors=METADATA_ERRORS)

        if self.transport != "tcp" or self._url.startswith("rtsps:"):
            return open_url(self._url)  # TLS end to end, or FFmpeg's own UDP or HTTP
        container, self._guard = open_guarded(self._url, self.policy, self.timeouts[0],
                                              open_url)
        return container

    def _read(self) -> av.Packet | None:
        """The next packet of any track; None once closing. A demuxer that ends (FFmpeg yields
        empty flush packets at the end) means the server hung up: a live stream has no end."""
        with self._io:
            if self._closing.is_set() or self._demuxer is None:
                return None
            packet = next(self._demuxer, None)
        if packet is None or packet.size == 0:
            raise StreamLost("the server ended the stream")
        return packet

    def _release(self) -> None:
        """Close the current connection, if any. Idempotent."""
        with self._io:
            held: list[Any] = [self._demuxer, self._container, self._guard]
            self._demuxer = self._container = self._guard = self._video = None
            for part in held:  # the demuxer first, the guard's relay last
                if part is not None:
                    part.close()

    def describe(self) -> str:
        return f"{self.stream_id}: {self.url} over {self.transport}, {self.state}"

    def close(self) -> None:
        """Stop reading; idempotent, callable from any thread; ``packets()`` then ends.

        A thread that is reading (or holds a packet it has not decoded yet: its decoder may
        still be made from ``video``) keeps the connection until it next resumes ``packets()``,
        within a read timeout, at once on a live stream. Otherwise the connection is closed
        here: by the reading thread itself, before it started, or after it has ended (the
        decode stage closes its source once its worker thread is gone)."""
        self._closing.set()
        reader = self._reader
        if reader is None or reader is threading.current_thread() or not reader.is_alive():
            self._release()
        if self.state != "failed":
            self.keeper.set("stopped")

    def __repr__(self) -> str:
        return f"RtspSource({self.url!r}, {self.stream_id!r}, state={self.state!r})"

    def __enter__(self) -> RtspSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
