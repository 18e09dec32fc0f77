"""The shipped observability files against the real thing: Debian's Prometheus scrapes a running
`vidpipe serve` on loopback, computes the stages' p99 and answers the dashboard's queries and
the alert rules; the dashboard and the alerts name only metrics that the service's /metrics
exports. (tests/docker/test_shipped_files.py checks the files on their own.)

Needs ``apt-get install prometheus``. Skips without it, and fails instead when
``REQUIRE_PROMETHEUS=1``.
"""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.docker.promql import exported_names, grafana_to_promql, metric_names, selectors
from tests.docker.shipped import (
    ALERTS,
    DASHBOARD_MUST_READ,
    GPU_ONLY,
    PROMETHEUS,
    PROMETHEUS_MADE,
    REPO,
    STAGES,
    STREAMS,
    alert_rules,
    dashboard_queries,
    tool,
)

pytestmark = pytest.mark.slow  # a real Prometheus per module: seconds to start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _started(argv: list[str], log: Path, ready, what: str) -> subprocess.Popen:
    """``argv`` running, once ``ready()`` holds; a failure shows the process's log."""
    with log.open("wb") as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    try:
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not get ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
    except BaseException:  # a failed wait must not leave the process running
        _stop(proc)
        raise
    return proc


@pytest.fixture(scope="module")
def service(small_clip, tmp_path_factory):
    """`vidpipe serve` on loopback playing two file streams, once every stage has measured."""
    tmp = tmp_path_factory.mktemp("observed")
    (tmp / "media").mkdir()
    clip = tmp / "media" / "cam.mp4"
    clip.write_bytes(small_clip.read_bytes())
    config = tmp / "service.yaml"
    config.write_text(yaml.safe_dump({"media_roots": [str(clip.parent)],
                                      "results_dir": str(tmp / "results"),
                                      "state_dir": str(tmp / "state"), "streams": [
        {"url": str(clip), "id": stream} for stream in STREAMS]}))
    base = f"http://127.0.0.1:{_free_port()}"

    def every_stage_measured() -> bool:
        try:
            text = _get(f"{base}/metrics").decode()
        except OSError:
            return False
        return all(f'vidpipe_stage_seconds_count{{stage="{s}"}}' in text for s in STAGES)

    proc = _started([sys.executable, "-m", "app.cli", "serve", "--config", str(config),
                     "--port", base.rsplit(":", 1)[1]], tmp / "service.log",
                    every_stage_measured, "vidpipe serve")
    yield base
    _stop(proc)


@pytest.fixture(scope="module")
def prometheus(service, tmp_path_factory):
    """Debian's Prometheus scraping the service every second, with the shipped alert rules,
    once it has three scrapes: enough for a rate over 30 s."""
    binary = tool(PROMETHEUS)
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "vidpipe", "static_configs": [
            {"targets": [service.removeprefix("http://")]}]}],
    }))
    base = f"http://127.0.0.1:{_free_port()}"

    def scraped_three_times() -> bool:
        try:
            _get(f"{base}/-/ready")  # 503 while the storage opens
        except OSError:
            return False
        return bool(_query(base, 'count_over_time(up{job="vidpipe"}[1m]) >= 3'))

    proc = _started([str(binary), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                     f"--web.listen-address={base.removeprefix('http://')}"],
                    tmp / "prometheus.log", scraped_three_times, "Prometheus")
    yield base
    _stop(proc)


def _query(prometheus: str, expr: str) -> list[dict]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        body = json.loads(_get(url))
    except urllib.error.HTTPError as e:  # 400 for an expression Prometheus cannot parse
        body = json.loads(e.read())
    assert body["status"] == "success", f"{expr!r}: {body.get('error')}"
    return body["data"]["result"]


@pytest.mark.parametrize(("expr", "names"), [
    ("up", {"up"}),
    ('vidpipe_stream_up{stream=~"$stream"} == 0', {"vidpipe_stream_up"}),
    ("histogram_quantile(0.99, sum by (stage, le) (rate(vidpipe_stage_seconds_bucket"
     '{stage=~"$stage"}[$__rate_interval])))', {"vidpipe_stage_seconds_bucket"}),
    ("sum(rate(a_sum[5m])) by (job) / ignoring(x) group_left(y) sum(rate(b_count[5m] offset 1h))",
     {"a_sum", "b_count"}),
    ("rate(x_total[5m:30s]) > bool 0 and on (stream) y or unless_z unless w",
     {"x_total", "y", "unless_z", "w"}),
    ('{__name__="by_matcher", job="by (a) rate(fake[1m])"} + 1e3 * Inf', {"by_matcher"}),
    ('label_replace(d, "stream", "$1", "channel", "([^/]+)/.*") / capacity', {"d", "capacity"}),
    ("label_values(vidpipe_stream_up, stream)", {"vidpipe_stream_up"}),
    ("vector(1) + scalar(time())", set()),
])
def test_metric_names_finds_the_series_an_expression_reads(expr, names):
    assert metric_names(expr) == names


