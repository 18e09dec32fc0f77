"""What the service knows about one stream (``StreamState``), which sources it accepts, and
which ids it gives streams (``admit``: the same rules in one process and on a cluster).

A stream's URL is checked before anything opens it: ``rtsp://`` or ``rtsps://`` cameras, or
files under a configured media root (played in a loop at their frame rate, as a camera would).
Anything else is refused with the reason. The URL kept for display has its password removed.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from app.errors import SourceRejected, StreamExists, StreamLimit
from app.hosts import check_camera_host
from app.service.config import ServiceConfig, StreamConfig
from app.service.results import StreamOutputs
from app.service.schemas import Stream
from app.service.schemas import StreamAnalytics as StreamAnalyticsView
from app.service.store import ServiceStore
from models.classifier_zoo import classifier_names
from models.spec import ModelSpec
from models.zoo import resolve_model, zoo_names
from pipelines.analytics.config import (
    AnalyticsConfig,
    MaskConfig,
    check_points_inside,
    mask_shapes,
)
from pipelines.classify.config import ClassifierConfig
from pipelines.decode.stage import DecodeStage
from pipelines.events.record import RecordInput
from pipelines.events.ring import PacketRing, RecordingSource
from pipelines.pipeline import Pipeline
from pipelines.sources.media import MEDIA_FORMATS, picture_size
from pipelines.sources.paced import PacedFileSource
from pipelines.sources.status import SourceStatus
from pipelines.sources.url import redact, validate_rtsp_url

SourceKind = Literal["rtsp", "file"]
STATES = ("connecting", "up", "reconnecting", "unreachable", "error", "restarting", "stopped",
          "failed")
# unreachable, error: a camera down past its source's down_after_s, ``reason`` says why;
# restarting: the source is up, and the detector it feeds is being rebuilt after a failure


def resolve_source(url: str, media_roots: list[Path]) -> tuple[SourceKind, str]:
    """``("rtsp", url)`` or ``("file", absolute path)``, or SourceRejected (a ConfigError for a
    malformed camera URL). Every message shows the URL redacted."""
    shown = redact(url)
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise SourceRejected(f"{shown!r} holds a control character (NUL, newline, ...)")
    try:
        parts = urlsplit(url)
    except ValueError:  # a broken IPv6 literal, and the like
        raise SourceRejected(f"{shown}: malformed URL; expected rtsp://[user:password@]host"
                             "[:port]/path or a file path under a media root") from None
    scheme = parts.scheme.lower() if "://" in url else ""
    if scheme in ("rtsp", "rtsps"):
        if not parts.hostname:
            raise SourceRejected(f"{shown}: an RTSP URL needs a host")
        return "rtsp", validate_rtsp_url(url)
    if scheme not in ("", "file"):
        raise SourceRejected(f"scheme {scheme!r} is not allowed: use rtsp://, rtsps:// or a "
                             "file path under a media root")
    path = Path(parts.path if scheme == "file" else url)
    if not media_roots:
        raise SourceRejected("file sources are disabled: no media_roots are configured")
    resolved = path.resolve()
    for root in media_roots:
        if resolved.is_relative_to(root.resolve()):
            if not resolved.is_file():
                raise SourceRejected(f"{redact(str(resolved))}: no such file under the media "
                                     "roots")
            return "file", str(resolved)
    raise SourceRejected(f"{shown} is outside the media roots "
                         f"({', '.join(str(r) for r in media_roots)})")


def check_stream_model(name: str, model_roots: list[Path]) -> str:
    """``name`` if a stream may use it: a zoo model, or a path under a configured model root.
    Anything else gets one answer, whether or not it exists (no file-existence oracle)."""
    return _allowed_model(name, model_roots, zoo_names(), "model")


def check_stream_classifiers(classifiers: list[ClassifierConfig],
                             model_roots: list[Path]) -> list[ClassifierConfig]:
    """The stream's classifiers if it may use them: each a zoo classifier or under a model
    root, as its classes file; SourceRejected (one answer whether or not a path exists)."""
    zoo = classifier_names()
    return [c.model_copy(update={
        "model": _allowed_model(c.model, model_roots, zoo, "classifier"),
        "classes": None if c.classes is None else
        _allowed_model(c.classes, model_roots, [], "classes file")}) for c in classifiers]


def model_of(model: str, store: ServiceStore) -> tuple[Path, ModelSpec]:
    """The model file and card a stream that names ``model`` runs: the one promoted in its
    place (``POST /api/detectors/{id}/candidate/promote``), where one was and still is."""
    path, spec = resolve_model(model)
    promoted = store.promoted(str(path))
    if promoted is not None and Path(promoted).is_file():
        return resolve_model(promoted)
    return path, spec


def _allowed_model(name: str, model_roots: list[Path], zoo: list[str], what: str) -> str:
    if "/" not in name and not name.endswith(".onnx") and name in zoo:
        return name
    if any(ord(c) < 32 for c in name):
        raise SourceRejected(f"{what} {redact(name)!r} holds a control character")
    resolved = Path(name).resolve()
    if any(resolved.is_relative_to(root.resolve()) for root in model_roots):
        return str(resolved)
    roots = ", ".join(str(r) for r in model_roots) or "none configured"
    where = f"neither a zoo {what} ({', '.join(zoo)}) nor under" if zoo else "not under"
    raise SourceRejected(f"{what} {redact(name)!r} is {where} a model root ({roots})")


def admit(requested: str | None, running: Collection[str], max_streams: int,
          new_ids: Iterator[int]) -> str:
    """The id a new stream runs under: ``requested``, else the next free ``stream-N``;
    StreamLimit when ``max_streams`` run already, StreamExists when the id is taken."""
    if len(running) >= max_streams:
        raise StreamLimit(f"the service runs {max_streams} streams, its limit")
    if requested is None:
        return next(c for c in (f"stream-{n}" for n in new_ids) if c not in running)
    if requested in running:
        raise StreamExists(f"stream {requested!r} exists already")
    return requested


@dataclass(eq=False)
class StreamState:
    id: str
    url: str  # already redacted
    kind: SourceKind
    model: str
    policy: str
    outputs: StreamOutputs
    config: StreamConfig | None = None  # as it runs now (its id set; lines and zones current)
    state: str = "connecting"  # what the API shows (STATES)
    source_state: str = "connecting"  # what the source last said
    detector_restarting: bool = False
    recorder: Any = None  # its recorded input, where it has one (RecordInput)
    reconnects: int = 0
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    pipeline: Pipeline | None = None
    task: asyncio.Task[None] | None = None
    source: Any = None
    detector: Any = None  # the SharedDetector its intake (``pipeline``) puts into
    analytics: Any = None  # its StreamAnalytics (tracker, lines, zones), or None

    @property
    def masks(self) -> list[MaskConfig]:
        return self.config.masks if self.config is not None else []

    @property
    def end_state(self) -> str:
        """Its state once its intake ended: failed with an error of its own, else stopped."""
        return "failed" if self.error and not self.detector_restarting else "stopped"

    def view(self, worker: str | None = None) -> Stream:
        """What the API shows: never the credentials, never internals. With analytics, its
        lines and zones (as configured) and their counts."""
        analytics = None
        if self.analytics is not None:
            config = self.analytics.config
            analytics = StreamAnalyticsView(track=config.track.kind,
                                            detect_every=config.detect_every,
                                            detect_fps=config.detect_fps,
                                            motion=config.motion,
                                            motion_heartbeat_s=config.motion_heartbeat_s,
                                            lines=config.lines, zones=config.zones,
                                            classifiers=config.classifiers,
                                            counts=self.analytics.latest)
        status: SourceStatus | None = getattr(self.source, "status", None)  # a camera's
        down = status if status is not None and status.state != "up" else None
        record = self.config.record_url if self.config is not None else None
        return Stream(id=self.id, url=self.url, kind=self.kind, model=self.model,
                      record_url=None if record is None else redact(record),
                      policy=self.policy, state=self.state, reconnects=self.reconnects,
                      error=self.error, created_at=self.created_at, analytics=analytics,
                      masks=self.masks,
                      worker=worker, reason=down.reason if down else None,
                      attempts=down.attempts if down else 0,
                      next_retry_at=down.next_retry_at if down else None,
                      state_since=status.since if status is not None else None)

    def shown(self) -> dict[str, Any]:
        """``view`` as JSON-ready data (the event feed's messages, a worker's heartbeat)."""
        return self.view().model_dump(mode="json")


async def checked_source(url: str, config: ServiceConfig) -> tuple[SourceKind, str]:
    """``resolve_source``, and a camera's host held to ``allowed_networks`` (after DNS)."""
    kind, target = resolve_source(url, config.media_roots)
    if kind == "rtsp":
        await asyncio.to_thread(check_camera_host, target, config.allowed_networks,
                                config.allow_idn_hosts)
    return kind, target


