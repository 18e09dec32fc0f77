"""Issue 24: the CPU image run for real with podman, as a user would run it, and the compose
stack's Prometheus scraping it. ``make image`` builds the images; CI runs these in their own
step (``make test-container``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.docker.container import (
    IMAGE,
    PROMETHEUS_IMAGE,
    UID,
    free_port,
    http,
    podman,
    record,
    require_image,
    wait_for,
    wait_healthy,
    writable_by_the_image,
)

pytestmark = [pytest.mark.container, pytest.mark.slow]

DOCKER = Path(__file__).resolve().parents[2] / "docker"
TOKEN = "c0ntainer-t0ken"
STAGES = {"decode", "preprocess", "infer", "postprocess", "analytics", "sink"}
SHAPES = {"disc", "box", "triangle", "ring", "cross"}  # shapes-yolo's classes (its card)


@pytest.fixture
def media(tmp_path) -> Path:
    from models.tracking_data import make_tracking_clip

    folder = tmp_path / "media"
    folder.mkdir()
    make_tracking_clip(folder / "lanes.mp4", clip=4, frames=90, size=(320, 192))
    return folder


def detection_lines(path: Path) -> list[dict]:
    """Every line of a detections file, each parsed: a torn line fails the test."""
    text = path.read_text()
    assert text.endswith("\n"), "the last line is cut"
    return [json.loads(line) for line in text.splitlines()]


def test_the_image_serves_a_stream_non_root_on_a_read_only_root_and_drains_on_stop(
        media, tmp_path):
    require_image(IMAGE)
    results = writable_by_the_image(tmp_path / "results")
    port, name = free_port(), f"vidpipe-test-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8080",
           # as the compose file runs it: no writable root, no capabilities
           "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges",
           "--env", f"VIDPIPE_API_TOKEN={TOKEN}", "--env", "VIDPIPE_MODEL=shapes-yolo",
           "--volume", f"{DOCKER / 'service.yaml'}:/etc/vidpipe/service.yaml:ro",
           "--volume", f"{media}:/srv/media:ro",
           "--volume", f"{results}:/var/lib/vidpipe/results",
           IMAGE, "serve", "--config", "/etc/vidpipe/service.yaml")
    try:
        wait_healthy(name, timeout=120)
        healthy_s = time.monotonic() - started  # from `podman run`
        base = f"http://127.0.0.1:{port}"

        stream = {"url": "/srv/media/lanes.mp4", "id": "cam"}
        assert http(f"{base}/api/streams", body=stream)[0] == 401  # the token is required
        status, body = http(f"{base}/api/streams", token=TOKEN, body=stream)
        assert status == 201, body
        detections = results / "cam" / "detections.jsonl"
        wait_for("60 frames of detections in the mounted folder",
                 lambda: detections.exists() and detections.read_text().count("\n") >= 60, 90)
        labels = {d["label"] for line in detection_lines(detections) for d in line["detections"]}
        assert labels and labels <= SHAPES, labels

        status, body = http(f"{base}/metrics", token=TOKEN)
        assert status == 200
        scraped = {line.split('stage="')[1].split('"')[0] for line in body.decode().splitlines()
                   if line.startswith("vidpipe_stage_seconds_bucket{")}
        assert scraped == STAGES, scraped

        inspected = json.loads(podman("inspect", name).stdout)[0]
        assert inspected["Config"]["User"] == f"{UID}:{UID}"
        assert inspected["HostConfig"]["ReadonlyRootfs"] is True
        assert podman("exec", name, "id", "-u").stdout.strip() == str(UID)
        refused = podman("exec", name, "touch", "/opt/vidpipe/written", check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr

        # stopped while the stream plays (a file plays in a loop): drained, every line whole
        status, body = http(f"{base}/api/streams/cam", token=TOKEN)
        assert status == 200 and json.loads(body)["state"] == "up", body
        before = time.monotonic()
        podman("stop", "--time", "15", name, timeout=60)
        stop_s = time.monotonic() - before
        state = json.loads(podman("inspect", name).stdout)[0]["State"]
        logs = podman("logs", name).stdout + podman("logs", name).stderr
        assert state["ExitCode"] == 0, logs[-2000:]
        assert "drained 1 stream(s)" in logs, logs[-2000:]
        assert stop_s < 10, f"stop took {stop_s:.1f} s"
        frames = [line["frame"] for line in detection_lines(detections)]
        assert all(b > a for a, b in zip(frames, frames[1:], strict=False)), "frames out of order"
        record(healthy_s=round(healthy_s, 1), stop_s=round(stop_s, 2),
               detection_lines_at_stop=len(frames))
    finally:
        podman("rm", "--force", name, check=False)


def test_the_compose_stack_prometheus_has_every_stage_of_vidpipe(media, tmp_path):
    """The compose file's cpu profile under podman-compose, with Prometheus from Debian's
    package (localhost/vidpipe-prometheus: no registry here to pull prom/prometheus). Grafana's
    image cannot be had here either, so its service is not started: its provisioning is
    checked without it (test_shipped_files.py)."""
    require_image(IMAGE)
    require_image(PROMETHEUS_IMAGE)
    compose_tool = shutil.which("podman-compose", path=f"{Path(sys.executable).parent}:"
                                f"{os.environ.get('PATH', '')}")
    if compose_tool is None:
        pytest.fail("podman-compose is not installed (it is in vidpipe's test extra)")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)  # read by the service's and Prometheus' users
    vidpipe_port, prometheus_port = free_port(), free_port()
    env = {**os.environ, "VIDPIPE_API_TOKEN_FILE": str(token_file),
           "GRAFANA_ADMIN_PASSWORD": "unused", "PROMETHEUS_IMAGE": PROMETHEUS_IMAGE,
           "VIDPIPE_MEDIA": str(media), "VIDPIPE_PUBLISH": f"127.0.0.1:{vidpipe_port}",
           "PROMETHEUS_PUBLISH": f"127.0.0.1:{prometheus_port}"}
    compose = [compose_tool, "--file", str(DOCKER / "compose.yaml"),
               "--project-name", f"vidpipe-test-{uuid.uuid4().hex[:8]}", "--profile", "cpu"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*compose, *args], env=env, capture_output=True, text=True,
                              timeout=180)

    up = run("up", "--detach", "vidpipe", "prometheus")
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        base = f"http://127.0.0.1:{vidpipe_port}"
        wait_for("the service answering", lambda: http(f"{base}/healthz")[0] == 200, 120)
        status, body = http(f"{base}/api/streams", token=TOKEN,
                            body={"url": "/srv/media/lanes.mp4", "id": "cam"})
        assert status == 201, body

        prometheus = f"http://127.0.0.1:{prometheus_port}/api/v1"

        def stages() -> set[str] | None:
            query = "query=count+by+(stage)+(vidpipe_stage_seconds_bucket)"
            status, body = http(f"{prometheus}/query?{query}")
            found = {r["metric"]["stage"] for r in json.loads(body)["data"]["result"]}
            return found if status == 200 and found == STAGES else None

        wait_for("every stage's vidpipe_stage_seconds_bucket in the stack's Prometheus",
                 stages, 120, every=2)
        targets = json.loads(http(f"{prometheus}/targets")[1])["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"], targets
        rules = json.loads(http(f"{prometheus}/rules")[1])["data"]["groups"]
        assert rules, "the alert rules were not loaded"
    finally:
        run("down", "--volumes")
