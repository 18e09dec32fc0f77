"""What the service knows about one stream, and which sources it accepts.

A stream's URL is checked before anything opens it: ``rtsp://`` or ``rtsps://`` cameras, or
files under a configured media root (played in a loop at their frame rate, as a camera would).
Anything else is refused with the reason. The URL kept for display has its password removed.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network, ip_address
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from app.results import StreamOutputs
from models.zoo import zoo_names
from pipelines.pipeline import Pipeline
from pipelines.sources.url import redact, validate_rtsp_url

SourceKind = Literal["rtsp", "file"]
STATES = ("connecting", "up", "reconnecting", "restarting", "stopped", "failed")
# restarting: the source is up, and the detector it feeds is being rebuilt after a failure


class SourceRejected(ValueError):
    """The URL names nothing the service will open; the message says why (an HTTP 400)."""


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


def check_camera_host(url: str, networks: Sequence[IPv4Network | IPv6Network] | None,
                      allow_idn: bool, what: str = "camera") -> None:
    """Refuse a host (a camera's; a webhook's, with ``what``) that is not ASCII (an IDN, or
    bidi controls such as U+202E that make a name read as another) unless ``allow_idn``, or,
    with ``networks``, one that resolves to any address outside them. Blocking (DNS): run it
    off the event loop."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host.isascii() and not allow_idn:
        raise SourceRejected(f"{what} host {ascii(host)} is not plain ASCII (an international "
                             "name or invisible direction marks); set allow_idn_hosts to "
                             "allow it")
    if networks is None:
        return
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, parts.port or 554,
                                                             type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError) as e:
        raise SourceRejected(f"{what} host {ascii(host)} does not resolve ({e})") from None
    outside = sorted(a for a in found
                     if not any(ip_address(a.split("%")[0]) in net for net in networks))
    if outside:
        raise SourceRejected(f"{what} host {ascii(host)} resolves to {', '.join(outside)}, "
                             "outside allowed_networks")


def check_stream_model(name: str, model_roots: list[Path]) -> str:
    """``name`` if a stream may use it: a zoo model, or a path under a configured model root.
    Anything else gets one answer, whether or not it exists (no file-existence oracle)."""
    if "/" not in name and not name.endswith(".onnx") and name in zoo_names():
        return name
    if any(ord(c) < 32 for c in name):
        raise SourceRejected(f"model {redact(name)!r} holds a control character")
    resolved = Path(name).resolve()
    if any(resolved.is_relative_to(root.resolve()) for root in model_roots):
        return str(resolved)
    roots = ", ".join(str(r) for r in model_roots) or "none configured"
    zoo = ", ".join(zoo_names())
    raise SourceRejected(f"model {redact(name)!r} is neither a zoo model ({zoo}) nor under a "
                         f"model root ({roots})")


@dataclass(eq=False)
class StreamRuntime:
    id: str
    url: str  # already redacted
    kind: SourceKind
    model: str
    policy: str
    outputs: StreamOutputs
    state: str = "connecting"  # what the API shows (STATES)
    source_state: str = "connecting"  # what the source last said
    detector_restarting: bool = False
    reconnects: int = 0
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    pipeline: Pipeline | None = None
    task: asyncio.Task[None] | None = None
    source: Any = None
    detector: Any = None  # the SharedDetector its feed (``pipeline``) puts into
    analytics: Any = None  # its StreamAnalytics (tracker, lines, zones), or None

    def public(self) -> dict[str, Any]:
        """What the API shows: never the credentials, never internals. With analytics, its
        lines and zones (as configured) and their counts."""
        shown = {"id": self.id, "url": self.url, "kind": self.kind, "model": self.model,
                 "policy": self.policy, "state": self.state, "reconnects": self.reconnects,
                 "error": self.error, "created_at": self.created_at}
        if self.analytics is not None:
            config = self.analytics.config
            shown["analytics"] = {
                "track": config.track.kind, "detect_every": config.detect_every,
                "lines": [line.model_dump(mode="json") for line in config.lines],
                "zones": [zone.model_dump(mode="json") for zone in config.zones],
                "counts": self.analytics.latest}
        return shown
