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
