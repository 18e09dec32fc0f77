"""Issue 36, item 4: ``POST /api/streams/{id}/analytics/try`` replays a candidate's lines and
zones on a running stream's recent results, beside what the stream counted over them."""

from __future__ import annotations

import pytest

from tests.app.test_api import client_for, wait_for

LINE = {"name": "middle", "points": [320, 0, 320, 384]}


@pytest.fixture(scope="module")
def lanes_root(tmp_path_factory):
    from models.tracking_data import make_tracking_clip

    root = tmp_path_factory.mktemp("lanes-media")
    make_tracking_clip(root / "lanes.mp4", clip=7, frames=150, size=(640, 384))
    return root


def _counted(client, stream: str, frames: int) -> None:
    series = f'vidpipe_frames_total{{outcome="processed",stream="{stream}"}} '

    def processed() -> float:
        text = client.get("/metrics").text
        return float(text.split(series, 1)[1].split()[0]) if series in text else 0.0

    wait_for(lambda: processed() >= frames, timeout=60)


def test_the_streams_own_line_tried_gives_its_counts_and_a_moved_one_others(lanes_root):
    with client_for(lanes_root, model="shapes-yolo") as client:
        body = {"url": str(lanes_root / "lanes.mp4"), "id": "lanes", "lines": [LINE]}
        assert client.post("/api/streams", json=body).status_code == 201
        _counted(client, "lanes", 200)  # the file plays on, as a camera: past one loop
        same = client.post("/api/streams/lanes/analytics/try?frames=100000",
                           json={"lines": [LINE]})
        assert same.status_code == 200, same.text
        tried = same.json()
        assert tried["frames"] >= 200
        line = tried["lines"]["middle"]
        assert line["candidate"] == line["stream"] and sum(line["candidate"].values()) > 0
        moved = client.post("/api/streams/lanes/analytics/try", json={
            "lines": [{"name": "left", "points": [100, 0, 100, 384]}],
            "zones": [{"name": "right", "polygon": [[400, 0], [640, 0], [640, 384],
                                                     [400, 384]]}]}).json()
        assert moved["lines"]["left"]["stream"] is None  # the stream has no such line
        assert moved["zones"]["right"]["candidate"]["entered"] > 0
        assert moved["events"]["zone_enter"] == moved["zones"]["right"]["candidate"]["entered"]
        stream = client.get("/api/streams/lanes").json()
        assert [x["name"] for x in stream["analytics"]["lines"]] == ["middle"]  # unchanged
        heat = client.get("/api/streams/lanes/heatmap.png")  # item 5
        assert heat.status_code == 200 and heat.headers["content-type"] == "image/png"
        assert heat.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_try_says_why_it_cannot(lanes_root):
    with client_for(lanes_root, model="shapes-yolo", results_dir=None) as client:
        assert client.post("/api/streams/nope/analytics/try", json={}).status_code == 404
        body = {"url": str(lanes_root / "lanes.mp4"), "id": "lanes"}
        assert client.post("/api/streams", json=body).status_code == 201
        assert client.get("/api/streams/lanes/heatmap.png").status_code == 204  # no tracker
        off = client.post("/api/streams/lanes/analytics/try", json={"lines": [LINE]})
        assert off.status_code == 409 and "results_dir is off" in off.json()["detail"]
        bad = client.post("/api/streams/lanes/analytics/try",
                          json={"lines": [{"name": "x", "points": [1, 1, 1, 1]}]})
        assert bad.status_code == 400, bad.text
