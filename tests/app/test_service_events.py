"""The service's events (issue 19): a tracked stream's events in its events.jsonl, in the
recent events and on the event feed; an ended object's snapshot and clip served by id,
behind the token; a removed stream's objects all end."""

import io
import json

import av
import jsonschema
import pytest
from fastapi.testclient import TestClient

from app.outputs.config import EventsConfig
from app.service.api import create_app
from app.service.config import ServiceConfig
from models.tracking_data import make_tracking_clip
from pipelines.events.config import ClipSettings
from tests.app.test_api import wait_for
from tests.app.test_events_run import SCHEMA
from tests.support.api import LOCAL

TOKEN = "t0ken-for-events"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def lanes_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    make_tracking_clip(root / "lanes.mp4", clip=4, frames=90, size=(320, 192))
    return root


def test_a_tracked_stream_s_events_snapshots_and_clips(lanes_root, tmp_path, monkeypatch):
    monkeypatch.setenv("VIDPIPE_API_TOKEN", TOKEN)
    config = ServiceConfig(
        media_roots=[lanes_root], results_dir=tmp_path / "results", model="shapes-yolo",
        api_token=TOKEN, events=EventsConfig(media_dir=tmp_path / "media",
                                             clips=ClipSettings(pre_s=0.5, post_s=0.5)))
    stream = {"url": str(lanes_root / "lanes.mp4"), "id": "lanes", "track": "bytetrack",
              "lines": [{"name": "middle", "points": [160, 0, 160, 192]}]}
    validator = jsonschema.Draft202012Validator(SCHEMA)
    with TestClient(create_app(config), base_url=LOCAL) as client:
        assert client.post("/api/streams", json=stream, headers=AUTH).status_code == 201

        def an_end_with_a_clip():
            events = client.get("/api/events/recent?limit=200", headers=AUTH).json()["events"]
            return next((e for e in events if e["type"] == "end" and e["clip"]), None)

        end = wait_for(an_end_with_a_clip, timeout=60)
        assert end["clip"] == f"/api/events/{end['id']}/clip.mp4"
        assert client.get(end["clip"]).status_code == 401  # data: behind the token
        clip = client.get(end["clip"], headers=AUTH)
        assert clip.status_code == 200 and clip.headers["content-type"] == "video/mp4"
        with av.open(io.BytesIO(clip.content)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 0
        for uri in (end["snapshot"], end["snapshot_clean"]):
            picture = client.get(uri, headers=AUTH)
            assert picture.status_code == 200 and picture.content[:2] == b"\xff\xd8"
        boxed = client.get(end["snapshot"], headers=AUTH).content
        assert boxed != client.get(end["snapshot_clean"], headers=AUTH).content
        assert client.get(f"/api/events/{'0' * 32}/clip.mp4", headers=AUTH).status_code == 404
        assert client.get("/api/events/..%2f..%2fetc/clip.mp4",
                          headers=AUTH).status_code in (404, 422)
        recent = client.get("/api/events/recent?stream=lanes&limit=5", headers=AUTH).json()
        assert 0 < len(recent["events"]) <= 5
        assert client.delete("/api/streams/lanes", headers=AUTH).status_code == 204
    written = [json.loads(line) for line in
               (tmp_path / "results" / "lanes" / "events.jsonl").read_text().splitlines()]
    for event in written:
        validator.validate(event)
    new = {e["object"] for e in written if e["type"] == "new"}
    ended = [e["object"] for e in written if e["type"] == "end"]
    assert new and sorted(new) == sorted(ended)  # every object ended, once
    assert any(e["type"] == "line_cross" for e in written)
