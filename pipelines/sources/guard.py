"""RtspGuard: one RTSP connection relayed between FFmpeg and a camera, so that the address
policy holds on every connection FFmpeg makes.

FFmpeg follows an RTSP redirect (a 3xx answer) to wherever it points, as often as it is told
to (a loop made 9,224 requests in 3 s), and resolves the camera's name itself. So the guard
connects to the camera's address, resolved and checked now (``AddressPolicy``), and FFmpeg
is pointed at a listener on 127.0.0.1 that takes one connection, from this process only.
Until FFmpeg's open returns, the camera's answers are read (``HandshakeReader``): a redirect
never reaches FFmpeg — it becomes a ``502`` and its ``Location`` is kept for the source to
decide on (``open_guarded``: followed only to an allowed address, a few times at most).
Then the bytes pass as they are. Only plain RTSP over TCP can be relayed and read so
(``rtsps`` is TLS end to end: FFmpeg connects itself, and only without allowed_networks).

The camera sees requests for ``rtsp://127.0.0.1:PORT/path``: servers route on the path (the
host is rewritten nowhere, as a digest answer covers the request's URI).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import av

from pipelines.errors import ConfigError
from pipelines.sources.address import AddressPolicy, AddressRefused
from pipelines.sources.handshake import HandshakeReader
from pipelines.sources.url import redact, validate_rtsp_url

log = logging.getLogger(__name__)

CHUNK = 64 * 1024


class RtspGuard:
    """Relay one FFmpeg connection to ``url``'s camera, connected here first to the first of
    ``addresses`` (all allowed, resolved by the caller) that answers: a camera that refuses
    or does not answer is that error (OSError), as FFmpeg would have met it. ``url`` is what
    FFmpeg opens instead; ``redirect`` the target of a redirect the camera answered with
    (held back from FFmpeg), if any. Call ``opened()`` once FFmpeg's open has returned, and
    ``close()`` when the connection ends."""

    def __init__(self, url: str, addresses: list[str], timeout_s: float) -> None:
        parts = urlsplit(url)
        self._camera = _connect(addresses, parts.port or 554, timeout_s)
        try:
            self._listener = socket.create_server(("127.0.0.1", 0))
            self._listener.settimeout(timeout_s)
            self._reader = HandshakeReader()
            self._closing = threading.Event()
            self._sockets: list[socket.socket] = [self._camera]
            self._thread = threading.Thread(target=self._run, name="rtsp-guard", daemon=True)
            self._thread.start()
        except BaseException:
            self._camera.close()
            raise
        netloc = f"127.0.0.1:{self._listener.getsockname()[1]}"
        if "@" in parts.netloc:
            netloc = f"{parts.netloc.rsplit('@', 1)[0]}@{netloc}"
        self.url = urlunsplit(parts._replace(netloc=netloc))

    @property
    def redirect(self) -> str | None:
        return self._reader.redirect

    def opened(self) -> None:
        """FFmpeg's open has returned: nothing the camera sends is held any more."""
        self._reader.opened = True

    def _run(self) -> None:
        camera = self._camera
        try:
            client = self._accept()
        except OSError:
            camera.close()
            return  # closed, or FFmpeg never came
        finally:
            self._listener.close()
        self._sockets.append(client)
        try:
            self._relay(client, camera)
        except OSError as e:
            if not self._closing.is_set():
                log.debug("guard: relay ended: %s", e)
        finally:
            for sock in (client, camera):
                sock.close()

    def _accept(self) -> socket.socket:
        """FFmpeg's connection: one from this process (another process that came first to
        the port is turned away)."""
        deadline = time.monotonic() + (self._listener.gettimeout() or 0.0)
        while True:
            client, peer = self._listener.accept()
            if _from_this_process(peer[1]):
                return client
            client.close()
            log.warning("guard: a connection from another process (port %d) turned away",
                        peer[1])
            self._listener.settimeout(max(0.01, deadline - time.monotonic()))

    def _relay(self, client: socket.socket, camera: socket.socket) -> None:
        """Both ways until either side closes; the camera's answers read until FFmpeg's open
        returns."""
        for sock in (client, camera):
            sock.settimeout(None)
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, camera)
            selector.register(camera, selectors.EVENT_READ, client)
            while not self._closing.is_set():
                for key, _ in selector.select(timeout=1.0):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(CHUNK)
                    if not data:
                        return
                    if source is camera:
                        data = self._reader.feed(data)
                    key.data.sendall(data)
                    if self._reader.redirect is not None:
                        return  # the camera sent us elsewhere: this connection is over

    def close(self) -> None:
        """End the relay and its sockets; idempotent."""
        self._closing.set()
        for sock in [self._listener, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept or recv
            except OSError:
                pass
        self._listener.close()
        self._thread.join(timeout=2.0)


def _connect(addresses: list[str], port: int, timeout_s: float) -> socket.socket:
    """A connection to the first address that answers (the last one's error otherwise)."""
    error: OSError = OSError("no address")
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout_s)
        except OSError as e:
            error = e
    raise error


def _from_this_process(port: int) -> bool:
    """Whether the socket connected from 127.0.0.1:``port`` is one of this process's (its
    inode in ``/proc/net/tcp`` among ``/proc/self/fd``); True where there is no /proc."""
    local = f"0100007F:{port:04X}"
    try:
        with open("/proc/self/net/tcp", encoding="ascii") as table:
            inodes = {f"socket:[{row[9]}]" for row in (line.split() for line in table)
                      if len(row) > 9 and row[1] == local}
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in inodes:
                return True
        except OSError:
            continue  # closed meanwhile
    return False


def open_guarded(url: str, policy: AddressPolicy, timeout_s: float,
                 open_url: Callable[[str], Any]) -> tuple[Any, RtspGuard]:
    """``open_url`` (FFmpeg's open) of the camera at ``url`` through a guard, each redirect
    the camera answers with followed only to an address the policy allows, at most
    ``policy.max_redirects`` times: what it opened and its guard (close both), or
    AddressRefused, or the open's own error. Blocking (DNS, the connection)."""
    hop = 0
    while True:
        parts = urlsplit(url)
        what = "camera" if hop == 0 else "redirect target"
        guard = RtspGuard(url, policy.resolve(parts.hostname or "", parts.port or 554, what),
                          timeout_s)
        try:
            opened = open_url(guard.url)
        except (av.FFmpegError, OSError):
            guard.close()
            if guard.redirect is None:
                raise
        except BaseException:
            guard.close()
            raise
        else:
            guard.opened()
            return opened, guard
        url = _redirected(url, guard.redirect, hop, policy.max_redirects)
        hop += 1


def _redirected(url: str, location: str, hop: int, most: int) -> str:
    """The URL a redirect leads to (the credentials carried only to the same host and
    port), or AddressRefused past ``most`` redirects or for a target that is not RTSP."""
    shown = redact(location)
    if hop >= most:
        limit = "redirects are not followed" if most == 0 else f"more than {most} redirects"
        raise AddressRefused(f"the camera redirected to {shown}: {limit} (rtsp_redirects)")
    try:
        target = urlsplit(validate_rtsp_url(location))
    except (ConfigError, ValueError):
        raise AddressRefused(f"the camera redirected to {shown!r}, not an RTSP URL") from None
    before = urlsplit(url)
    same = (target.hostname, target.port or 554) == (before.hostname, before.port or 554)
    if same and "@" in before.netloc and "@" not in target.netloc:
        target = target._replace(netloc=f"{before.netloc.rsplit('@', 1)[0]}@{target.netloc}")
    log.debug("%s: the camera redirected to %s", redact(url), shown)
    return urlunsplit(target)
