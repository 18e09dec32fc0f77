"""Webhooks (issue 19) against a receiver on 127.0.0.1: signatures that verify, retries on
5xx, the dead-letter file when the receiver never answers, and a run that never waits on a
slow receiver."""

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.outputs.config import EventsConfig
from app.outputs.webhook import WebhookEvents
from app.run.runner import run_files
from models.tracking_data import make_tracking_clip
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.events.files import DeadLetters
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from tests.app.test_cli import read_jsonl

SECRET = b"a webhook secret"


class Receiver:
    """An HTTP server answering POSTs with ``answers`` in turn (then 200); ``hold`` blocks
    each answer until it is set; ``hang`` answers nothing (slower than any timeout)."""

    def __init__(self, answers=(), hang=False) -> None:
        self.answers = list(answers)
        self.hang = hang
        self.requests: list[tuple[dict, bytes, int]] = []
        self.hold = threading.Event()
        self.hold.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.hang:
                    time.sleep(5)
                    return
                receiver.hold.wait(120)  # a loaded machine may take its time
                status = receiver.answers.pop(0) if receiver.answers else 200
                receiver.requests.append((dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metrics():
    return PipelineMetrics()


@pytest.fixture
def dead(tmp_path, metrics):
    return DeadLetters(tmp_path / "dead.jsonl", metrics)


def event(n: int = 1) -> dict:
    return {"schema": "vidpipe.event/1", "id": f"{n:032x}", "type": "new", "stream": "cam"}


def verified(headers: dict, body: bytes, now: float, max_age_s: float = 300) -> bool:
    """What a receiver does: recompute the signature, refuse an old timestamp."""
    stamp = headers["X-Vidpipe-Timestamp"]
    mac = hmac.new(SECRET, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return (hmac.compare_digest(headers["X-Vidpipe-Signature"], f"sha256={mac}")
            and abs(now - int(stamp)) <= max_age_s)


def test_a_receiver_verifies_the_signature_with_the_secret(dead, metrics):
    receiver = Receiver()
    hook = WebhookEvents(receiver.url, SECRET, metrics, dead, backoff_s=0.01)
    hook.publish(event(1))
    hook.close()
    receiver.close()
    [(headers, body, status)] = receiver.requests
    assert status == 200 and json.loads(body) == event(1)
    assert verified(headers, body, time.time())
    assert not verified(headers, body.replace(b"new", b"end"), time.time())  # tampered
    assert not verified(headers, body, time.time() + 3600)  # replayed an hour later
    assert metrics.events[("webhook", "sent")] == 1


def test_three_503s_then_200_deliver_the_event_once(dead, metrics):
    receiver = Receiver(answers=[503, 503, 503])
    hook = WebhookEvents(receiver.url, SECRET, metrics, dead, backoff_s=0.01)
    hook.publish(event(7))
    hook.close()
    receiver.close()
    assert [s for _, _, s in receiver.requests] == [503, 503, 503, 200]
    assert {json.loads(b)["id"] for _, b, _ in receiver.requests} == {event(7)["id"]}
    counts = metrics.events
    assert (counts[("webhook", "sent")], counts[("webhook", "retried")]) == (1, 3)
    assert dead.count == 0


def test_a_receiver_that_never_answers_sends_the_event_to_the_dead_letter_file(dead, metrics):
    receiver = Receiver(hang=True)
    hook = WebhookEvents(receiver.url, SECRET, metrics, dead, retries=2, backoff_s=0.01,
                         timeout_s=(0.5, 0.3))
    hook.publish(event(3))
    hook.close(timeout_s=10)
    receiver.close()
    [line] = read_jsonl(dead.path)
    assert line["event"] == event(3) and line["sink"] == "webhook"
    assert "3 attempt" in line["reason"]
    counts = metrics.events
    assert (counts[("webhook", "dropped")], counts[("webhook", "retried")]) == (1, 2)
    assert counts[("webhook", "sent")] == 0


def test_a_client_error_is_not_retried(dead, metrics):
    receiver = Receiver(answers=[401])
    hook = WebhookEvents(receiver.url, SECRET, metrics, dead, backoff_s=0.01)
    hook.publish(event(4))
    hook.close()
    receiver.close()
    assert len(receiver.requests) == 1
    assert read_jsonl(dead.path)[0]["reason"] == "refused: HTTP 401"


def test_a_run_never_waits_on_a_slow_receiver(tmp_path, monkeypatch):
    """The receiver answers nothing until the run has finished every frame: the run does
    not wait for it, and once it answers every event arrives."""
    monkeypatch.setenv("VIDPIPE_WEBHOOK_SECRET", SECRET.decode())
    clip = make_tracking_clip(tmp_path / "lanes.mp4", clip=2, frames=90, size=(320, 192))
    receiver = Receiver()
    receiver.hold.clear()
    path, spec = resolve_model("shapes-yolo")
    options = PipelineOptions(analytics=AnalyticsConfig(track=TrackerSettings()))

    def progress(done: int, total: int | None) -> None:
        # the first report of every frame (the run reports again as it ends, by then the
        # receiver may have answered)
        if total is not None and done >= total and progress.seen_all is None:  # type: ignore[attr-defined]
            progress.seen_all = len(receiver.requests)  # type: ignore[attr-defined]
            receiver.hold.set()  # every frame is through: let the receiver answer

    progress.seen_all = None  # type: ignore[attr-defined]
    _, _, outputs = run_files([clip], path, spec, tmp_path / "out", options,
                              on_progress=progress,
                              events=EventsConfig(webhooks=[receiver.url], snapshots=False,
                                                  dead_letter=tmp_path / "dead.jsonl"))
    receiver.close()
    written = read_jsonl(outputs.events)
    assert progress.seen_all == 0  # nothing answered while the frames went through
    assert sorted(json.loads(b)["id"] for _, b, _ in receiver.requests) == \
        sorted(e["id"] for e in written)
    assert not (tmp_path / "dead.jsonl").exists()


def test_a_malformed_url_never_shows_its_password():
    from app.outputs.mqtt import parse_mqtt_url, topic_part
    from app.outputs.webhook import check_webhook_url
    from pipelines.errors import ConfigError

    for check, url in ((parse_mqtt_url, "mqtt://admin:s3cr/et@broker/vid"),
                       (check_webhook_url, "https://u:hunter2#x@host/hook")):
        with pytest.raises(ConfigError) as refused:
            check(url)
        assert "s3cr" not in str(refused.value) and "hunter2" not in str(refused.value)
    assert topic_part("lobby#2/a+b") == "lobby_2_a_b"


def test_a_webhook_is_held_to_allowed_networks_at_each_connection(dead, metrics):
    """Issue 40, item 1: the host was checked once, at start; after its name re-resolved to
    loopback (a DNS change) the events reached loopback. The receiver here is on loopback,
    outside the allowed network: nothing reaches it, and the event says why, unretried."""
    from ipaddress import ip_network

    receiver = Receiver()
    hook = WebhookEvents(receiver.url, SECRET, metrics, dead, backoff_s=0.01,
                         networks=[ip_network("10.0.0.0/8")])
    hook.publish(event(5))
    hook.close()
    receiver.close()
    assert receiver.requests == []
    [line] = read_jsonl(dead.path)
    assert line["event"] == event(5)
    assert "connected to 127.0.0.1, outside allowed_networks" in line["reason"], line
    assert metrics.events.get(("webhook", "retried"), 0) == 0
    allowed = Receiver()  # the same, inside its networks: delivered
    hook = WebhookEvents(allowed.url, SECRET, metrics, dead, backoff_s=0.01,
                         networks=[ip_network("127.0.0.0/8")])
    hook.publish(event(6))
    hook.close()
    allowed.close()
    assert [json.loads(b)["id"] for _, b, _ in allowed.requests] == [event(6)["id"]]
