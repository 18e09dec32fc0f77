"""Issue 40, item 1: RTSP redirects held to the address policy. A camera on an allowed
address that answers with a redirect reaches nothing outside allowed_networks; a redirect
loop is bounded; a redirect to an allowed camera is followed, its credentials carried only to
the same host. The redirecting cameras are small RTSP answerers on 127.0.0.1, the forbidden
target a listener on 127.0.0.2 (loopback: the whole 127/8 answers on Linux)."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable

import pytest

from pipelines.decode.pyav import PyAVDecoder
from pipelines.errors import SourceError
from pipelines.sources.address import AddressPolicy
from pipelines.sources.handshake import HELD, HandshakeError, HandshakeReader
from pipelines.sources.rtsp import RtspSource
from tests.support.listener import Listener

LOOPBACK_ONLY = AddressPolicy([ipaddress.ip_network("127.0.0.1/32")])
SECRET = "s3cr3t-Pa55"


class Redirector(Listener):
    """Answers OPTIONS with 200 and every other request with a redirect to ``location()``;
    counts the connections it took and keeps the requests."""

    def __init__(self, host: str, location: Callable[[], str], *,
                 challenge: bool = False) -> None:
        """``challenge``: ask a request without credentials for them (401, Basic)."""
        self.location, self.challenge = location, challenge
        self.requests: list[str] = []
        super().__init__(host)
        self.url = f"rtsp://{host}:{self.port}/cam"

    def answer(self, client: socket.socket) -> None:
        buffer = b""
        while data := client.recv(4096):
            buffer += data
            while b"\r\n\r\n" in buffer:
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                self.requests.append(head.decode())
                cseq = next(x.split(":", 1)[1].strip() for x in lines
                            if x.lower().startswith("cseq"))
                asked = not any(x.lower().startswith("authorization") for x in lines)
                if lines[0].startswith("OPTIONS"):
                    answer = f"RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nPublic: DESCRIBE\r\n\r\n"
                elif self.challenge and asked:
                    answer = (f"RTSP/1.0 401 Unauthorized\r\nCSeq: {cseq}\r\n"
                              'WWW-Authenticate: Basic realm="cam"\r\n\r\n')
                else:
                    answer = (f"RTSP/1.0 302 Moved\r\nCSeq: {cseq}\r\n"
                              f"Location: {self.location()}\r\n\r\n")
                client.sendall(answer.encode())


def _reading(source: RtspSource, seconds: float) -> None:
    """Run the source's reconnection loop for ``seconds``, then stop it."""
    reader = threading.Thread(target=lambda: [None for _ in source.packets()], daemon=True)
    reader.start()
    time.sleep(seconds)
    source.close()
    reader.join(5)


def test_a_redirect_outside_allowed_networks_reaches_nothing():
    forbidden = Redirector("127.0.0.2", lambda: "rtsp://127.0.0.2/x")
    camera = Redirector("127.0.0.1", lambda: f"rtsp://127.0.0.2:{forbidden.port}/metadata")
    source = RtspSource(camera.url, "door", policy=LOOPBACK_ONLY, open_timeout_s=2.0,
                        backoff_initial_s=0.1, backoff_max_s=0.2)
    with pytest.raises(SourceError, match="redirect target host '127.0.0.2' resolves to "
                                          "127.0.0.2, outside allowed_networks"):
        source.connect()
    _reading(source, 2.0)
    assert camera.connections >= 4  # it kept trying the camera ...
    assert forbidden.connections == 0  # ... and never once went where it was sent
    assert "outside allowed_networks" in source.status.reason
    camera.close(), forbidden.close()


def test_a_redirect_loop_is_bounded_per_connection_and_by_the_backoff():
    """FFmpeg alone follows a loop without end (9,224 requests in 3 s, measured): through
    the guard, at most 1 + rtsp_redirects connections per attempt, attempts spaced by the
    backoff (2 s at most between them once it has grown)."""
    ports: dict[str, int] = {}
    second = Redirector("127.0.0.2", lambda: f"rtsp://127.0.0.2:{ports['b']}/loop")
    ports["b"] = second.port
    camera = Redirector("127.0.0.1", lambda: f"rtsp://127.0.0.2:{ports['b']}/x")
    source = RtspSource(camera.url, "door", open_timeout_s=2.0, backoff_initial_s=0.25,
                        backoff_max_s=1.0, jitter=0.0)
    with pytest.raises(SourceError, match="more than 3 redirects"):
        source.connect()
    assert (camera.connections, second.connections) == (1, 3)
    _reading(source, 4.0)
    attempts = camera.connections - 1  # backoff 0.25, 0.5, 1, 1 ...: 5 attempts in 4 s
    assert 3 <= attempts <= 6, attempts
    assert second.connections == 3 * camera.connections  # 4 connections an attempt, no more
    camera.close(), second.close()


def test_no_redirect_is_followed_with_rtsp_redirects_0():
    target = Redirector("127.0.0.1", lambda: "rtsp://127.0.0.1:1/x")
    camera = Redirector("127.0.0.1", lambda: target.url)
    source = RtspSource(camera.url, "door", policy=AddressPolicy(max_redirects=0))
    with pytest.raises(SourceError, match="redirects are not followed"):
        source.connect()
    assert target.connections == 0
    source.close(), camera.close(), target.close()