def open_input(kind: SourceKind, target: str, sid: str, config: ServiceConfig, *,
               on_state: Callable[[str], None] | None = None,
               on_reconnect: Callable[[], None] | None = None) -> Any:
    """A stream's input: a file under a media root played in a loop as a camera would be,
    or an RTSP camera (reporting its state and reconnects)."""
    if kind == "file":
        return PacedFileSource(target, sid, loop=True, formats=MEDIA_FORMATS)
    from pipelines.sources.address import AddressPolicy
    from pipelines.sources.rtsp import RtspSource

    policy = AddressPolicy(config.allowed_networks, config.allow_idn_hosts,
                           config.rtsp_redirects)
    return RtspSource(target, sid, stall_timeout_s=config.stall_timeout_s,
                      down_after_s=config.camera_down_after_s, on_state=on_state,
                      on_reconnect=on_reconnect, policy=policy)


def start_recorder(stream: StreamState, record: tuple[SourceKind, str], ring: PacketRing,
                   config: ServiceConfig) -> RecordInput:
    """The stream's recorded input read into ``ring`` on a thread of its own, its packets
    placed on the detected input's timeline (its decode stage's: the intake's first)."""
    assert stream.pipeline is not None, "the intake is attached first"
    decode = stream.pipeline.stages[0]
    assert isinstance(decode, DecodeStage)
    recorder = RecordInput(open_input(*record, stream.id, config), ring, decode.timeline.now)
    recorder.start()
    return recorder


