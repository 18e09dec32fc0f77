"""Settings applied while the service runs (issue 38): `vidpipe serve` given SIGHUP reads its
config file again — a stream's new line counts at once, a stream added to the file starts,
one removed stops, and a key that needs a restart is said to, with its reason, and keeps its
running value."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from models.tracking_data import make_tracking_clip
from tests.app.test_api import wait_for
from tests.support.browser import REPO, free_port, get_json

LINE = {"name": "middle", "points": [160, 0, 160, 192]}


def _config(path: Path, media: Path, port: int, streams: list[dict], **more) -> None:
    path.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": port, "model": "shapes-yolo",
        "media_roots": [str(media)], "results_dir": str(path.parent / "results"),
        "state_dir": str(path.parent / "state"), "streams": streams, **more}))


def test_sighup_applies_what_can_change_live_and_says_what_needs_a_restart(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    clip = make_tracking_clip(media / "lanes.mp4", clip=4, frames=90, size=(320, 192))
    port = free_port()
    config = tmp_path / "service.yaml"
    cam = {"url": str(clip), "id": "cam", "lines": [LINE]}
    gone = {"url": str(clip), "id": "gone"}
    _config(config, media, port, [cam, gone])
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config",
                                 str(config)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _streams(base) == {"cam", "gone"}, timeout=60)
        # the file changes: a second line on cam, gone removed, a new stream, the limit
        # raised (live); the port and the batch size changed (a restart each)
        second = {"name": "second", "points": [100, 0, 100, 192]}
        _config(config, media, port + 1, [cam | {"lines": [LINE, second]},
                                           {"url": str(clip), "id": "new"}],
                max_streams=3, batch_size=2)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: _streams(base) == {"cam", "new"}, timeout=30)
        lines = get_json(f"{base}/api/streams/cam")["analytics"]["lines"]
        assert [line["name"] for line in lines] == ["middle", "second"]
        said = wait_for(lambda: "read again" in _log(log_path) and _log(log_path), timeout=10)
        assert "port changed; it needs a restart (the server listens" in said
        assert "batch_size changed; it needs a restart (the shared detectors" in said
        assert "stream gone removed (gone from the file)" in said
        assert "stream cam: lines applied" in said and "stream new started" in said
        assert proc.poll() is None  # the same process, on the same port
        # the limit, live: a fourth stream is refused
        _config(config, media, port, [cam, {"url": str(clip), "id": "new"},
                                      {"url": str(clip), "id": "third"},
                                      {"url": str(clip), "id": "fourth"}], max_streams=3)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: _streams(base) == {"cam", "new", "third"}, timeout=30)
        wait_for(lambda: "stream fourth: the service runs 3 streams, its limit"
                 in _log(log_path), timeout=10)
        # a file that does not load changes nothing, and says why
        config.write_text("streams: [")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "not applied" in _log(log_path), timeout=10)
        time.sleep(0.5)
        assert _streams(base) == {"cam", "new", "third"} and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _streams(base: str) -> set[str] | None:
    try:
        return {s["id"] for s in get_json(f"{base}/api/streams")}
    except OSError:
        return None


def _log(path: Path) -> str:
    """The service's log as one line of words (the console wraps long records)."""
    return " ".join(path.read_text().split())

