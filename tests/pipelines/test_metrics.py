"""The metric names are a contract: dashboard, Grafana and tests read them."""

import asyncio
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from pipelines.backends import host_backends
from pipelines.build import wire_pipeline
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from tests.support.fakes import FAKE_SPEC, FakeBackend, FakeDecoder, FakeSource, ListSink

CONTRACT = [
    "vidpipe_stage_seconds_bucket", "vidpipe_stage_wait_seconds_bucket", "vidpipe_channel_depth",
    "vidpipe_channel_capacity", "vidpipe_frames_total", "vidpipe_frame_latency_seconds_bucket",
    "vidpipe_batch_size_bucket", "vidpipe_detections_total",
]


def test_a_run_exports_the_contracted_metrics_on_the_injected_registry():
    registry = CollectorRegistry()
    metrics = PipelineMetrics(registry)
    backends = host_backends(lambda s: FakeDecoder(), FakeBackend(), FAKE_SPEC)
    pipeline = wire_pipeline([FakeSource("cam", 20)], backends, FAKE_SPEC, [ListSink()],
                             metrics, PipelineOptions(), 4)
    asyncio.run(pipeline.run())
    text = generate_latest(registry).decode()
    for name in CONTRACT:
        assert name in text, name
    for stage in ("decode", "preprocess", "infer", "postprocess", "sink"):
        assert f'vidpipe_stage_seconds_count{{stage="{stage}"}}' in text
    assert 'vidpipe_frames_total{outcome="processed",stream="cam"} 20.0' in text
    assert 'vidpipe_detections_total{class_name="thing",stream="cam"} 20.0' in text


def test_two_pipelines_can_share_one_registry():
    registry = CollectorRegistry()
    metrics = PipelineMetrics(registry)
    for sid in ("a", "b"):
        backends = host_backends(lambda s: FakeDecoder(), FakeBackend(), FAKE_SPEC)
        pipeline = wire_pipeline([FakeSource(sid, 5)], backends, FAKE_SPEC, [ListSink()],
                                 metrics, PipelineOptions(), 4)
        asyncio.run(pipeline.run())
    text = generate_latest(registry).decode()
    assert 'stream="a"' in text and 'stream="b"' in text


@pytest.mark.slow
def test_metrics_port_serves_prometheus_while_the_cli_runs(small_clip, tmp_path):
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Many copies of the clip keep the run going long enough to scrape it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", *[str(small_clip)] * 6, "--out",
         str(tmp_path), "--metrics-port", str(port), "--batch-size", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    body = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                if 'vidpipe_stage_seconds_count{stage="infer"}' in body:
                    break
            except OSError:
                pass
            time.sleep(0.1)
    finally:
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert 'vidpipe_stage_seconds_count{stage="infer"}' in body


def test_samples_keep_the_newest_in_order_in_a_fixed_ring():
    from pipelines.samples import Samples

    samples = Samples(maxlen=1000)
    for v in range(300):
        samples.add(float(v))
    assert samples.values().tolist() == [float(v) for v in range(300)]
    for v in range(300, 2500):
        samples.add(float(v))
    assert samples.values().tolist() == [float(v) for v in range(1500, 2500)]
    assert samples.count == 2500 and samples.total == sum(range(2500))
    assert samples._values.size == 1000  # grown by doubling, never past maxlen
    assert samples.values(window_s=60).size == 1000
    assert samples.values(window_s=0).size == 0
    assert samples.quantiles([0.5]) == [1999.5]


def test_a_calls_observations_at_once_expose_what_one_at_a_time_would():
    from prometheus_client import Histogram

    from pipelines.series import observe_all

    values = [0.0, 0.0004, 0.0005, 0.0051, 0.3, 7.0, 12.5, 0.0005]
    exposed = []
    for many in (False, True):
        registry = CollectorRegistry()
        child = Histogram("h_seconds", "h", ["stage"], registry=registry,
                          buckets=(0.0005, 0.005, 0.5, 10.0)).labels("infer")
        if many:
            observe_all(child, values)
            observe_all(child, [])
        else:
            for v in values:
                child.observe(v)
        exposed.append([line for line in generate_latest(registry).decode().splitlines()
                        if not line.startswith("h_seconds_created")])
    assert exposed[0] == exposed[1]
    assert 'h_seconds_bucket{le="0.0005",stage="infer"} 4.0' in exposed[1]
    assert 'h_seconds_count{stage="infer"} 8.0' in exposed[1]


def test_samples_added_at_once_are_kept_as_added_one_by_one():
    from pipelines.samples import Samples

    one, many = Samples(maxlen=100), Samples(maxlen=100)
    for start in range(0, 300, 30):
        chunk = [float(v) for v in range(start, start + 30)]
        for v in chunk:
            one.add(v)
        many.add_many(chunk)
    assert many.values().tolist() == one.values().tolist() == [float(v) for v in range(200, 300)]
    assert (many.count, many.total) == (one.count, one.total)
