"""Issue 35, item 1: a camera's two inputs by role — the sub-stream decoded and detected, the
main stream recorded for clips and never decoded — in Frigate's form (``inputs``)."""

from __future__ import annotations

import io
import time

import av
import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from pipelines.synthetic.quiet import make_quiet_clip
from tests.support.api import LOCAL

SEED = 13  # a visitor from 2.0 s to 7.4 s of a 10 s scene


@pytest.fixture(scope="module")
def camera(tmp_path_factory):
    media = tmp_path_factory.mktemp("media")
    make_quiet_clip(media / "yard-sub.mp4", seconds=10, fps=15, size=(640, 360), seed=SEED)
    make_quiet_clip(media / "yard-main.mp4", seconds=10, fps=30, size=(1280, 720), seed=SEED)
    return media


def client_for(media, tmp_path):
    return TestClient(create_app(ServiceConfig(
        media_roots=[media], results_dir=tmp_path / "results", state_dir=None,
        events={"media_dir": str(tmp_path / "events"),
                "clips": {"pre_s": 0.5, "post_s": 0.5}})), base_url=LOCAL)


def test_detected_on_the_sub_stream_recorded_from_the_main_one(camera, tmp_path):
    inputs = [{"url": str(camera / "yard-sub.mp4"), "roles": ["detect"]},
              {"url": str(camera / "yard-main.mp4"), "roles": ["record"]}]
    with client_for(camera, tmp_path) as client:
        r = client.post("/api/streams", json={"id": "yard", "inputs": inputs,
                                              "track": "bytetrack"})
        assert r.status_code == 201, r.text
        shown = r.json()
        assert shown["url"].endswith("yard-sub.mp4")
        assert shown["record_url"].endswith("yard-main.mp4")
        deadline = time.monotonic() + 30
        end = None
        while end is None and time.monotonic() < deadline:
            events = client.get("/api/events/recent", params={"stream": "yard"}).json()
            end = next((e for e in events["events"] if e["type"] == "end" and e.get("clip")),
                       None)
            time.sleep(0.2)
        assert end is not None, "no object ended with a clip"
        clip = client.get(f"/api/events/{end['id']}/clip.mp4")
        assert clip.status_code == 200
        with av.open(io.BytesIO(clip.content)) as container:
            stream = container.streams.video[0]
            assert (stream.codec_context.width, stream.codec_context.height) == (1280, 720)
            frames = sum(1 for _ in container.decode(stream))
        # the object's life and the half seconds around it, from the key frame before (the
        # main stream has one every 2 s: the clip starts on one, on the detected timeline)
        start, length = end["clip_start_pts"], end["clip_s"]
        assert start <= end["first_pts"] - 0.5 and start + length >= end["last_pts"] + 0.45
        assert abs(start - 2 * round(start / 2)) < 0.1, start  # where the main stream is
        assert abs(frames - 30 * length) <= 2, (frames, length)
        snapshot = client.get(f"/api/events/{end['id']}/snapshot.jpg")
        picture = cv2.imdecode(np.frombuffer(snapshot.content, np.uint8), cv2.IMREAD_COLOR)
        assert picture.shape[:2] == (360, 640)  # what the detector saw: the sub-stream


def test_inputs_are_checked_like_a_url(camera, tmp_path):
    sub = {"url": str(camera / "yard-sub.mp4"), "roles": ["detect"]}
    with client_for(camera, tmp_path) as client:
        outside = client.post("/api/streams", json={"inputs": [
            sub, {"url": "/etc/passwd", "roles": ["record"]}]})
        assert outside.status_code == 400, outside.text
        twice = client.post("/api/streams", json={"inputs": [
            sub, {"url": str(camera / "yard-main.mp4"), "roles": ["detect"]}]})
        assert twice.status_code == 400 and "one input has the role detect" in twice.text
        assert client.get("/api/streams").json() == []  # nothing opened, nothing left


def test_vidpipe_run_records_the_main_stream_of_a_camera(camera, tmp_path):
    """``vidpipe run SUB --record MAIN --clips``: detected on the sub-stream, each object's
    clip cut from the main one; the ways it cannot work are one line each."""
    from tests.support.cli import vidpipe

    sub, main = camera / "yard-sub.mp4", camera / "yard-main.mp4"
    out = tmp_path / "out"
    code, output = vidpipe("run", sub, "--live", "--record", main, "--clips", "--track",
                           "bytetrack", "--out", out)
    assert code == 0, output
    clips = sorted((out / "events" / "yard-sub").glob("*.mp4"))
    assert clips, output
    with av.open(str(clips[0])) as container:
        size = container.streams.video[0].codec_context
        assert (size.width, size.height) == (1280, 720)
    for flags, words in ((["--record", main, "--clips", "--track", "bytetrack"], "--live"),
                         (["--live", "--record", main, "--track", "bytetrack"], "add --clips"),
                         (["--live", "--record", main, "--record", main, "--clips",
                           "--track", "bytetrack"], "one at most per source")):
        code, output = vidpipe("run", sub, *flags, "--out", tmp_path / "o")
        assert code == 2 and words in output, (flags, output)