def test_a_redirect_to_an_allowed_camera_is_followed_with_its_credentials_kept_home(
        rtsp_servers):
    """To a real server on the same host: followed, frames decode, the credentials go along;
    to another host they would not (the server's requests show what was sent)."""
    server = rtsp_servers.start(size=(320, 240))
    camera = Redirector("127.0.0.1", lambda: server.url)
    source = RtspSource(camera.url.replace("rtsp://", f"rtsp://admin:{SECRET}@"), "door",
                        policy=LOOPBACK_ONLY)
    source.connect()
    decoder = PyAVDecoder(source.video)
    pictures = []
    for packet in source.packets():
        pictures.extend(decoder.decode(packet))
        if pictures:
            break
    assert pictures[0].image.shape == (240, 320, 3)
    source.close()
    camera.close()


def test_a_redirect_to_another_host_leaves_the_credentials_behind():
    other = Redirector("127.0.0.2", lambda: "rtsp://127.0.0.2:1/x", challenge=True)
    camera = Redirector("127.0.0.1", lambda: other.url)
    source = RtspSource(camera.url.replace("rtsp://", f"rtsp://admin:{SECRET}@"), "door",
                        policy=AddressPolicy(max_redirects=1))
    with pytest.raises(SourceError):
        source.connect()
    assert other.connections == 1 and other.requests  # asked for credentials, got none
    assert not any("Authorization" in r for r in other.requests), other.requests
    source.close(), camera.close(), other.close()


def test_the_handshake_reader_holds_a_redirect_and_passes_the_rest_as_it_is():
    reader = HandshakeReader()
    ok = b"RTSP/1.0 200 OK\r\nCSeq: 2\r\nContent-Length: 4\r\n\r\nv=0\n"
    assert reader.feed(ok[:10]) == b""  # half a line waits
    media = b"$\x00\x00\x03abc"
    assert reader.feed(ok[10:] + media) == ok + media and reader.redirect is None
    moved = b"RTSP/1.0 301 Moved\r\nCSeq: 3\r\nLocation: rtsp://10.0.0.9/a\r\n\r\n"
    assert reader.feed(moved).startswith(HELD + b"\r\nCSeq: 3")
    assert reader.redirect == "rtsp://10.0.0.9/a"
    opened = HandshakeReader()
    opened.opened = True  # FFmpeg's open returned: nothing is read any more
    assert opened.feed(moved) == moved and opened.redirect is None


@pytest.mark.parametrize("answer", [
    b"RTSP/1.0  302 Moved\r\nLocation: rtsp://10.0.0.9/\r\n\r\n",  # two spaces
    b"RTSP/1 302 Moved\r\nLocation: rtsp://10.0.0.9/\r\n\r\n",  # FFmpeg: any first word
    b"HTTP/1.0 302 Moved\r\nLocation: rtsp://10.0.0.9/\r\n\r\n",
    b"RTSP/1.0 200 OK\nCSeq: 1\n\r\r\nRTSP/1.0 302 M\r\nLocation: rtsp://10.0.0.9/\r\n\r\n",
    b"RTSP/1.0 200 OK\r\nContent-Length: 0\r\nContent-Length: 45\r\n\r\n"
    b"RTSP/1.0 302 M\r\nLocation: rtsp://10.0.0.9/\r\n\r\n",  # the last length counts
    b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n$\x00\x00\x02\r\nX\r\n\r\n",  # a frame in a header
])
def test_answers_ffmpeg_would_read_otherwise_are_refused_never_passed(answer):
    """What a camera would send to slip a redirect past a reader laxer or stricter than
    FFmpeg's: refused (the connection ends), or held as a redirect — never passed on."""
    reader = HandshakeReader()
    try:
        out = reader.feed(answer)
    except HandshakeError:
        return
    assert b"302" not in out and reader.redirect is not None, out


def test_a_connection_from_another_process_is_turned_away():
    """The guard's port is open to every process on the machine: only this one's
    connection is relayed to the camera."""
    import subprocess
    import sys

    camera = Redirector("127.0.0.1", lambda: "rtsp://127.0.0.1:1/x")
    from pipelines.sources.guard import RtspGuard

    guard = RtspGuard(camera.url, ["127.0.0.1"], 3.0)
    port = int(guard.url.rsplit(":", 1)[1].split("/")[0])
    script = ("import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
              "s.sendall(b'OPTIONS * RTSP/1.0\\r\\nCSeq: 1\\r\\n\\r\\n'); s.settimeout(1)\n"
              "try:\n    print(len(s.recv(100)))\nexcept OSError as e:\n    print(0, e)")
    other = subprocess.run([sys.executable, "-c", script, str(port)], capture_output=True,
                           text=True, timeout=10)
    assert other.stdout.split()[0] == "0", other  # closed on it (or reset), nothing relayed
    assert camera.requests == []
    with socket.create_connection(("127.0.0.1", port)) as ours:
        ours.sendall(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        assert ours.recv(100).startswith(b"RTSP/1.0 200 OK")
    guard.close()
    camera.close()


def test_a_connection_the_guard_cannot_read_is_refused_with_allowed_networks():
    """rtsps is TLS end to end, and FFmpeg makes UDP and HTTP transports' connections itself:
    none can be held to allowed_networks, so none is accepted with them."""
    from pipelines.errors import ConfigError

    for url, transport in (("rtsps://127.0.0.1/cam", "tcp"), ("rtsp://127.0.0.1/cam", "udp")):
        with pytest.raises(ConfigError, match="only plain rtsp:// over tcp"):
            RtspSource(url, "door", transport=transport, policy=LOOPBACK_ONLY)
        RtspSource(url, "door", transport=transport).close()  # without networks: as before
