"""What a live source says about itself: its state, and when it is not up, why, in words.

A camera that cannot be reached must say so, not show ``connecting`` for ever. Each failed
connection is classified (``describe_failure``): *unreachable* when nothing answered as a
camera would (refused, timed out, no such host, no route), *error* when something answered
but refused us or sent nothing usable (401, 403, 404, not RTSP, no video track). A source that
has not been up for ``down_after_s`` (or that was refused outright by the camera) shows the
state its last failure names; ``attempts`` and ``next_retry_at`` say what it is doing about it.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlsplit

import av

from pipelines.sources.url import redact_text

log = logging.getLogger("pipelines.sources.rtsp")  # the camera's lines, under its source's name

SourceState = Literal["connecting", "up", "reconnecting", "unreachable", "error", "stopped",
                      "failed"]
FailureKind = Literal["unreachable", "error"]
DOWN_STATES = ("unreachable", "error")
SUMMARY_S = 60.0  # while a camera stays down, one line this often says so


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """A live source's state as the API shows it; replaced whole, so any thread may read it."""

    state: SourceState = "connecting"
    reason: str | None = None  # the last failure in words (None while up)
    attempts: int = 0  # failed connection attempts in a row
    next_retry_at: float | None = None  # Unix time of the next attempt, while waiting for it
    since: float = 0.0  # Unix time the state began

    def moved_to(self, state: SourceState) -> SourceStatus:
        if state == self.state:
            return self
        return replace(self, state=state, since=time.time())


class StatusKeeper:
    """A live source's ``status``, kept from what its connections do (``up``, ``failed``,
    ``lost``, ``set``), and its state changes told to ``on_state`` and the log."""

    def __init__(self, shown_url: str, down_after_s: float, retry_cap_s: float,
                 closing: Callable[[], bool],
                 on_state: Callable[[str], None] | None = None) -> None:
        self.url = shown_url  # redacted
        self.down_after_s = down_after_s
        self.retry_cap_s = retry_cap_s
        self.status = SourceStatus(since=time.time())
        self._closing = closing
        self._on_state = on_state
        self._down_since = time.monotonic()  # when the source last stopped being up
        self._summarised_at = 0.0

    def up(self) -> None:
        before = self.status.state
        self.status = SourceStatus("up", since=time.time())
        self._notify(before)

    def failed(self, kind: FailureKind, words: str, *, ever_up: bool) -> None:
        """A connection attempt failed: counted, and past ``down_after_s`` (at once for a
        camera that refused us) the state names the failure. Logged when the state changes,
        and summarised every ``SUMMARY_S`` while it stays."""
        if words == "closed":
            return
        down_for = time.monotonic() - self._down_since
        state: SourceState = kind if kind == "error" or down_for >= self.down_after_s else \
            ("reconnecting" if ever_up else "connecting")
        before = self.status.state
        self.status = replace(self.status.moved_to(state), reason=words,
                              attempts=self.status.attempts + 1, next_retry_at=None)
        now = time.monotonic()
        if state != before and state in DOWN_STATES:
            log.warning("%s: %s: %s (after %d attempts in %.0f s); retrying every %g s at "
                        "most", self.url, state, words, self.status.attempts, down_for,
                        self.retry_cap_s)
            self._summarised_at = now
        elif state in DOWN_STATES and now - self._summarised_at >= SUMMARY_S:
            log.warning("%s: still %s after %d attempts in %.0f s: %s", self.url, state,
                        self.status.attempts, down_for, words)
            self._summarised_at = now
        self._notify(before)

    def lost(self, words: str) -> None:
        """An up connection broke: reconnecting, from now."""
        self._down_since = time.monotonic()
        before = self.status.state
        self.status = replace(self.status.moved_to("reconnecting"), reason=words, attempts=0)
        self._notify(before)

    def waiting(self, delay_s: float) -> None:
        self.status = replace(self.status, next_retry_at=time.time() + delay_s)

    def set(self, state: SourceState) -> None:
        before = self.status.state
        self.status = replace(self.status.moved_to(state), next_retry_at=None)
        self._notify(before)

    def _notify(self, before: SourceState) -> None:
        """Tell ``on_state`` of a new state. Once closing, only the end is news: a connection
        that completes just after close() must not show the stream as up again."""
        state = self.status.state
        if state == before:
            return
        if self._closing() and state not in ("stopped", "failed"):
            self.status = replace(self.status, state=before)
            return
        log.debug("%s: %s", self.url, state)
        if self._on_state is not None:
            self._on_state(state)


def describe_failure(error: BaseException, url: str, *, waited_s: float = 0.0,
                     timeout_s: float = float("inf")) -> tuple[FailureKind, str]:
    """A failed connection as (kind, words a user can act on). ``url`` is the real one: a
    failure without an errno of its own is told apart by looking its host up. An attempt
    that waited out its ``timeout_s`` timed out, whatever FFmpeg called it (its interrupt
    shows as "Immediate exit requested", or as invalid data when it cut a read short)."""
    if isinstance(error, av.error.HTTPUnauthorizedError):
        return "error", "the camera refused the credentials (401): check the user and password"
    if isinstance(error, av.error.HTTPForbiddenError):
        return "error", "the camera refused access (403)"
    if isinstance(error, av.error.HTTPNotFoundError):
        return "error", "the camera has no stream at this path (404)"
    if isinstance(error, (av.error.HTTPClientError, av.error.HTTPServerError)):
        return "error", f"the camera answered with an error ({_first_line(error)})"
    if isinstance(error, ConnectionRefusedError):
        return "unreachable", "connection refused: nothing listens on that port"
    if isinstance(error, (TimeoutError, av.error.ExitError)) or waited_s >= 0.9 * timeout_s \
            or getattr(error, "errno", None) == errno.ETIMEDOUT:
        return "unreachable", f"timed out: the camera did not answer within {timeout_s:g} s"
    code = getattr(error, "errno", None)
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable", "no route to the camera's host"
    if isinstance(error, av.error.InvalidDataError):
        return "error", "the server's answer is not an RTSP stream"
    if not _resolves(url):
        return "unreachable", "the camera's host name does not resolve (DNS)"
    return "unreachable", _first_line(error)


def _resolves(url: str) -> bool:
    host = urlsplit(url).hostname
    if not host:
        return False
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def _first_line(error: BaseException) -> str:
    """The error's own words, without the URL FFmpeg appends (it may hold a password)."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text).splitlines()[0].split(": '")[0]


def failure_reason(error: BaseException) -> str:
    """An error as one line, with any URL in it redacted (FFmpeg quotes the URL it opened)."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return redact_text(f"{type(error).__name__}: {text}")
