"""Issue 22's memory checks against a real `vidpipe serve`:
``python tests/soak/service_memory.py soak|cycles|body [ARGS]`` (from the repo root).

- ``soak [MINUTES] [STREAMS] [tracked]`` (30, 4): STREAMS RTSP cameras (GStreamer's server,
  ``tests/rtsp_fixtures.py``, 640x360 at 15 fps) into one service for MINUTES (``tracked``:
  each tracked, with events, snapshots and clips); the server's RSS and threads sampled every
  10 s; prints the least-squares slope in MB/h over all samples after the first two minutes,
  after five, and over the second half alone.
- ``cycles [N] [WARMUP]`` (200, 5): one camera kept running while another stream is added
  through the API, run until it has processed a frame, and removed, N times after WARMUP
  cycles; prints RSS and threads before the first cycle, after the warm-up and after the last,
  and the ``/metrics`` line count.
- ``body``: a POST declaring 200 MB without a token: the status, how long the answer took, and
  the server's RSS before and after.

The server runs as its own process (``python -m app.cli serve``); memory is read from
``/proc/PID/status``. The model is the pruned INT8 shapes detector (the cheapest: the machine's
two cores go to decoding four cameras) unless ``VIDPIPE_SOAK_MODEL`` names another.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.rtsp_fixtures import RtspServers  # noqa: E402

MODEL = os.environ.get("VIDPIPE_SOAK_MODEL", "models/zoo/shapes-yolo/model.pruned50.int8.onnx")
CAMERA = {"size": (640, 360), "fps": 15}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def thread_names(pid: int) -> list[str]:
    return sorted(Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
                  for t in os.listdir(f"/proc/{pid}/task"))


def proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MB, thread count) of a process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


class Server:
    """`vidpipe serve` in a subprocess, on a free port, with a throw-away config."""

    def __init__(self, proc: subprocess.Popen[bytes], base: str, tmp: Path) -> None:
        self.proc, self.base, self.tmp = proc, base, tmp

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=30) as answer:
            return bytes(answer.read())

    def call(self, method: str, path: str, body: dict[str, object] | None = None) -> int:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    def processed(self, stream: str) -> int:
        """Frames a stream has processed (0 while it has none, or is not there)."""
        streams = json.loads(self.get("/api/stats"))["streams"]
        return sum(int(s["outcomes"].get("processed", 0)) for s in streams if s["id"] == stream)

    def status(self) -> tuple[float, int]:
        return proc_status(self.proc.pid)


@contextmanager
def serving(streams: list[dict[str, object]], **settings: object) -> Iterator[Server]:
    """``settings``: more of the service's config (events, say)."""
    tmp = Path(tempfile.mkdtemp(prefix="vidpipe-memory-"))
    port = free_port()
    config = tmp / "service.yaml"
    config.write_text(json.dumps({"port": port, "model": MODEL, "streams": streams,
                                  "results_dir": str(tmp / "results"),
                                  "state_dir": str(tmp / "state"),
                                  "results_rotate_mb": 4, **settings}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
    with (tmp / "service.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config",
                                 str(config)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", tmp)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if all(server.processed(str(s["id"])) > 0 for s in streams):
                    break
            except (OSError, KeyError):
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the service did not start; see {tmp / 'service.log'}")
            time.sleep(0.5)
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def add_run_remove(server: Server, body: dict[str, object], k: int) -> None:
    """Cycle ``k``: the stream ``body`` describes added, run until it has processed a frame,
    and removed."""
    sid = str(body["id"])
    status = server.call("POST", "/api/streams", body)
    if status != 201:
        raise SystemExit(f"cycle {k}: POST answered {status}")
    while server.processed(sid) == 0:
        time.sleep(0.05)
    status = server.call("DELETE", f"/api/streams/{sid}")
    if status != 204:
        raise SystemExit(f"cycle {k}: DELETE answered {status}")


def slope_mb_per_h(samples: list[tuple[float, float]]) -> float:
    t, rss = np.array(samples).T
    return float(np.polyfit(t / 3600.0, rss, 1)[0])


def soak(minutes: float, count: int, tracked: bool = False) -> None:
    with RtspServers() as servers:
        cams = [servers.start(path=f"/cam{k}", **CAMERA) for k in range(count)]
        streams: list[dict[str, object]] = [{"url": c.url, "id": f"cam{k}"}
                                            for k, c in enumerate(cams)]
        settings: dict[str, object] = {}
        if tracked:
            for stream in streams:
                stream["track"] = "bytetrack"
            settings["events"] = {"snapshots": True, "clips": {},
                                  "media_dir": tempfile.mkdtemp(prefix="vidpipe-soak-media-")}
        with serving(streams, **settings) as server:
            began = time.monotonic()
            samples: list[tuple[float, float]] = []
            threads: list[int] = []
            print("minute  RSS MB  threads  processed")
            while (now := time.monotonic() - began) < minutes * 60:
                rss, nthreads = server.status()
                samples.append((now, rss))
                threads.append(nthreads)
                if len(samples) % 6 == 1:
                    done = sum(server.processed(str(s["id"])) for s in streams)
                    print(f"{now / 60:6.1f}  {rss:6.1f}  {nthreads:7d}  {done:9d}", flush=True)
                time.sleep(10)
            done = {str(s["id"]): server.processed(str(s["id"])) for s in streams}
    settled = [s for s in samples if s[0] >= 120]
    warm = [s for s in samples if s[0] >= 300]
    half = [s for s in samples if s[0] >= minutes * 30]
    print(f"{len(streams)} cameras for {minutes:.0f} min, processed {done}")
    if tracked:
        media = Path(str(settings["events"]["media_dir"]))  # type: ignore[index]
        print(f"events media: {sum(1 for p in media.rglob('*') if p.is_file())} files")
    print(f"RSS {samples[0][1]:.1f} MB at start, {settled[0][1]:.1f} at 2 min, "
          f"{warm[0][1]:.1f} at 5 min, {samples[-1][1]:.1f} at the end, max "
          f"{max(r for _, r in samples):.1f}; threads {min(threads)}-{max(threads)}")
    print(f"slope after 2 min: {slope_mb_per_h(settled):+.1f} MB/h; after 5 min: "
          f"{slope_mb_per_h(warm):+.1f} MB/h; second half: {slope_mb_per_h(half):+.1f} MB/h")
    record = os.environ.get("VIDPIPE_SOAK_SAMPLES")
    if record:  # every sample, for the docs' figures
        Path(record).write_text(json.dumps({"minutes": minutes, "streams": len(streams),
                                            "model": MODEL, "samples": samples,
                                            "threads": threads}))


def cycles(count: int, warmup: int) -> None:
    with RtspServers() as servers:
        kept, cycled = (servers.start(path=f"/cam{k}", **CAMERA) for k in range(2))
        with serving([{"url": kept.url, "id": "kept"}]) as server:
            cold = server.status()
            metrics_before = set(server.get("/metrics").decode().splitlines())
            warm, names = cold, thread_names(server.proc.pid)
            began = time.monotonic()
            for k in range(warmup + count):
                if k == warmup:
                    warm, names = server.status(), thread_names(server.proc.pid)
                add_run_remove(server, {"url": cycled.url, "id": "cycled"}, k)
                if (k - warmup + 1) % 50 == 0 and k >= warmup:
                    rss, threads = server.status()
                    print(f"after {k - warmup + 1} cycles: RSS {rss:.1f} MB, threads {threads}",
                          flush=True)
            time.sleep(2)
            after = server.status()
            metrics_after = set(server.get("/metrics").decode().splitlines())
            names_after = thread_names(server.proc.pid)
            seconds = time.monotonic() - began
    print(f"{count} add/remove cycles after {warmup} warm-up ones ({seconds:.0f} s)")
    print(f"cold: RSS {cold[0]:.1f} MB, {cold[1]} threads; after warm-up: {warm[0]:.1f} MB, "
          f"{warm[1]} threads; after the last: {after[0]:.1f} MB, {after[1]} threads")
    print(f"RSS change over the {count}: {after[0] - warm[0]:+.1f} MB (from cold "
          f"{after[0] - cold[0]:+.1f}); threads {after[1] - warm[1]:+d}; /metrics lines "
          f"{len(metrics_before)} -> {len(metrics_after)}")
    def keys(lines: set[str]) -> set[str]:
        return {line.rsplit(" ", 1)[0] for line in lines if not line.startswith("#")}

    print("series added:", sorted(keys(metrics_after) - keys(metrics_before)) or "none",
          "removed:", sorted(keys(metrics_before) - keys(metrics_after)) or "none")
    grown = sorted(set(names_after) - set(names)) or "none"
    print(f"threads after the warm-up: {names}; after the last: {names_after}; new: {grown}")


def body() -> None:
    with RtspServers() as servers:
        cam = servers.start(path="/cam0", **CAMERA)
        with serving([{"url": cam.url, "id": "cam0"}]) as server:
            port = int(server.base.rsplit(":", 1)[1])
            before = server.status()[0]
            size = 200 * 1024 * 1024
            with socket.create_connection(("127.0.0.1", port)) as sock:
                began = time.perf_counter()
                sock.sendall(b"POST /api/streams HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\n"
                             + f"Content-Length: {size}\r\n\r\n".encode())
                chunk = b"x" * (1 << 20)
                sent = 0
                sock.settimeout(0.001)
                answer = b""
                while sent < size and b"\r\n" not in answer:
                    try:
                        sent += sock.send(chunk)
                    except (TimeoutError, BlockingIOError):
                        pass
                    except OSError:
                        break
                    try:
                        answer += sock.recv(4096)
                    except (TimeoutError, BlockingIOError):
                        pass
                sock.settimeout(5)
                while b"\r\n" not in answer:
                    answer += sock.recv(4096)
                took = time.perf_counter() - began
            time.sleep(1)
            after = server.status()[0]
    status_line = answer.split(b"\r\n", 1)[0].decode()
    print(f"200 MB declared, {sent / 2**20:.1f} MB sent before the answer: {status_line} "
          f"after {took * 1000:.1f} ms; RSS {before:.1f} -> {after:.1f} MB "
          f"({after - before:+.1f})")


if __name__ == "__main__":
    mode, *args = sys.argv[1:] or ["soak"]
    if mode == "soak":
        soak(float(args[0]) if args else 30.0, int(args[1]) if len(args) > 1 else 4,
             len(args) > 2 and args[2] == "tracked")
    elif mode == "cycles":
        cycles(int(args[0]) if args else 200, int(args[1]) if len(args) > 1 else 5)
    elif mode == "body":
        body()
    else:
        raise SystemExit(__doc__)
