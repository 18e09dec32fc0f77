"""The browser tests' parts: Debian's Chromium under Playwright (never a downloaded browser),
and `vidpipe serve` in a subprocess on a free port, playing a clip as a camera.

Chromium needs ``apt-get install chromium`` and ``pip install playwright==1.65.2``; without
them the tests skip, and fail instead when ``REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.requires import unavailable

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"  # screenshots, kept for a person to look at
CHROMIUM = Path("/usr/bin/chromium")
# Root on a machine without a network: no sandbox, no GPU, nothing that phones home.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
STAGES = ("decode", "preprocess", "infer", "postprocess", "sink")


def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright (for a fixture to yield from), or a skip that says
    what is missing."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the playwright package is not installed (pip install playwright==1.65.2)"
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (apt-get install chromium)"
    if missing is not None:
        unavailable("browser", missing)
    try:  # Playwright's driver is a Node.js binary: it needs the system's libatomic1
        playwright = sync_playwright().start()
    except Exception as e:
        unavailable("browser", f"Playwright's driver does not start ({e}; its own error is in "
                               "the output above: apt-get install libatomic1)")
    try:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@contextmanager
def open_page(browser: Any, **options: Any) -> Iterator[Any]:
    """A tab (``options``: Playwright's, a viewport...) whose script errors are collected in
    ``page.errors``, closed at the end: before the service stops, or its open event stream
    would hold the service's graceful shutdown for its full timeout."""
    page = browser.new_page(**options)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        yield page
    finally:
        page.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                timeout=5) as response:
        return json.loads(response.read())


def send_json(method: str, url: str, body: Any, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode(),
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read() or b"null")


def all_stages_measured(base: str, token: str | None = None) -> bool:
    try:
        stages = {s["stage"]: s for s in get_json(f"{base}/api/stats", token)["stages"]}
    except (OSError, urllib.error.URLError, ValueError):
        return False  # not listening yet
    return all(name in stages and stages[name]["work_ms"]["p50"] is not None
               for name in STAGES)


@contextmanager
def serving(clip: Path, tmp_path: Path, token: str | None = None,
            stream: dict | None = None, **settings: Any) -> Iterator[tuple[str, Path]]:
    """`vidpipe serve` on a free port with one file stream ("cam"), once every stage has
    measured; ``token``: the service's VIDPIPE_API_TOKEN; ``stream``: more keys of the
    stream; ``settings``: more keys of the config. Yields its base URL and the clip as the
    service reads it (under its media root)."""
    media = tmp_path / "media"
    media.mkdir()
    served = media / "cam.mp4"
    served.write_bytes(clip.read_bytes())
    port = free_port()
    settings.setdefault("events", {"media_dir": str(tmp_path / "events")})  # not the repo's
    config = tmp_path / "service.yaml"
    config.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": port, "media_roots": [str(media)],
        "results_dir": str(tmp_path / "results"), "state_dir": str(tmp_path / "state"),
        "streams": [{"url": str(served), "id": "cam", **(stream or {})}], **settings,
    }))
    # The developer's own VIDPIPE_* settings (a token, a port) must not change the test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
    if token is not None:
        env["VIDPIPE_API_TOKEN"] = token
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--config", str(config)],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not all_stages_measured(base, token):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the service did not measure every stage:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield base, served
    finally:
        died = proc.poll()  # a service that died under the tests is their failure
        proc.send_signal(signal.SIGTERM)  # drains the streams, as in production
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if died is not None:
        pytest.fail(f"the service died (exit {died}) under the tests:\n"
                    f"{log_path.read_text()[-6000:]}")
