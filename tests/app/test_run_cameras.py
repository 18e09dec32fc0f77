"""`vidpipe run` with cameras: an RTSP URL beside a file in one run against a real RTSP server,
Ctrl-C that drains, and a camera that cannot be reached or a URL that is not one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.run.sources import stream_ids
from tests.rtsp_fixtures import free_port
from tests.support.cli import vidpipe

SECRET = "pa55-w0rd"


def _started_run(args: list[str], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "run", *args, "--out", str(out),
                             "--model", "shapes-yolo"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(proc: subprocess.Popen[str], text: str, timeout_s: float) -> str:
    """The process's output up to the first line holding ``text``."""
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    proc.kill()
    pytest.fail(f"no {text!r} within {timeout_s} s:\n{''.join(seen)[-3000:]}")


@pytest.mark.slow
def test_a_camera_and_a_file_run_together_and_ctrl_c_drains_them(rtsp_servers, small_clip,
                                                                 tmp_path):
    server = rtsp_servers.start()
    url = server.url_with(f"admin:{SECRET}")
    proc = _started_run([url, str(small_clip)], tmp_path / "out")
    shown = _wait_for(proc, "threads:", 60)
    time.sleep(3.0)  # the camera streams at 30 fps meanwhile; the file ends on its own
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    output = shown + rest
    assert proc.returncode == 0, output[-3000:]
    assert SECRET not in output
    lines = [json.loads(line) for line in (tmp_path / "out/detections.jsonl").read_text()
             .splitlines()]
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    camera, clip = stream_ids([url, small_clip])
    assert {line["stream"] for line in lines} == {camera, clip}
    for sid in (camera, clip):
        stream = summary["streams"][sid]
        assert stream["received"] == sum(stream["outcomes"].values()) > 0, stream
        frames = [line["frame"] for line in lines if line["stream"] == sid]
        assert frames == sorted(frames) and len(frames) == stream["outcomes"]["processed"]
    assert summary["streams"][clip]["outcomes"]["processed"] == summary["streams"][clip][
        "received"]  # a file is not live: nothing of it dropped
    assert summary["streams"][camera]["received"] >= 30  # about 3 s of a 30 fps camera


def test_a_camera_that_cannot_be_reached_is_one_line_and_exit_2(tmp_path):
    url = f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/cam"
    code, output = vidpipe("run", url, "--out", tmp_path / "out", "--model", "shapes-yolo")
    assert code == 2, output
    assert "cannot connect" in output and "127.0.0.1" in output and SECRET not in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("url", ["rtsp://", "rtsp:///path", "http://example/x.mp4"])
def test_a_url_that_is_no_camera_is_one_line_and_exit_2(url, tmp_path):
    code, output = vidpipe("run", url, "--out", tmp_path / "out")
    assert code == 2, output
    assert output.count("error:") == 1 and "Traceback" not in output


def test_stream_ids_of_cameras_name_their_path_never_their_password():
    assert stream_ids(["rtsp://u:p@cam.local:554/live/front", "rtsp://10.0.0.9/",
                       Path("a/clip.mp4"), "rtsp://h/live/front"]) == [
        "front", "10.0.0.9", "clip", "front-2"]


def test_live_plays_a_file_as_a_camera(small_clip, tmp_path):
    code, output = vidpipe("run", small_clip, "--live", "--out", tmp_path / "out",
                           "--model", "shapes-yolo")
    assert code == 0, output
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    stream = next(iter(summary["streams"].values()))
    assert stream["received"] == sum(stream["outcomes"].values()) > 0


def test_profile_takes_a_camera_url(rtsp_servers):
    """Issue 34, item 5: ``vidpipe profile rtsp://...`` profiles the camera (it said "no such
    file"), and a camera nobody answers for is one line, its password hidden."""
    server = rtsp_servers.start()
    code, output = vidpipe("profile", server.url, "--seconds", 2, "--model", "shapes-yolo")
    assert code == 0, output
    assert "bottleneck" in output.lower() and "no such file" not in output
    code, output = vidpipe("profile", f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/x",
                           "--seconds", 1)
    assert code == 2 and "cannot connect" in output and SECRET not in output, output


def test_a_line_outside_a_camera_s_picture_fails_the_stream_naming_it(rtsp_servers, tmp_path):
    """In the service a camera's size is known once it is up: the stream fails then, with
    the line named (issue 34, item 5)."""
    from fastapi.testclient import TestClient

    from app.service.api import create_app
    from app.service.config import ServiceConfig
    from tests.support.api import LOCAL

    server = rtsp_servers.start()  # 320x240
    body = {"url": server.url, "id": "gate",
            "lines": [{"name": "kerb", "points": [0, 100, 320, 900]}]}
    with TestClient(create_app(ServiceConfig(results_dir=tmp_path / "results")),
                    base_url=LOCAL) as client:
        assert client.post("/api/streams", json=body).status_code == 201
        deadline = time.monotonic() + 15
        while (shown := client.get("/api/streams/gate").json())["state"] != "failed":
            assert time.monotonic() < deadline, shown
            time.sleep(0.1)
        assert "line 'kerb' has the point (320, 900), outside its 320x240 picture" in \
            shown["error"]


def test_vidpipe_run_refuses_a_line_outside_the_picture_in_one_line(small_clip, tmp_path):
    code, output = vidpipe("run", small_clip, "--line", "door=0,10,5000,10", "--out",
                           tmp_path / "out", "--model", "shapes-yolo")
    assert code == 2, output
    assert "line 'door' has the point (5000, 10), outside its 320x240 picture" in output
    assert "Traceback" not in output and not (tmp_path / "out" / "detections.jsonl").exists()
    assert "ETA" not in output  # one line: no progress bar above it
