"""A camera that cannot be reached says so, and why, from the moment it is added: in the
API, on /metrics (so that the shipped alert fires: promtool is given the series the service
exported), and once in the log, not at every retry. Defaults throughout (camera_down_after_s
5 s): the acceptance is "within 10 s"."""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass, field

import pytest
import yaml
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from tests.docker.shipped import ALERTS, PROMTOOL, alert_rules, tool
from tests.rtsp_fixtures import free_port
from tests.support.api import LOCAL

SECRET = "camera-pw-71"


@dataclass
class Seen:
    first_up_lines: list[str]  # vidpipe_stream_up right after the POST
    shown: dict  # the stream once unreachable
    seconds: float  # from the POST to unreachable
    state_lines: list[str]
    up_lines: list[str]
    later_attempts: int
    log: list[str] = field(default_factory=list)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def metric_lines(client: TestClient, name: str, stream: str) -> list[str]:
    text = client.get("/metrics").text
    return [line for line in text.splitlines()
            if line.startswith(name + "{") and f'stream="{stream}"' in line]


@pytest.fixture(scope="module")
def closed_port_camera(tmp_path_factory) -> Seen:
    lines = Lines()
    logging.getLogger().addHandler(lines)
    root_level = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)
    config = ServiceConfig(results_dir=tmp_path_factory.mktemp("results"),
                           state_dir=tmp_path_factory.mktemp("state"))
    url = f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/door"
    try:
        with TestClient(create_app(config), base_url=LOCAL) as client:
            added = time.monotonic()
            r = client.post("/api/streams", json={"url": url, "id": "door"})
            assert r.status_code == 201, r.text
            first_up = metric_lines(client, "vidpipe_stream_up", "door")
            deadline = time.monotonic() + 15
            while (shown := client.get("/api/streams/door").json())["state"] != "unreachable":
                assert time.monotonic() < deadline, shown
                time.sleep(0.1)
            seconds = time.monotonic() - added
            seen = Seen(first_up, shown, seconds,
                        metric_lines(client, "vidpipe_stream_state", "door"),
                        metric_lines(client, "vidpipe_stream_up", "door"), 0)
            time.sleep(3.0)  # more failed attempts: the log must not grow with them
            seen.later_attempts = client.get("/api/streams/door").json()["attempts"]
    finally:
        logging.getLogger().removeHandler(lines)
        logging.getLogger().setLevel(root_level)
    seen.log = lines.lines
    print(f"\nunreachable {seconds:.1f} s after it was added: {shown['reason']} "
          f"({shown['attempts']} attempts)")
    return seen


def test_it_is_down_on_metrics_from_the_first_second(closed_port_camera):
    assert closed_port_camera.first_up_lines == ['vidpipe_stream_up{stream="door"} 0.0']


def test_within_10_s_the_api_says_unreachable_and_why(closed_port_camera):
    seen = closed_port_camera
    assert seen.seconds < 10.0
    assert "connection refused" in seen.shown["reason"]
    assert seen.shown["attempts"] >= 1 and seen.shown["state_since"] is not None
    assert seen.later_attempts > seen.shown["attempts"]  # still trying
    assert SECRET not in str(seen.shown)
    assert seen.state_lines == ['vidpipe_stream_state{state="unreachable",stream="door"} 1.0']
    assert seen.up_lines == ['vidpipe_stream_up{stream="door"} 0.0']


def test_the_log_says_it_once_not_at_every_retry(closed_port_camera):
    said = [line for line in closed_port_camera.log
            if "door" in line and ("refused" in line or "unreachable" in line)]
    assert len(said) == 1, said
    assert not any(SECRET in line for line in closed_port_camera.log)


def test_the_shipped_alert_fires_on_the_series_the_service_exported(closed_port_camera, tmp_path):
    exported = closed_port_camera.up_lines[0]  # 'vidpipe_stream_up{stream="door"} 0.0'
    series, value = exported.rsplit(" ", 1)
    rule = next(r for r in alert_rules() if r["alert"] == "VidpipeStreamDown")
    annotations = {**rule["annotations"], "summary": "Stream door is down"}
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump({
        "rule_files": [str(ALERTS)], "evaluation_interval": "15s",
        "tests": [{"interval": "15s",
                   "input_series": [{"series": series, "values": f"{float(value):g}x12"}],
                   "alert_rule_test": [
                       {"eval_time": "30s", "alertname": "VidpipeStreamDown"},  # pending
                       {"eval_time": "2m", "alertname": "VidpipeStreamDown", "exp_alerts": [
                           {"exp_labels": {"stream": "door", "severity": "critical"},
                            "exp_annotations": annotations}]}]}]}))
    done = subprocess.run([str(tool(PROMTOOL)), "test", "rules", str(tests)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
