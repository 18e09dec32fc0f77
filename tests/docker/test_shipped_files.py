"""The shipped observability files on their own: promtool checks and unit-tests the config
and alert rules, every alert has its runbook section, the dashboard uses the provisioned data
source and names only outcomes the pipeline counts, the example config and compose file are
valid. Needs ``apt-get install prometheus`` for promtool (skips without it, fails instead when
``REQUIRE_PROMETHEUS=1``); the compose check runs with ``docker compose`` or podman-compose
(which needs podman: it is a ``container`` test, run by ``make test-container``)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.service.config import load_config
from tests.docker.promql import selectors
from tests.docker.shipped import (
    ALERTS,
    DASHBOARD,
    DATASOURCES,
    DOCKER,
    PROMETHEUS_CONFIG,
    PROMTOOL,
    REPO,
    alert_rules,
    dashboard_queries,
    tool,
)
from tests.support.requires import unavailable


@pytest.mark.parametrize("check", ["config", "rules"])
def test_promtool_accepts_the_shipped_files(check, tmp_path):
    target = ALERTS
    if check == "config":
        # The token file compose mounts for Prometheus, here a stand-in: promtool checks that
        # the files a config names exist. The alert rules are named relative to the config.
        token = tmp_path / "vidpipe_api_token"
        token.write_text("token\n")
        target = tmp_path / "prometheus.yml"
        text = PROMETHEUS_CONFIG.read_text()
        assert "/run/secrets/vidpipe_api_token" in text
        target.write_text(text.replace("/run/secrets/vidpipe_api_token", str(token)))
        (tmp_path / ALERTS.name).write_text(ALERTS.read_text())
    done = subprocess.run([str(tool(PROMTOOL)), "check", check, str(target)],
                          capture_output=True, text=True, timeout=30)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr


# (alert, labels, rendered summary) that must fire at 20 minutes on the series below, and no
# others: each alert has a stream that must fire it and one just on the other side of its line.
EXPECTED_AT_20M = [
    ("VidpipeDown", {"job": "vidpipe", "instance": "down:8080", "severity": "critical"},
     "Prometheus cannot scrape vidpipe at down:8080"),
    ("VidpipeStreamDown", {"stream": "dead", "severity": "critical"}, "Stream dead is down"),
    ("VidpipeLatencyP99High", {"stream": "slow", "severity": "warning"},
     "Stream slow: P99 end-to-end latency 995ms"),
    ("VidpipeFrameDropRateHigh", {"stream": "lossy", "severity": "warning"},
     "Stream lossy drops 10% of its frames"),
    ("VidpipeDecodeErrors", {"stream": "glitchy", "severity": "warning"},
     "Stream glitchy: 2% of frames fail to decode"),
    ("VidpipeStreamFlapping", {"stream": "flaky", "severity": "warning"},
     "Stream flaky reconnected 15 times in 15 minutes"),
]


def _frames(stream: str, **per_minute: int) -> list[dict]:
    return [{"series": f'vidpipe_frames_total{{stream="{stream}", outcome="{outcome}"}}',
             "values": f"0+{n}x30"} for outcome, n in per_minute.items()]


def _latency(stream: str, le_0_25: int, le_1: int) -> list[dict]:
    counts = {"0.25": le_0_25, "0.5": le_0_25, "1.0": le_0_25 + le_1, "+Inf": le_0_25 + le_1}
    return [{"series": f'vidpipe_frame_latency_seconds_bucket{{stream="{stream}", le="{le}"}}',
             "values": f"0+{n}x30"} for le, n in counts.items()]


def test_alert_rules_fire_on_the_series_they_describe_and_not_below_their_thresholds(tmp_path):
    series = [
        {"series": 'up{job="vidpipe", instance="down:8080"}', "values": "1 1 0x30"},
        {"series": 'up{job="vidpipe", instance="fine:8080"}', "values": "1x32"},
        {"series": 'vidpipe_stream_up{stream="dead"}', "values": "1 1 0x30"},
        {"series": 'vidpipe_stream_up{stream="live"}', "values": "1x32"},
        *_latency("slow", le_0_25=0, le_1=30),  # every frame between 0.5 and 1 s
        *_latency("quick", le_0_25=30, le_1=0),
        *_frames("lossy", processed=90, dropped_full=5, dropped_stale=5),  # 10 % dropped
        *_frames("fine", processed=97, dropped_full=3),  # 3 %
        *_frames("glitchy", processed=98, decode_error=2),  # 2 %: not a drop, a decode error
        *_frames("clean", processed=199, decode_error=1),  # 0.5 %
        {"series": 'vidpipe_stream_reconnects_total{stream="flaky"}', "values": "0+1x30"},
        {"series": 'vidpipe_stream_reconnects_total{stream="steady"}', "values": "0 0 1x30"},
    ]
    static = {r["alert"]: {k: v for k, v in r["annotations"].items() if k != "summary"}
              for r in alert_rules()}
    at_20m = {alert: [] for alert in static}
    for alert, labels, summary in EXPECTED_AT_20M:
        at_20m[alert].append({"exp_labels": labels,
                              "exp_annotations": {**static[alert], "summary": summary}})
    cases = [{"eval_time": "20m", "alertname": a, "exp_alerts": e} for a, e in at_20m.items()]
    # `for:` holds an alert back: one minute down is pending, not firing.
    cases += [{"eval_time": "2m", "alertname": a} for a in ("VidpipeDown", "VidpipeStreamDown")]
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump({
        "rule_files": [str(ALERTS)], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}]}))
    done = subprocess.run([str(tool(PROMTOOL)), "test", "rules", str(tests)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_section_in_the_operations_guide():
    guide = (REPO / "docs/OPERATIONS.md").read_text()
    for rule in alert_rules():
        assert f"### {rule['alert']}\n" in guide
        assert rule["annotations"]["runbook"] == f"docs/OPERATIONS.md#{rule['alert'].lower()}"


def test_the_dashboard_uses_the_provisioned_data_source():
    uid = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    dashboard = json.loads(DASHBOARD.read_text())
    used = {p["datasource"]["uid"] for p in dashboard["panels"] if "datasource" in p}
    used |= {v["datasource"]["uid"] for v in dashboard["templating"]["list"]}
    assert used == {uid}


def test_the_example_service_config_is_valid():
    config = load_config(DOCKER / "service.yaml", environ={})
    assert config.media_roots, "the example should show media_roots"


def _compose_tool() -> list[str]:
    """``docker compose`` where its plugin is, else podman-compose (in the test extra)."""
    try:
        subprocess.run(["docker", "compose", "version"], capture_output=True, check=True,
                       timeout=30)
        return ["docker", "compose"]
    except (OSError, subprocess.CalledProcessError):
        pass
    found = shutil.which("podman-compose", path=f"{Path(sys.executable).parent}:"
                         f"{os.environ.get('PATH', '')}")
    if found is None:
        unavailable("container", "neither docker compose nor podman-compose is installed")
    if shutil.which("podman") is None:
        unavailable("container", "podman-compose needs podman, which is not installed "
                                 "(make image installs it)")
    return [found]


@pytest.mark.container
def test_compose_file_is_valid_and_requires_the_secrets(tmp_path):
    compose = [*_compose_tool(), "-f", str(DOCKER / "compose.yaml")]
    token = tmp_path / "token"
    token.write_text("t\n")
    env = {**os.environ, "VIDPIPE_API_TOKEN_FILE": str(token), "GRAFANA_ADMIN_PASSWORD": "p"}
    for profile in ("cpu", "gpu", "cluster"):
        done = subprocess.run([*compose, "--profile", profile, "config"], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        config = yaml.safe_load(done.stdout)
        assert config["secrets"]["vidpipe_api_token"]["file"] == str(token)
        for service in config["services"].values():
            if service.get("profiles"):  # the vidpipe service: the token from the secret only
                assert service["environment"]["VIDPIPE_API_TOKEN_FILE"].startswith("/run/secrets/")
                assert "VIDPIPE_API_TOKEN" not in service["environment"]
    del env["GRAFANA_ADMIN_PASSWORD"]
    done = subprocess.run([*compose, "--profile", "cpu", "config"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in done.stderr


def test_compose_mounts_files_that_exist():
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    sources = [volume.split(":")[0] for service in services.values()
               for volume in service.get("volumes", []) if volume.startswith("./")]
    assert sources and all((DOCKER / s).exists() for s in sources), sources


def test_every_outcome_a_dashboard_query_names_is_one_the_pipeline_counts():
    # the drop panels may show nothing while no frame was dropped: their label values must
    # still be ones vidpipe exports, so a typo cannot hide behind "no drops yet"
    from pipelines.metrics import OUTCOMES

    named = {value for _, expr, _ in dashboard_queries() for selector in selectors(expr)
             for values in re.findall(r'outcome\s*=~?\s*"([^"]*)"', selector)
             for value in values.split("|")}
    assert named and named <= set(OUTCOMES), named - set(OUTCOMES)


def test_every_install_of_trackers_is_the_same_pin_without_its_dependencies():
    """trackers asks for opencv-python; vidpipe has the headless build, so every install
    (Makefile, both images, the error that tells a user) is `--no-deps` of one version."""
    from pipelines.analytics.tracking import INSTALL

    pin = INSTALL.split()[-1]
    makefile = (REPO / "Makefile").read_text()
    assert f"TRACKERS := {pin}" in makefile and "--no-deps $(TRACKERS)" in makefile
    for name in ("Dockerfile", "Dockerfile.cpu"):
        assert f"pip install --no-deps {pin}" in (REPO / "docker" / name).read_text(), name
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [d for ds in project["optional-dependencies"].values()
                                        for d in ds]
    assert not [d for d in listed if d.startswith("trackers")]  # pip would pull opencv-python
