"""`vidpipe serve` as a process: it starts the configured streams and drains on SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tests.support.api import one_camera_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.load(response)


def test_sigterm_drains_the_streams_and_exits_within_10_s(small_clip, tmp_path):
    port = free_port()
    config = one_camera_config(small_clip, tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config", str(config),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        fps = 0.0
        while time.monotonic() < deadline and fps <= 0:
            time.sleep(0.3)
            try:
                streams = get_json(f"{base}/api/stats")["streams"]
                fps = streams[0]["fps"] if streams else 0.0
            except OSError:
                continue
        assert fps > 0, "the configured stream never delivered frames"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=15)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"SIGTERM to exit: {took:.2f} s")
    # uvicorn re-raises the signal once it has shut down, so the exit status says "terminated
    # by SIGTERM" (-15, or 143 in a shell), as a supervisor expects.
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "drained 1 stream(s)" in output and "Application shutdown complete" in output
    assert took < 10.0
    assert "Traceback" not in output


def _serving(tmp_path, extra: str = "") -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = tmp_path / "service.yaml"
    config.write_text(f"results_dir: {tmp_path / 'results'}\n{extra}")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config", str(config),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "VIDPIPE_API_TOKEN": "t0ken"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            get_json(f"http://127.0.0.1:{port}/healthz")
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"vidpipe serve did not come up: {proc.communicate()[0][-2000:]}")


def _raw_post(port: int, headers: str, body: bytes = b"") -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"POST /api/streams HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode()
                  + body)
        return s.recv(4096).decode(errors="replace")


def test_a_huge_body_is_refused_before_it_is_read(tmp_path):
    """Issue 22, item 4: 200 MB declared, none of it sent: the answer is a 413 at once (the
    old service waited to read the whole body before its token check)."""
    proc, port = _serving(tmp_path, "max_body_kb: 64\n")
    try:
        start = time.monotonic()
        answer = _raw_post(port, "Content-Type: application/json\r\n"
                                 "Content-Length: 209715200\r\n")
        took = time.monotonic() - start
        assert answer.startswith("HTTP/1.1 413"), answer
        assert took < 2.0
        chunked = _raw_post(port, "Content-Type: application/json\r\n"
                                  "Transfer-Encoding: chunked\r\n",
                            b"".join(b"%x\r\n%s\r\n" % (8192, b"x" * 8192) for _ in range(9)))
        assert chunked.startswith("HTTP/1.1 413"), chunked
        small = _raw_post(port, "Content-Type: application/json\r\nContent-Length: 2\r\n",
                          b"{}")
        assert small.startswith("HTTP/1.1 401"), small  # within the limit: the token decides
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_malloc_arenas_are_limited_unless_the_environment_says_otherwise(monkeypatch):
    from app.malloc import limit_malloc_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas() is True  # glibc, as on every machine vidpipe ships for
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_bad_webhook_settings_are_one_line_and_exit_2(tmp_path):
    """Issue 40, item 3: they crashed the start-up with a traceback and exit 3 (and a broker
    outside allowed_networks went unchecked)."""
    cases = [({}, '["https://example.com/hook"]', "need VIDPIPE_WEBHOOK_SECRET set"),
             ({"VIDPIPE_WEBHOOK_SECRET": "s"}, '["ftp://example.com/hook"]',
              "only http:// and https:// URLs"),
             ({"VIDPIPE_WEBHOOK_SECRET": "s"}, '["http://127.0.0.1:9/hook"]',
              "webhook host '127.0.0.1' resolves to 127.0.0.1, outside allowed_networks"),
             ({}, '[]\n  mqtt: mqtt://user:pw@127.0.0.1:9/v',
              "MQTT broker host '127.0.0.1' resolves to 127.0.0.1, outside allowed_networks")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
    for extra, webhooks, words in cases:
        config = tmp_path / "service.yaml"
        config.write_text(f"port: {free_port()}\nstate_dir: null\nallowed_networks: "
                          f"[10.0.0.0/8]\nevents:\n  webhooks: {webhooks}\n")
        done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--config", str(config)],
                              env={**env, **extra}, capture_output=True, text=True, timeout=60)
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        assert words in output and "Traceback" not in output, output
        assert len(output.strip().splitlines()) == 1, output
