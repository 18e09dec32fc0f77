"""Issue 39: MLPerf's LoadGen drives vidpipe's detector and the hand-written loop — a short
run of one scenario through `vidpipe bench --loadgen`, LoadGen's own summary read back, and
the Server rate search on its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.bench.loadgen import harness
from app.bench.loadgen.bench import _server_held, _server_rate
from tests.support.cli import vidpipe

pytest.importorskip("mlperf_loadgen", reason="mlcommons-loadgen is installed by make test")


def test_a_short_single_stream_run_answers_every_query_and_writes_loadgen_s_logs(
        tmp_path: Path):
    code, output = vidpipe("bench", "--loadgen", "SingleStream", "--model", "shapes-yolo",
                           "--short", "-o", tmp_path)
    assert code == 0, output
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["length"] == "short (CI)"
    systems = {run["system"]: run for run in report["runs"]}
    assert set(systems) == {"vidpipe", "hand loop"}
    for name, run in systems.items():
        folder = tmp_path / "shapes-yolo" / "model" / name.replace(" ", "-") / "SingleStream"
        summary = harness.read_summary(folder / harness.SUMMARY)
        assert summary.scenario == "SingleStream"
        # at least the short mode's queries, each answered (LoadGen waits for every one)
        assert int(summary.fields["min_query_count"]) == harness.SHORT_QUERIES
        assert run["scenarios"]["SingleStream"]["p90_ms"] > 0
        assert run["scenarios"]["SingleStream"]["valid"] == summary.valid
        # the same model on the same frames: the accuracy run's mAP, where the clip has truth
        assert 0.5 < run["mAP50"] <= 1.0
    assert systems["vidpipe"]["mAP50"] == pytest.approx(systems["hand loop"]["mAP50"],
                                                        abs=0.01)


def test_a_scenario_that_is_not_one_of_loadgen_s_is_one_line(tmp_path: Path):
    code, output = vidpipe("bench", "--loadgen", "Streaming", "--model", "shapes-yolo",
                           "--short", "-o", tmp_path)
    assert code == 2 and "expected some of SingleStream, MultiStream, Server, Offline" in output


class _Probe:
    def __init__(self, p99_ms: float) -> None:
        self.p99_ms = p99_ms

    def headline(self) -> dict[str, float]:
        return {"p99_ms": self.p99_ms}


def test_the_server_rate_is_the_highest_probe_within_the_bound(tmp_path: Path):
    """A system whose p99 stays at 50 ms up to 120 queries a second and then explodes: the
    search between 0 and 400 settles just under 120."""
    tried: list[float] = []

    def run(scenario, folder, *, probe=False, given=None):
        rate = given["server_target_qps"]
        tried.append(rate)
        return _Probe(50.0 if rate <= 120 else 900.0)

    rate = _server_rate(run, tmp_path, 400.0)
    assert 100 <= rate <= 120 and len(tried) == 5


def test_each_server_run_over_the_bound_keeps_its_logs_and_figures(tmp_path: Path):
    """A system that holds 100 queries a second and no more, asked 130: the full run is made
    again at 117 and 105.3 (two retries), each run's logs kept apart, each listed, the
    last in ``Server``; one within the bound is not made again."""
    def run(scenario, folder, *, probe=False, given=None):
        rate = given["server_target_qps"]
        folder.mkdir(parents=True)
        (folder / harness.SUMMARY).write_text(f"asked {rate}")
        held = rate <= 100
        return harness.Summary("Server", held, {
            "99.00 percentile latency (ns)": str((60 if held else 900) * 1e6),
            "Completed samples per second": str(min(rate, 100.0))})

    given = {"server_target_qps": 130.0}
    summary, over = _server_held(run, tmp_path, given, retries=2)
    assert [o["target_qps"] for o in over] == [130.0, 117.0]
    assert all(not o["valid"] and o["p99_ms"] == pytest.approx(900) for o in over)
    assert given["server_target_qps"] == 105.3 and not summary.valid
    assert (tmp_path / "Server-at-130" / harness.SUMMARY).read_text() == "asked 130.0"
    assert (tmp_path / "Server-at-117" / harness.SUMMARY).read_text() == "asked 117.0"
    assert (tmp_path / "Server" / harness.SUMMARY).read_text() == "asked 105.3"

    within = tmp_path / "within"
    summary, over = _server_held(run, within, {"server_target_qps": 90.0}, retries=2)
    assert summary.valid and over == [] and [p.name for p in within.iterdir()] == ["Server"]


def test_the_engine_s_batch_timeout_reaches_the_bench(monkeypatch, tmp_path: Path):
    """`--batch-timeout-ms` sets the engine's batch wait (issue 39: a lone frame's wait is
    most of SingleStream's latency); the runtime and device still go with it."""
    import app.bench.loadgen.bench

    seen = []
    monkeypatch.setattr(app.bench.loadgen.bench, "bench_loadgen",
                        lambda console, scenarios, models, options, out, **_: seen.append(
                            (scenarios, models, options.batch_timeout_ms, options.runtime)))
    code, output = vidpipe("bench", "--loadgen", "SingleStream", "--model", "shapes-yolo",
                           "--batch-timeout-ms", "0", "--runtime", "onnxruntime", "--short",
                           "-o", tmp_path)
    assert code == 0, output
    assert seen == [(["SingleStream"], ["shapes-yolo"], 0.0, "onnxruntime")]
