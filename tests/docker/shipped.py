"""What the observability tests share: where the shipped files are, the tools they need,
and the queries of the dashboard and the alert rules."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.requires import unavailable

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DASHBOARD = DOCKER / "grafana/dashboards/vidpipe.json"
DATASOURCES = DOCKER / "grafana/provisioning/datasources/prometheus.yaml"
ALERTS = DOCKER / "prometheus/alerts.yml"
PROMETHEUS_CONFIG = DOCKER / "prometheus/prometheus.yml"
PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
STAGES = {"decode", "preprocess", "infer", "postprocess", "sink"}
STREAMS = ("cam", "cam2")
# Documented in docs/ARCHITECTURE.md ("Metrics") as NVML figures of the GPU build: the CPU
# service these tests run cannot export them, and the dashboard must still show them.
GPU_ONLY = frozenset({"vidpipe_gpu_utilization_ratio", "vidpipe_gpu_memory_used_bytes",
                      "vidpipe_decoder_utilization_ratio"})
# Recorded by Prometheus itself for every scrape; only the alerts read it.
PROMETHEUS_MADE = frozenset({"up"})
# What the issue asks the dashboard to show, by the series it must read.
DASHBOARD_MUST_READ = {"vidpipe_stage_seconds_bucket", "vidpipe_frames_total",
                       "vidpipe_frame_latency_seconds_bucket", "vidpipe_channel_depth",
                       "vidpipe_stream_reconnects_total", *GPU_ONLY}


def tool(path: Path) -> Path:
    if not path.exists():
        unavailable("prometheus", f"{path} is missing (apt-get install prometheus)")
    return path


def dashboard_queries() -> list[tuple[str, str, bool]]:
    """(where, expression, runs in Prometheus) for every query of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))  # a collapsed row keeps its panels inside
            for target in panel.get("targets", []):
                found.append((f"{panel['title']!r} {target['refId']}", target["expr"], True))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if variable.get("type") == "query":  # label_values(...) is Grafana's, not PromQL
            found.append((f"variable ${variable['name']}", query, False))
    return found


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"]
            for rule in group["rules"]]