def test_dashboard_names_only_metrics_that_the_service_exports(service):
    exported = exported_names(_get(f"{service}/metrics").decode())
    architecture = (REPO / "docs/ARCHITECTURE.md").read_text()
    assert all(f"`{name}`" in architecture for name in GPU_ONLY), "allow-list not documented"
    read = {}
    for where, expr, _ in dashboard_queries():
        for name in metric_names(expr):
            read.setdefault(name, where)
    unknown = {name: where for name, where in read.items()
               if name not in exported and name not in GPU_ONLY}
    assert not unknown, f"the dashboard reads metrics that /metrics does not export: {unknown}"
    assert DASHBOARD_MUST_READ <= read.keys(), DASHBOARD_MUST_READ - read.keys()


def test_alert_rules_name_only_metrics_that_the_service_exports(service):
    exported = exported_names(_get(f"{service}/metrics").decode()) | PROMETHEUS_MADE
    unknown = {rule["alert"]: metric_names(rule["expr"]) - exported for rule in alert_rules()}
    assert not any(unknown.values()), unknown


def test_prometheus_computes_the_p99_of_every_stage(prometheus):
    expr = "histogram_quantile(0.99, sum by (le, stage) (rate(vidpipe_stage_seconds_bucket[30s])))"
    deadline = time.monotonic() + 20
    while True:
        p99 = {r["metric"]["stage"]: float(r["value"][1]) for r in _query(prometheus, expr)}
        p99 = {stage: v for stage, v in p99.items() if math.isfinite(v)}
        if STAGES <= p99.keys() or time.monotonic() > deadline:
            break
        time.sleep(1)
    print("stage p99 (s):", {stage: round(v, 4) for stage, v in sorted(p99.items())})
    assert STAGES <= p99.keys(), f"stages without a p99: {STAGES - p99.keys()}"
    assert all(0 < p99[stage] <= 10 for stage in STAGES), p99


def test_every_dashboard_query_runs_and_shows_data_where_prometheus_has_it(prometheus):
    # Series Prometheus already held 3 s ago: a rate over them has two points by now.
    core = {"vidpipe_stage_seconds_bucket", "vidpipe_frames_total", "vidpipe_channel_depth",
            "vidpipe_frame_latency_seconds_bucket", "vidpipe_stream_up"}
    deadline = time.monotonic() + 15
    while not core <= (held := {r["metric"]["__name__"] for r in _query(
            prometheus, 'group by (__name__) ({__name__=~"vidpipe_.+"} offset 3s)')}):
        assert time.monotonic() < deadline, f"Prometheus holds only {held}"
        time.sleep(0.5)
    empty = []
    for where, expr, runs in dashboard_queries():
        if runs:
            result = _query(prometheus, grafana_to_promql(expr, interval="30s"))
            if not result and metric_names(expr) <= held and _series_exist(prometheus, expr):
                empty.append(where)
    assert not empty, f"no data for queries whose series Prometheus has: {empty}"


def _series_exist(prometheus: str, expr: str) -> bool:
    """Whether every series selector of ``expr`` matched something 3 s ago (a drop panel
    has nothing to show while no frame was dropped: that is not a broken query)."""
    return all(_query(prometheus, f"group({selector} offset 3s)")
               for selector in selectors(expr))


def test_the_shipped_alert_rules_load_and_evaluate_in_prometheus(prometheus):
    def rules() -> list[dict]:
        body = json.loads(_get(f"{prometheus}/api/v1/rules"))
        return [rule for group in body["data"]["groups"] for rule in group["rules"]]

    deadline = time.monotonic() + 10
    while any(r["lastEvaluation"].startswith("0001") for r in rules()):
        assert time.monotonic() < deadline, "the rules were never evaluated"
        time.sleep(0.5)
    loaded = rules()
    assert {r["name"] for r in loaded} == {r["alert"] for r in alert_rules()}
    assert all(r["health"] == "ok" for r in loaded), [(r["name"], r.get("lastError"))
                                                      for r in loaded]
    # Both file streams play, so the rule evaluates on real series and matches none of them.
    stream_down = next(r for r in loaded if r["name"] == "VidpipeStreamDown")
    assert stream_down["alerts"] == []


