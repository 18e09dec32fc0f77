"""A marker password fed through every way a camera URL can reach the service (issue 22,
items 1, 2 and 6): the API's answers, the stream list, stats, the event feed, /metrics, the
log of a config stream at boot and of reconnects. It must appear nowhere."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig, StreamConfig
from pipelines.sources.url import redact, redact_text
from tests.support.api import LOCAL

MARK = "Zq7MarkerPw"
# Each URL hides MARK somewhere a camera or a typo puts a secret.
URLS = [
    f"rtsp://admin:{MARK}@127.0.0.1:9/cam",
    f"rtsp://127.0.0.1:9/cam?pw={MARK}",
    f"rtsp://127.0.0.1:9/cam?passcode={MARK}&channel=1",
    f"rtsp://127.0.0.1:9/cam#password={MARK}",
    f"rtsp://127.0.0.1:9/cam?{MARK}",
    f"rtsp://127.0.0.1:9/cam?channel=1;pw={MARK}",
    f"rtsp://admin:{MARK}#x@127.0.0.1:9/s",
    f"rtsp://admin:{MARK}?x@127.0.0.1:9/s",
    f"rtsp://admin:{MARK}/x@127.0.0.1:9/s",
    f"//admin:{MARK}@cam/s",
    f"rtsp//admin:{MARK}@cam/s",
    f"rtsp:/admin:{MARK}@cam/s",
    f"rtsp://admin:{MARK}@[::1/s",
    f"rtsp://admin:{MARK}@cam:99999/s",
]


@pytest.mark.parametrize("url", URLS)
def test_redact_hides_the_marker(url):
    assert MARK not in redact(url)
    assert MARK not in redact_text(f"could not open {url}: Connection refused")


def test_redact_keeps_what_says_which_camera_it_is():
    shown = redact(f"rtsp://admin:{MARK}@10.0.0.5:554/Streaming/101?channel=1&pw={MARK}#x")
    assert shown == "rtsp://***@10.0.0.5:554/Streaming/101?channel=1&pw=***#***"


def test_the_marker_appears_in_no_answer_feed_metric_or_log(tmp_path, small_clip, caplog):
    caplog.set_level(logging.DEBUG)
    root = tmp_path / "media"
    root.mkdir()
    (root / "cam.mp4").write_bytes(small_clip.read_bytes())
    boot = [StreamConfig(url=url, id=f"boot{i}") for i, url in enumerate(URLS)]
    config = ServiceConfig(media_roots=[root], results_dir=tmp_path / "results", streams=boot,
                           max_streams=64)
    seen: list[str] = []
    with TestClient(create_app(config), base_url=LOCAL,
                    raise_server_exceptions=False) as client:
        for i, url in enumerate(URLS):
            answer = client.post("/api/streams", json={"url": url, "id": f"api{i}"})
            assert answer.status_code in (201, 400), (url, answer.status_code, answer.text)
            seen.append(answer.text)
        file_answer = client.post("/api/streams",
                                  json={"url": str(root / f"admin:{MARK}@x.mp4")})
        assert file_answer.status_code == 400
        seen.append(file_answer.text)
        time.sleep(1.5)  # reconnect attempts log
        with client.stream("GET", "/api/events") as feed:
            lines = feed.iter_lines()
            seen.extend(next(lines) for _ in range(4))
        seen += [client.get(path).text for path in ("/api/streams", "/api/stats", "/metrics")]
        seen += [client.get(f"/api/streams/{s['id']}").text
                 for s in client.get("/api/streams").json()]
    seen.append(caplog.text)
    leaks = [text[max(0, text.find(MARK) - 120):text.find(MARK) + 40]
             for text in seen if MARK in text]
    assert not leaks, leaks


def test_event_sinks_secrets_appear_in_no_answer_metric_or_log(tmp_path, caplog,
                                                               monkeypatch):
    """Issue 19: an MQTT broker's password and a webhook URL's token (and the webhook
    secret) reach neither the API, /metrics nor the log, while the sinks fail to connect."""
    from app.outputs.config import EventsConfig

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("VIDPIPE_WEBHOOK_SECRET", f"secret-{MARK}")
    events = EventsConfig(mqtt=f"mqtt://admin:{MARK}@127.0.0.1:9/vidpipe",
                          webhooks=[f"http://127.0.0.1:9/hook?token={MARK}"],
                          media_dir=tmp_path / "events")
    config = ServiceConfig(results_dir=tmp_path / "results", events=events)
    seen: list[str] = []
    with TestClient(create_app(config), base_url=LOCAL) as client:
        time.sleep(1.5)  # the MQTT client tries to connect, and fails
        for path in ("/api/streams", "/api/stats", "/metrics", "/api/events/recent",
                     "/openapi.json"):
            seen.append(client.get(path).text)
    text = "\n".join(seen + [r.getMessage() for r in caplog.records])
    assert "events to mqtt: mqtt://***@127.0.0.1:9/vidpipe" in text
    assert MARK not in text
