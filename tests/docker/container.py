"""Helpers of the container tests: podman commands, free ports, waiting on the service.

The images are built by ``make image`` (docker/build-image.sh); the tests skip without them,
and fail instead when ``REQUIRE_CONTAINER=1`` (CI's container step).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.requires import unavailable

IMAGE = os.environ.get("VIDPIPE_IMAGE", "vidpipe:cpu")
PROMETHEUS_IMAGE = "localhost/vidpipe-prometheus"
UID = 10001  # the image's user (docker/Dockerfile.cpu)
FIGURES = Path(__file__).resolve().parents[2] / "test-artifacts" / "container.json"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def require_image(image: str) -> None:
    """Skips (or fails with REQUIRE_CONTAINER=1) unless podman has ``image``."""
    reason = None
    if shutil.which("podman") is None:
        reason = "podman is not installed (make image installs it)"
    elif podman("image", "exists", image, check=False).returncode != 0:
        reason = f"no {image} image: build it with `make image`"
    if reason is not None:
        unavailable("container", reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def writable_by_the_image(path: Path) -> Path:
    """A host folder the image's user can write (a bind mount keeps the host's owner)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, UID, UID)
    else:
        path.chmod(0o777)
    return path


def http(url: str, token: str | None = None, body: dict | None = None,
         timeout: float = 10) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """``check()``'s first truthy answer; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = check()
        except (OSError, urllib.error.URLError):
            answer = None
        if answer:
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def wait_healthy(container: str, timeout: float) -> float:
    """Polls ``podman healthcheck run`` (no systemd timers here) until it passes; the seconds
    it took from now."""
    started = time.monotonic()
    wait_for(f"{container} healthy",
             lambda: podman("healthcheck", "run", container, check=False).returncode == 0,
             timeout)
    return time.monotonic() - started


def record(**figures: float) -> None:
    """Adds figures to test-artifacts/container.json (the closing notes quote them)."""
    FIGURES.parent.mkdir(exist_ok=True)
    known = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    FIGURES.write_text(json.dumps(known | figures, indent=2) + "\n")
