"""A real RTSP server on 127.0.0.1 for tests (GStreamer's, run by Debian's python3), and a
viewer that reads an RtspSource the way the decode stage does.

``RtspServer`` starts ``tests/rtsp_server.py`` as a subprocess on a free port, waits for its
READY line, and can kill it (SIGKILL: the camera loses power) and start it again on the same
port. ``gstreamer_missing()`` says why the server cannot run here (tests skip with that reason);
CI installs ``RTSP_APT_PACKAGES`` through the Makefile's APT_PACKAGES.
"""

from __future__ import annotations

import functools
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.decode.pyav import PyAVDecoder
from pipelines.errors import DecodeError
from pipelines.sources.rtsp import RtspSource

SYSTEM_PYTHON = "/usr/bin/python3"  # gi is a Debian package; a venv's python cannot import it
SERVER_SCRIPT = Path(__file__).with_name("rtsp_server.py")
HOST = "127.0.0.1"
RTSP_APT_PACKAGES = (
    "python3-gi", "gir1.2-gst-rtsp-server-1.0", "gstreamer1.0-plugins-base",
    "gstreamer1.0-plugins-good", "gstreamer1.0-plugins-ugly",
)
_PROBE = """
import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer
Gst.init(None)
missing = [e for e in ("videotestsrc", "x264enc", "rtph264pay") if not Gst.ElementFactory.find(e)]
if missing:
    raise SystemExit("missing GStreamer elements: " + ", ".join(missing))
"""


@functools.cache
def gstreamer_missing() -> str | None:
    """Why the RTSP server cannot run on this machine, or None when it can."""
    install = f"apt-get install {' '.join(RTSP_APT_PACKAGES)}"
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} not found; {install}"
    try:
        probe = subprocess.run([SYSTEM_PYTHON, "-c", _PROBE], capture_output=True, text=True,
                               timeout=30)
    except subprocess.TimeoutExpired:
        return "probing GStreamer timed out"
    if probe.returncode != 0:
        lines = (probe.stderr or probe.stdout).strip().splitlines()
        return (f"GStreamer RTSP server unavailable ({lines[-1] if lines else 'no output'}); "
                f"{install}")
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class RtspServer:
    """One test-pattern stream at ``url``. A context manager; ``stop()`` is idempotent."""

    def __init__(self, *, path: str = "/cam", fps: int = 30, size: tuple[int, int] = (320, 240),
                 port: int | None = None, pattern: str = "ball") -> None:
        self.port = port or free_port()
        self.path, self.fps, self.size, self.pattern = path, fps, size, pattern
        self.url = f"rtsp://{HOST}:{self.port}{path}"
        self._proc: subprocess.Popen[str] | None = None
        self._log = tempfile.TemporaryFile("w+")
        self.ready_at: float | None = None  # monotonic time of the last READY

    def url_with(self, userinfo: str) -> str:
        return f"rtsp://{userinfo}@{HOST}:{self.port}{self.path}"

    def start(self, timeout_s: float = 15.0) -> float:
        """Start the server and wait until it listens; returns the monotonic time of READY."""
        if self.running:
            raise RuntimeError(f"RTSP server on port {self.port} is already running")
        width, height = self.size
        self._proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(SERVER_SCRIPT), "--port", str(self.port), "--path", self.path,
             "--fps", str(self.fps), "--size", f"{width}x{height}", "--pattern", self.pattern],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, text=True)
        self.ready_at = self._wait_ready(timeout_s)
        return self.ready_at

    def _wait_ready(self, timeout_s: float) -> float:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if selector.select(left) and self._proc.stdout.readline().strip() == "READY":
                    return time.monotonic()
                if self._proc.poll() is not None:
                    break
        self.stop()
        raise RuntimeError(f"RTSP server on port {self.port} did not become ready within "
                           f"{timeout_s} s: {self.stderr()[-2000:]}")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL): connections drop without an RTSP TEARDOWN."""
        self._end(signal.SIGKILL)

    def freeze(self) -> None:
        """Suspend the server (SIGSTOP): connections stay open but nothing comes, a stall."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"RTSP server on port {self.port} is not running")
        self._proc.send_signal(signum)

    def restart(self, timeout_s: float = 15.0) -> float:
        self.kill()
        return self.start(timeout_s)

    def stop(self) -> None:
        """End the server politely (SIGTERM), or by force if it does not go within 5 s."""
        self._end(signal.SIGTERM)

    def _end(self, signum: int) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signum)
            proc.send_signal(signal.SIGCONT)  # a frozen server must still hear SIGTERM
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()

    def stderr(self) -> str:
        self._log.seek(0)
        return self._log.read()

    def close(self) -> None:
        self.stop()
        self._log.close()

    def __enter__(self) -> RtspServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RtspServers:
    """Makes started servers and stops them all at the end (the ``rtsp_servers`` fixture)."""

    def __init__(self) -> None:
        self._servers: list[RtspServer] = []

    def create(self, **kwargs: object) -> RtspServer:
        """A server with its port chosen, not started yet."""
        server = RtspServer(**kwargs)  # type: ignore[arg-type]
        self._servers.append(server)
        return server

    def start(self, **kwargs: object) -> RtspServer:
        server = self.create(**kwargs)
        server.start()
        return server

    def close(self) -> None:
        for server in reversed(self._servers):
            server.close()

    def __enter__(self) -> RtspServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Viewer:
    """Reads a source on its own thread and decodes like the decode stage: a new decoder for
    each epoch. Records (monotonic time, epoch, image shape) of every decoded frame."""

    source: RtspSource
    frames: list[tuple[float, int, tuple[int, ...]]] = field(default_factory=list)
    decode_errors: int = 0

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="viewer")
        self.thread.start()

    def _run(self) -> None:
        decoder, epoch = None, -1
        for packet in self.source.packets():
            if decoder is None or self.source.epoch != epoch:
                decoder, epoch = PyAVDecoder(self.source.video, threads=1), self.source.epoch
            try:
                pictures = decoder.decode(packet)
            except DecodeError:
                self.decode_errors += 1
                continue
            now = time.monotonic()
            self.frames.extend((now, epoch, p.image.shape) for p in pictures)

    def wait_for_frame(self, *, epoch: int, after: float, timeout_s: float) -> float:
        """When the first frame of ``epoch`` decoded after ``after`` came out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, frame_epoch, _ in list(self.frames):
                if frame_epoch == epoch and at > after:
                    return at
            time.sleep(0.01)
        raise AssertionError(f"no frame of epoch {epoch} within {timeout_s} s "
                             f"(state {self.source.state}, epoch {self.source.epoch})")

    def stop(self) -> float:
        """Close the source from this thread; returns how long packets() took to end."""
        start = time.monotonic()
        self.source.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "packets() did not end after close()"
        return time.monotonic() - start


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` until it holds; returns the monotonic time it first did."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout_s} s")
        time.sleep(0.01)
    return time.monotonic()
