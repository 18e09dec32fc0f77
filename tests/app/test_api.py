"""The service's HTTP API with real pipelines over files (played as cameras) and real ONNX
Runtime; RTSP-specific behaviour is tested against a real RTSP server elsewhere."""

import json
import logging
import time

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from tests.support.api import LOCAL

SECRET = "hunter2-secret"


def client_for(media_root, **overrides):
    overrides.setdefault("results_dir", media_root.parent / "results")
    config = ServiceConfig(media_roots=[media_root], **overrides)
    return TestClient(create_app(config), base_url=LOCAL)


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_add_watch_and_remove_a_stream(media_root):
    with client_for(media_root) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").status_code == 200
        r = client.post("/api/streams", json={"url": str(media_root / "cam.mp4"), "id": "cam"})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == "cam" and r.json()["kind"] == "file"
        assert [s["id"] for s in client.get("/api/streams").json()] == ["cam"]

        def stream_stats():
            stats = client.get("/api/stats").json()
            streams = {s["id"]: s for s in stats["streams"]}
            return stats if streams["cam"]["fps"] > 0 else None

        stats = wait_for(stream_stats)
        assert {s["stage"] for s in stats["stages"]} >= {"decode", "preprocess", "infer"}
        assert all(s["work_ms"]["p50"] is not None for s in stats["stages"])
        snapshot = wait_for(lambda: (r := client.get("/api/streams/cam/snapshot.jpg"))
                            .status_code == 200 and r)
        assert snapshot.headers["content-type"] == "image/jpeg"
        assert snapshot.content[:2] == b"\xff\xd8"
        metrics = client.get("/metrics").text
        assert 'vidpipe_stage_seconds_count{stage="infer"}' in metrics
        assert 'vidpipe_frames_total{outcome="processed",stream="cam"}' in metrics
        assert client.delete("/api/streams/cam").status_code == 204
        assert client.get("/api/streams").json() == []
        assert client.get("/api/streams/cam").status_code == 404


def test_streams_from_the_config_start_at_boot(media_root):
    stream = {"url": str(media_root / "cam.mp4"), "id": "boot"}
    with client_for(media_root, streams=[stream]) as client:
        assert client.get("/api/streams/boot").json()["state"] in ("up", "connecting")


def test_events_stream_stats_every_second(media_root):
    with client_for(media_root) as client:
        with client.stream("GET", "/api/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert next(lines) == "event: stats"
            assert next(lines).startswith('data: {"window_s"')


@pytest.mark.parametrize("body, status, text", [
    ({"url": "file:///etc/passwd"}, 400, "outside the media roots"),
    ({"url": "/etc/passwd"}, 400, "outside the media roots"),
    ({"url": "http://example.com/cam"}, 400, "scheme 'http' is not allowed"),
    ({"url": "rtsp:///nohost"}, 400, "needs a host"),
    ({"id": "x"}, 422, "url"),
    ({"url": "rtsp://h/x", "policy": "newest"}, 422, "policy"),
    ({"url": "rtsp://h/x", "colour": "red"}, 422, "colour"),
])
def test_bad_requests_say_what_is_wrong(media_root, body, status, text):
    with client_for(media_root) as client:
        r = client.post("/api/streams", json=body)
        assert r.status_code == status, r.text
        assert text in r.text


def test_every_data_route_needs_the_token_when_one_is_set(media_root):
    """Issue 22, item 9: reads, stats, snapshots, the event feed and /metrics were open while
    a token was set (live pictures of every camera to anyone on the port)."""
    with client_for(media_root, api_token="tok") as client:
        body = {"url": str(media_root / "cam.mp4"), "id": "cam"}
        assert client.post("/api/streams", json=body).status_code == 401
        assert client.post("/api/streams", json=body,
                           headers={"Authorization": "Bearer nope"}).status_code == 401
        ok = {"Authorization": "Bearer tok"}
        assert client.post("/api/streams", json=body, headers=ok).status_code == 201
        reads = ["/api/streams", "/api/streams/cam", "/api/streams/cam/snapshot.jpg",
                 "/api/streams/cam/results", "/api/stats", "/api/events", "/metrics"]
        for path in reads:
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer nope"}
                              ).status_code == 401, path
        assert client.get("/api/streams", headers=ok).status_code == 200
        assert client.get("/api/stats", headers=ok).status_code == 200
        assert client.get("/metrics", headers=ok).status_code == 200
        for path in ("/healthz", "/readyz", "/", "/app.js"):
            assert client.get(path).status_code == 200, path
        assert client.delete("/api/streams/cam").status_code == 401
        assert client.delete("/api/streams/cam", headers=ok).status_code == 204


