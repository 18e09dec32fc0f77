"""Events to a real MQTT broker (issue 19): Debian's mosquitto, started here. A clip with
known line crossings gives exactly those events, in order; a broker stopped for 10 s mid-run
and started again loses nothing that was accepted, and the pipeline drops no frame."""

import json
import socket
import threading
import time
from collections import Counter

import pytest

from app.outputs.config import EventsConfig
from app.recipes.track_eval import truth_crossings
from app.run.runner import run_files
from models.tracking_data import make_tracking_clip, mot_truth_path
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings
from pipelines.options import PipelineOptions
from tests.app.test_cli import read_jsonl
from tests.mqtt_broker import Broker, Subscriber, mosquitto_missing, skip_or_fail
from tests.support.listener import Listener

PREFIX = "vidpipe-test"


@pytest.fixture
def broker(tmp_path):
    missing = mosquitto_missing()
    if missing:
        skip_or_fail(missing)
    folder = tmp_path / "broker"
    folder.mkdir()
    broker = Broker(folder)
    broker.start()
    yield broker
    broker.stop()


def tracked(line: LineConfig) -> PipelineOptions:
    return PipelineOptions(analytics=AnalyticsConfig(track=TrackerSettings(), lines=[line]))


@pytest.mark.slow
def test_a_clip_with_known_crossings_gives_exactly_those_events_in_order(broker, tmp_path):
    # the bench's held-out clear-0: the FP32 model counts its crossings exactly
    clip = make_tracking_clip(tmp_path / "clear.mp4", clip=0, frames=300)
    line = LineConfig(name="middle", points=(320, 0, 320, 384))
    subscriber = Subscriber(broker.port, f"{PREFIX}/#")
    path, spec = resolve_model("shapes-yolo")
    metrics, _, outputs = run_files(
        [clip], path, spec, tmp_path / "out", tracked(line),
        events=EventsConfig(mqtt=f"mqtt://127.0.0.1:{broker.port}/{PREFIX}", snapshots=False))
    written = read_jsonl(outputs.events)
    received = subscriber.wait_for(len(written), "/clear/events")
    availability = [p for t, p, _ in subscriber.messages if t == f"{PREFIX}/availability"]
    state = subscriber.json("/clear/state")
    subscriber.close()
    assert [e["id"] for e in received] == [e["id"] for e in written]  # all, once, in order
    assert received == written
    truth = truth_crossings(mot_truth_path(clip), line)
    crossed = Counter(e["direction"] for e in received if e["type"] == "line_cross")
    assert dict(crossed) == truth and sum(truth.values()) > 5
    summary = json.loads(outputs.summary.read_text())
    assert state[-1] == {"lines": {"middle": truth}, "zones": {}}
    assert summary["analytics"]["lines"]["middle"] == truth
    assert availability[0] == b"online" and availability[-1] == b"offline"
    assert summary["events"]["mqtt"] == {"sent": len(written)}
    assert metrics.events[("mqtt", "dropped")] == 0


@pytest.mark.slow
def test_a_broker_away_for_10_s_loses_nothing_and_stops_no_frame(broker, tmp_path):
    clip = make_tracking_clip(tmp_path / "long.mp4", clip=1, frames=450, size=(320, 192))
    line = LineConfig(name="middle", points=(160, 0, 160, 192))
    subscriber = Subscriber(broker.port, f"{PREFIX}/+/events")
    path, spec = resolve_model("shapes-yolo")
    outage: dict = {}

    def away_for_10_s() -> None:  # beside the run, which is paced as a camera: 15 s
        time.sleep(2.0)
        outage["before"] = len(subscriber.json("/events"))
        broker.stop()
        stopped = time.monotonic()
        time.sleep(10.0)
        broker.start()
        outage["seconds"] = time.monotonic() - stopped

    outage_thread = threading.Thread(target=away_for_10_s)
    outage_thread.start()
    metrics, _, outputs = run_files(
        [clip], path, spec, tmp_path / "out", tracked(line), live=True,
        events=EventsConfig(mqtt=f"mqtt://127.0.0.1:{broker.port}/{PREFIX}", snapshots=False))
    outage_thread.join()
    written = read_jsonl(outputs.events)
    received = subscriber.wait_for(len(written), "/events", timeout=30)
    subscriber.close()
    assert outage["before"] > 0 and outage["seconds"] >= 10.0
    during = [e for e in written if e["pts"] is not None and 2.5 < e["pts"] < 11.5]
    assert during, "no event was published while the broker was away"
    ids = Counter(e["id"] for e in received)
    assert set(ids) == {e["id"] for e in written}  # every event accepted arrived
    # QoS 1 is at least once, on both legs: vidpipe sends again what the broker had not
    # acknowledged, and the broker sends again what the subscriber had not; the id tells a
    # repeat. A repeat can only be of an event in flight when the broker stopped.
    duplicates = sum(n - 1 for n in ids.values())
    print(f"outage {outage['seconds']:.1f} s: {len(written)} events, every one arrived, "
          f"{duplicates} twice; vidpipe sent {metrics.events[('mqtt', 'retried')]} again")
    assert duplicates <= 20
    assert metrics.events[("mqtt", "sent")] == len(written)
    assert metrics.events[("mqtt", "dropped")] == 0
    summary = json.loads(outputs.summary.read_text())
    assert summary["streams"]["long"]["outcomes"] == {"processed": 450}  # no frame dropped


class Silent(Listener):
    """A broker that never answers: keeps what each connection sent first."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        super().__init__()

    def answer(self, client: socket.socket) -> None:
        client.settimeout(1.0)
        try:
            self.received.append(client.recv(4096))
        except OSError:
            self.received.append(b"")


def test_the_broker_is_held_to_allowed_networks_at_each_connection(tmp_path):
    """Issue 40, item 1: a broker name pointed at an address outside allowed_networks after
    start (here: loopback, the networks 10/8) gets connections closed before CONNECT, which
    carries the password — nothing sent; the event waits, then goes to the dead-letter file.
    Inside the networks, the same client sends its CONNECT."""
    from ipaddress import ip_network

    from app.outputs.mqtt import MqttEvents
    from pipelines.events.files import DeadLetters
    from pipelines.metrics import PipelineMetrics

    metrics = PipelineMetrics()
    dead = DeadLetters(tmp_path / "dead.jsonl", metrics)
    event = {"schema": "vidpipe.event/1", "id": "0" * 32, "type": "new", "stream": "cam"}
    outside = Silent()
    events = MqttEvents(f"mqtt://user:pw-S3CRET@127.0.0.1:{outside.port}/{PREFIX}", metrics,
                        dead, networks=[ip_network("10.0.0.0/8")])
    events.publish(event)
    time.sleep(2.5)  # paho tries again every 1-4 s
    events.close(timeout_s=0.5)
    outside.close()
    assert outside.received and set(outside.received) == {b""}, outside.received
    assert [x["event"]["id"] for x in read_jsonl(dead.path)] == [event["id"]]
    inside = Silent()
    events = MqttEvents(f"mqtt://user:pw-S3CRET@127.0.0.1:{inside.port}/{PREFIX}", metrics,
                        dead, networks=[ip_network("127.0.0.0/8")])
    time.sleep(1.0)
    events.close(timeout_s=0.2)
    inside.close()
    assert inside.received and inside.received[0][:1] == b"\x10"  # CONNECT