def source_opener(stream: StreamState, config: ServiceConfig, ring: PacketRing | None, *,
                  on_state: Callable[[str], None],
                  on_reconnect: Callable[[], None]) -> Callable[[Any, str], Any]:
    """How the stream's source is opened (on a worker thread): a file under a media root
    played in a loop as a camera would be, or an RTSP camera reporting its state and
    reconnects; kept in ``stream.source``, its packets copied into ``ring`` for clips."""
    def open_source(location: Any, sid: str) -> Any:
        stream.source = open_input(stream.kind, location, sid, config, on_state=on_state,
                                   on_reconnect=on_reconnect)
        if ring is not None:  # its packets kept for clips
            stream.source = RecordingSource(stream.source, ring)
        return stream.source

    return open_source


def on_loop(loop: asyncio.AbstractEventLoop, stream: StreamState,
            call: Callable[..., None]) -> Callable[..., None]:
    """``call(stream, *args)`` run on ``loop``, callable from any thread, while the stream
    lives. The stream is held weakly: it holds its source, which holds this, and a cycle
    would keep a removed stream's decoder and pictures until the collector's next full
    pass."""
    held = weakref.ref(stream)

    def report(*args: Any) -> None:
        if (still := held()) is not None:
            loop.call_soon_threadsafe(call, still, *args)

    return report


def heatmap_png(stream: StreamState) -> bytes | None:
    """The stream's heatmap over its latest picture, as PNG; None while it has tracked
    nothing."""
    if stream.analytics is None or not stream.analytics.heatmap.frames:
        return None
    picture = stream.outputs.snapshot.picture
    return bytes(stream.analytics.heatmap.png(picture, picture_size(stream.source)))


def check_fits(analytics: AnalyticsConfig | None, source: Any, stream_id: str,
               masks: list[MaskConfig] | None = None) -> None:
    """ConfigError (400) where a line, zone or mask lies outside the source's picture, when
    its size is known; a camera's is checked again once it is up."""
    size = picture_size(source)
    if size is None:
        return
    if analytics is not None:
        analytics.check_inside(size, stream_id)
    check_points_inside(mask_shapes(masks or []), size, stream_id)