def test_the_stream_limit_answers_429_and_ids_are_unique(media_root):
    with client_for(media_root, max_streams=1) as client:
        body = {"url": str(media_root / "cam.mp4"), "id": "a"}
        assert client.post("/api/streams", json=body).status_code == 201
        assert client.post("/api/streams", json=body | {"id": "b"}).status_code == 429
    with client_for(media_root, max_streams=2) as client:  # restarted: "a" remembered
        assert [s["id"] for s in client.get("/api/streams").json()] == ["a"]
        assert client.post("/api/streams", json=body).status_code == 409
        assert client.post("/api/streams", json=body | {"id": "b"}).status_code == 201


def test_a_password_in_an_rtsp_url_appears_nowhere(media_root, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"rtsp://admin:{SECRET}@127.0.0.1:9/cam"  # nothing listens there: it reconnects
    with client_for(media_root) as client:
        r = client.post("/api/streams", json={"url": url, "id": "door"})
        assert r.status_code == 201
        time.sleep(1.5)
        seen = [r.text, client.get("/api/streams").text, client.get("/api/streams/door").text,
                client.get("/api/stats").text, client.get("/metrics").text]
        bad = client.post("/api/streams", json={"url": url, "id": "door", "policy": "x"})
        seen.append(bad.text)
        client.delete("/api/streams/door")
    seen.append(caplog.text)
    assert "admin:***@" in r.text or "***@" in r.text
    for text in seen:
        assert SECRET not in text


def test_a_host_header_the_service_does_not_answer_to_is_refused(media_root):
    """Issue 22, item 9: no Host check let a web page reach the API by DNS rebinding (its own
    name resolving to 127.0.0.1)."""
    with client_for(media_root) as client:
        assert client.get("/api/stats").status_code == 200
        assert client.get("/api/stats", headers={"Host": "localhost:8080"}).status_code == 200
        rebound = client.get("/api/stats", headers={"Host": "attacker.example:8080"})
        assert rebound.status_code == 400 and "stream" not in rebound.text
    with client_for(media_root, allowed_hosts=["vidpipe"]) as client:
        assert client.get("/healthz", headers={"Host": "vidpipe:8080"}).status_code == 200
        assert client.get("/healthz").status_code == 400  # 127.0.0.1 is not on that list


def test_removed_streams_leave_no_series_behind(media_root):
    """Issue 22, item 11: about 25 series stayed in /metrics per removed stream (60 add/remove
    cycles: 38 -> 1,743 lines), and their figures in memory."""
    with client_for(media_root) as client:
        body = {"url": str(media_root / "cam.mp4")}
        assert client.post("/api/streams", json=body | {"id": "keep"}).status_code == 201
        for i in range(5):
            assert client.post("/api/streams", json=body | {"id": f"s{i}"}).status_code == 201
            wait_for(lambda i=i: f'vidpipe_frames_total{{outcome="processed",stream="s{i}"}}'
                     in client.get("/metrics").text)
            assert client.delete(f"/api/streams/s{i}").status_code == 204
        after = client.get("/metrics").text
        assert not [line for line in after.splitlines() if 'stream="s' in line]
        assert 'stream="keep"' in after  # the stream still there keeps its series
        metrics = client.app.state.service.metrics
        assert set(metrics.latency) <= {"keep"}  # the sample windows are gone
        assert all(metrics.outcomes[f"s{i}"]["processed"] > 0 for i in range(5))  # counts stay


def test_a_method_the_path_has_not_is_answered_with_every_method_it_has(media_root):
    """Issue 22, item 12: a method no route of the path takes fell through to the dashboard's
    static files, whose 405 said Allow: GET, HEAD (for /api/streams, which takes GET and
    POST)."""
    with client_for(media_root) as client:
        for path, methods in (("/api/streams", {"GET", "POST"}),
                              ("/api/streams/x", {"GET", "DELETE"}), ("/metrics", {"GET"})):
            answer = client.request("PATCH", path)
            assert answer.status_code == 405
            assert set(answer.headers["allow"].split(", ")) == methods, path
        assert client.request("PATCH", "/").headers["allow"] == "GET, HEAD"  # a dashboard file
        assert client.get("/api/streams/x").status_code == 404  # other errors as before


def test_the_event_feeds_declare_their_events(media_root):
    """Issue 22, item 12: the feeds were declared as one string; a client (and Schemathesis)
    reads their events' names and JSON data from the document."""
    with client_for(media_root) as client:
        paths = client.get("/openapi.json").json()["paths"]
    for path, kinds in (("/api/events", ["stats", "stream", "removed", "event"]),
                        ("/api/streams/{stream_id}/results", ["result", "lost", "end"])):
        event = paths[path]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
        assert event["properties"]["event"]["enum"] == kinds
        assert event["properties"]["data"]["contentMediaType"] == "application/json"


def test_a_streams_lines_and_zones_are_configured_shown_and_replaced(media_root):
    """Issue 18: analytics per stream in the service, changed at runtime."""
    line = {"name": "door", "points": [0, 100, 320, 100]}
    zone = {"name": "yard", "polygon": [[0, 0], [160, 0], [160, 240], [0, 240]]}
    with client_for(media_root) as client:
        body = {"url": str(media_root / "cam.mp4"), "id": "cam", "lines": [line],
                "zones": [zone]}
        added = client.post("/api/streams", json=body)
        assert added.status_code == 201, added.text
        shown = added.json()["analytics"]
        assert shown["track"] == "botsort" and shown["lines"][0]["name"] == "door"
        assert shown["counts"]["lines"] == {"door": {"in": 0, "out": 0}}
        wait_for(lambda: 'vidpipe_zone_occupancy{stream="cam",zone="yard"}'
                 in client.get("/metrics").text)
        moved = {"name": "gate", "points": [10, 0, 10, 240]}
        put = client.put("/api/streams/cam/analytics", json={"lines": [line, moved]})
        assert put.status_code == 200, put.text
        assert [x["name"] for x in put.json()["analytics"]["lines"]] == ["door", "gate"]
        assert put.json()["analytics"]["zones"] == []
        assert client.put("/api/streams/cam/analytics",
                          json={"track": "sort", "lines": []}).status_code == 409
        unknown = client.put("/api/streams/cam/analytics",
                             json={"lines": [line | {"classes": ["unicorn"]}]})
        assert unknown.status_code == 400 and "unicorn" in unknown.text
        twice = client.put("/api/streams/cam/analytics", json={"lines": [line, line]})
        assert twice.status_code == 400 and "unique" in twice.text
        assert client.put("/api/streams/nope/analytics", json={}).status_code == 404
        bad = client.post("/api/streams", json=body | {"id": "cam2", "lines": [line, line]})
        assert bad.status_code == 400 and "unique" in bad.text


def test_a_refused_stream_leaves_nothing_on_disk(media_root):
    """Issue 34, item 5: a stream refused once its outputs were opened (a file that is not
    a video) leaves no empty results file, and nothing remembered."""
    (media_root / "notes.mp4").write_text("not a video\n")
    results = media_root.parent / "results"
    with client_for(media_root) as client:
        r = client.post("/api/streams", json={"url": str(media_root / "notes.mp4"),
                                              "id": "notes"})
        assert r.status_code == 400, r.text
        assert client.get("/api/streams").json() == []
    assert not (results / "notes").exists()
    with client_for(media_root) as client:  # restarted: nothing comes back
        assert client.get("/api/streams").json() == []


def test_a_line_outside_the_picture_is_refused_naming_it(media_root):
    """Issue 34, item 5: a line at x = 5000 on a 320x240 file counted nothing, silently."""
    clip = str(media_root / "cam.mp4")
    outside = {"lines": [{"name": "door", "points": [0, 10, 5000, 10]}]}
    with client_for(media_root) as client:
        r = client.post("/api/streams", json={"url": clip, "id": "far", **outside})
        assert r.status_code == 400
        assert "line 'door' has the point (5000, 10), outside its 320x240 picture" in r.text
        assert client.post("/api/streams", json={"url": clip, "id": "cam"}).status_code == 201
        r = client.put("/api/streams/cam/analytics",
                       json={"zones": [{"name": "yard", "polygon": [[0, 0], [10, 0], [10, 900]]}]})
        assert r.status_code == 400 and "zone 'yard'" in r.text, r.text
        assert client.get("/api/streams/cam").json()["analytics"] is None
    assert not (media_root.parent / "results" / "far").exists()


def test_masks_are_kept_shown_checked_and_remembered(media_root):
    """Issue 34, item 4: motion masks drawn in the camera UI go through the API (no tracker
    needed), must fit the picture, and come back after a restart."""
    clip = str(media_root / "cam.mp4")
    clock = {"name": "clock", "polygon": [[0, 0], [80, 0], [80, 20], [0, 20]]}
    with client_for(media_root) as client:
        assert client.post("/api/streams", json={"url": clip, "id": "cam"}).status_code == 201
        put = client.put("/api/streams/cam/analytics", json={"masks": [clock]})
        assert put.status_code == 200, put.text
        assert put.json()["masks"] == [clock] and put.json()["analytics"] is None
        outside = {"name": "sky", "polygon": [[0, 0], [400, 0], [0, 10]]}
        r = client.put("/api/streams/cam/analytics", json={"masks": [clock, outside]})
        assert r.status_code == 400 and "mask 'sky' has the point (400, 0)" in r.text, r.text
        twice = client.put("/api/streams/cam/analytics", json={"masks": [clock, clock]})
        assert twice.status_code == 400 and "mask names must be unique: clock" in twice.text
        assert client.get("/api/streams/cam").json()["masks"] == [clock]
    with client_for(media_root) as client:  # the same state_dir: remembered
        assert client.get("/api/streams/cam").json()["masks"] == [clock]


def test_a_stream_detected_at_a_rate_of_its_own(media_root):
    """Issue 35, item 2: ``detect_fps`` per stream (a tracker implied), shown with its
    analytics, kept by a change of lines; refused beside ``detect_every``."""
    clip = str(media_root / "cam.mp4")
    with client_for(media_root) as client:
        both = client.post("/api/streams", json={"url": clip, "detect_fps": 5, "detect_every": 2})
        assert both.status_code == 400 and "not both" in both.text, both.text
        r = client.post("/api/streams", json={"url": clip, "id": "cam", "detect_fps": 5})
        assert r.status_code == 201, r.text
        assert r.json()["analytics"]["detect_fps"] == 5 and r.json()["analytics"]["track"]
        line = {"name": "door", "points": [0, 100, 320, 100]}
        put = client.put("/api/streams/cam/analytics", json={"lines": [line]})
        assert put.json()["analytics"]["detect_fps"] == 5

        results = media_root.parent / "results" / "cam" / "detections.jsonl"

        def sixty_lines():
            lines = results.read_text().splitlines() if results.exists() else []
            return [json.loads(x) for x in lines[:60]] if len(lines) >= 60 else None

        seen = [x["pts"] for x in wait_for(sixty_lines) if not x.get("predicted")]
        # the 30 fps clip (played in a loop) seen 5 times a second, by its timeline
        steps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
        assert len(seen) >= 9 and all(abs(step - 0.2) < 0.02 for step in steps), seen


def test_a_re_added_id_starts_from_zero_everywhere(media_root):
    """Issue 34, item 5: /api/stats had kept the old stream's counts under a re-added id
    while /metrics started again."""
    body = {"url": str(media_root / "cam.mp4"), "id": "again"}

    def figures(client):
        return next(s for s in client.get("/api/stats").json()["streams"] if s["id"] == "again")

    with client_for(media_root) as client:
        assert client.post("/api/streams", json=body).status_code == 201
        before = wait_for(lambda: (f := figures(client))["received"] >= 30 and f)
        assert client.delete("/api/streams/again").status_code == 204
        assert client.post("/api/streams", json=body).status_code == 201
        again = figures(client)
        assert again["received"] < before["received"] and \
            sum(again["outcomes"].values()) < sum(before["outcomes"].values())
        metrics = client.get("/metrics").text
        counted = [line for line in metrics.splitlines()
                   if line.startswith('vidpipe_frames_total{outcome="processed",stream="again"}')]
        assert not counted or float(counted[0].split()[-1]) < before["outcomes"]["processed"]
