"""The service remembers (issue 34, item 1): three streams added over the API, with their
lines and zones, and a change to a stream of the config file, come back after a restart;
the last 50 events listed before it are listed after it, their snapshots and clips served."""

import time

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from tests.support.api import LOCAL

pytestmark = pytest.mark.slow  # three tracked streams making events, twice

LINE = {"name": "middle", "points": [160, 0, 160, 192]}
ZONE = {"name": "left", "polygon": [[0, 0], [150, 0], [150, 192], [0, 192]]}
ADDED = {
    "a": {"track": "bytetrack", "lines": [LINE]},
    "b": {"lines": [LINE], "zones": [ZONE]},  # the tracker implied
    "c": {"track": "bytetrack", "zones": [ZONE]},
}


@pytest.fixture
def config(tmp_path):
    from models.tracking_data import make_tracking_clip

    media = tmp_path / "media"
    media.mkdir()
    clip = make_tracking_clip(media / "lanes.mp4", clip=4, frames=90, size=(320, 192))
    return ServiceConfig(
        media_roots=[media], model="shapes-yolo", results_dir=tmp_path / "results",
        state_dir=tmp_path / "state",
        events={"media_dir": str(tmp_path / "events"), "clips": {"pre_s": 0.5, "post_s": 0.5}},
        streams=[{"url": str(clip), "id": "declared"}])


def _wait(what, predicate, timeout_s=90.0):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def test_streams_and_events_survive_a_restart(config):
    clip = str(config.streams[0].url)
    with TestClient(create_app(config), base_url=LOCAL) as client:
        for sid, analytics in ADDED.items():
            r = client.post("/api/streams", json={"url": clip, "id": sid, **analytics})
            assert r.status_code == 201, r.text
        r = client.put("/api/streams/declared/analytics", json={"lines": [LINE]})
        assert r.status_code == 200, r.text

        def fifty_with_media():
            events = client.get("/api/events/recent", params={"limit": 50}).json()["events"]
            ends = [e for e in events if e["type"] == "end" and e.get("clip")]
            return events if len(events) == 50 and len(ends) >= 2 else None

        before = _wait("50 events with clips", fifty_with_media)
        shown_before = {s["id"]: s for s in client.get("/api/streams").json()}
    stopped = time.time()

    with TestClient(create_app(config), base_url=LOCAL) as client:
        shown = {s["id"]: s for s in client.get("/api/streams").json()}
        assert set(shown) == {"declared", "a", "b", "c"}
        for sid in ("declared", *ADDED):
            assert shown[sid]["analytics"]["lines"] == shown_before[sid]["analytics"]["lines"]
            assert shown[sid]["analytics"]["zones"] == shown_before[sid]["analytics"]["zones"]
            assert shown[sid]["analytics"]["track"] == shown_before[sid]["analytics"]["track"]
        # the events listed before the restart, in the same order (the streams' last ones,
        # made as they drained, come on top, and the restored streams' after those)
        listed = client.get("/api/events/recent",
                            params={"limit": 200, "until": stopped}).json()["events"]
        ids = [e["id"] for e in listed]
        assert [i for i in ids if i in {e["id"] for e in before}] == [e["id"] for e in before]
        ends = [e for e in listed if e["id"] in {b["id"] for b in before}
                and e["type"] == "end" and e.get("clip")]
        assert len(ends) >= 2
        for event in ends:
            clip_file = client.get(event["clip"])
            assert clip_file.status_code == 200, event["clip"]
            assert clip_file.headers["content-type"] == "video/mp4"
            snapshot = client.get(event["snapshot"])
            assert snapshot.status_code == 200 and snapshot.content[:2] == b"\xff\xd8"
        # removed over the API: gone for good (a stream of the config file comes back)
        assert client.delete("/api/streams/b").status_code == 204
    with TestClient(create_app(config), base_url=LOCAL) as client:
        assert {s["id"] for s in client.get("/api/streams").json()} == {"declared", "a", "c"}
