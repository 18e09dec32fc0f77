"""WebhookEvents: each event POSTed as JSON to a URL, signed, retried, never waited for.

The body is the event; ``X-Vidpipe-Timestamp`` is when this attempt was sent (Unix seconds)
and ``X-Vidpipe-Signature: sha256=<hex>`` is the HMAC-SHA256, keyed by
``VIDPIPE_WEBHOOK_SECRET``, of ``<timestamp>.<body>``: the receiver recomputes it and
refuses a timestamp too old, so a captured request cannot be replayed later, and the event's
``id`` tells a retry from a new event. A 2xx is delivered; a 5xx, 408, 429, a timeout or a
refused connection is tried again with exponential backoff (``retries`` times); any other
answer, or the retries spent, sends the event to the dead-letter file. Events wait in a
bounded queue for the sender thread: ``publish`` never blocks, and an event that finds the
queue full goes to the dead-letter file at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import requests

from app.outputs.checked_http import Networks, checked_session, refused
from pipelines.errors import ConfigError
from pipelines.events.files import DeadLetters
from pipelines.metrics import PipelineMetrics
from pipelines.sources.url import redact

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 429}
MAX_BACKOFF_S = 30.0


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Vidpipe-Signature`` value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def check_webhook_url(url: str) -> str:
    """``url`` if it is http(s) with a host; ConfigError otherwise (shown redacted)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- a bad port raises here
    except ValueError:  # its text quotes what it took for the port: maybe a password
        raise ConfigError(f"webhook {redact(url)}: malformed (a bad port, or a password "
                          "holding / # or ?: percent-encode it)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"webhook {redact(url)}: only http:// and https:// URLs with a "
                          "host are allowed")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ConfigError(f"webhook {redact(url)!r}: holds a space or control character")
    return url


class WebhookEvents:
    def __init__(self, url: str, secret: bytes, metrics: PipelineMetrics,
                 dead_letters: DeadLetters, *, name: str = "webhook", queue_size: int = 1000,
                 retries: int = 5, backoff_s: float = 0.5,
                 timeout_s: tuple[float, float] = (3.0, 10.0),
                 networks: Networks | None = None) -> None:
        """``networks``: the addresses it may connect to, checked at each connection (the
        service's ``allowed_networks``; None: any)."""
        if not secret:
            raise ConfigError("webhooks need VIDPIPE_WEBHOOK_SECRET (the key of their "
                              "signatures)")
        self.url, self.name = check_webhook_url(url), name
        self.shown = redact(url)
        self._secret = secret
        self._metrics, self._dead = metrics, dead_letters
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(queue_size)
        self._stop = threading.Event()
        self._busy = False  # the sender holds an event (sending, or waiting to retry it)
        self._session = checked_session(networks)
        self._thread = threading.Thread(target=self._run, name=f"events-{name}", daemon=True)
        self._thread.start()

    def publish(self, event: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._dead.add(self.name, "queue full", event)

    def publish_state(self, stream: str, state: dict[str, Any]) -> None:
        """Webhooks get events only."""

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                if self._stop.is_set():
                    self._dead.add(self.name, "not sent before stop", event)
                else:
                    self._busy = True
                    self._deliver(event)
            except Exception as e:  # the sender goes on: what failed is counted, and logged
                self._metrics.count_event(self.name, "dropped")
                log.error("webhook %s: an event was lost (%s)", self.shown, e)
            finally:
                self._busy = False

    def _deliver(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, separators=(",", ":")).encode()
        for attempt in range(self.retries + 1):
            if attempt:
                self._metrics.count_event(self.name, "retried")
                if self._stop.wait(min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))):
                    break  # stopping: no more waits
            outcome = self._attempt(body)
            if outcome == "sent":
                self._metrics.count_event(self.name, "sent")
                return
            if outcome != "retry":
                self._dead.add(self.name, outcome, event)
                return
        self._dead.add(self.name, f"no answer after {attempt + 1} attempt(s)", event)

    def _attempt(self, body: bytes) -> str:
        """``sent``, ``retry``, or why the event is given up."""
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "X-Vidpipe-Timestamp": timestamp,
                   "X-Vidpipe-Signature": signature(self._secret, timestamp, body)}
        try:
            answer = self._session.post(self.url, data=body, headers=headers,
                                        timeout=self.timeout_s, allow_redirects=False)
        except requests.RequestException as e:
            if (why := refused(e)) is not None:
                return f"refused: {why}"  # its name points elsewhere now: no retry reaches it
            log.debug("webhook %s: %s", self.shown, type(e).__name__)
            return "retry"
        if 200 <= answer.status_code < 300:
            return "sent"
        if answer.status_code >= 500 or answer.status_code in RETRY_STATUS:
            return "retry"
        return f"refused: HTTP {answer.status_code}"

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued for up to ``timeout_s``; what is left (and an event whose
        retries the stop cut short) goes to the dead-letter file."""
        deadline = time.monotonic() + timeout_s
        while (self._busy or not self._queue.empty()) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        # behind what is left, which the sender now gives up at once (a request in flight
        # ends at its timeout; the sender is a daemon thread: the process never waits longer)
        sentinel_by = time.monotonic() + sum(self.timeout_s) + 5.0
        while time.monotonic() < sentinel_by:
            try:
                self._queue.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join(max(0.0, sentinel_by - time.monotonic()))
        while True:  # what the sender did not reach
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                break
            if event is not None:
                self._dead.add(self.name, "not sent before stop", event)
        if self._thread.is_alive():
            log.warning("webhook %s: a request was still in flight at the stop; that one "
                        "event is neither sent nor in the dead-letter file", self.shown)
        self._session.close()
