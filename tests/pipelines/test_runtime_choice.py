"""Issue 25: OpenVINO beside ONNX Runtime on the CPU, and ``--runtime auto`` choosing between
them by measured speed and agreement. OpenVINO is optional (``vidpipe[openvino]``): the tests
that run it carry the ``openvino`` marker (``make test-openvino`` installs it and runs them)."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from models.backends.onnxruntime import OnnxRuntimeBackend
from models.zoo import resolve_model
from pipelines.build import build_pipeline
from pipelines.errors import ConfigError
from pipelines.gpu_metrics import BackendReport
from pipelines.infer import choice
from pipelines.infer.choice import FILE_FRAMES, open_cpu_runtime, probe_inputs
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.postprocess.agreement import Agreement
from pipelines.synthetic.photos import PHOTOS
from tests.support.fakes import ListSink
from tests.support.requires import require_module


@pytest.fixture
def openvino():
    """Skips without OpenVINO; REQUIRE_OPENVINO=1 fails instead."""
    require_module("openvino", "openvino", "make test-openvino installs it")
    import openvino

    return openvino


class _File:
    live = False

    def __init__(self, path):
        self.path = path


@pytest.mark.openvino
@pytest.mark.parametrize("variant", ["model.onnx", "model.pruned50.onnx"])
def test_openvino_gives_onnx_runtimes_outputs_on_fp32_models(openvino, variant):
    path, spec = resolve_model("shapes-yolo")
    path = path.parent / variant
    from models.backends.openvino import OpenVinoBackend

    batch = np.random.default_rng(0).random((2, 3, 320, 320), dtype=np.float32)
    with OpenVinoBackend(path, threads=1) as ov, OnnxRuntimeBackend(path, threads=1) as ort:
        assert ov.inputs == ort.inputs and ov.outputs == ort.outputs
        # f32 even where the plugin would run bfloat16 by default (docs/BENCHMARKS.md)
        assert ov.precision == "f32"
        got, wanted = ov.infer({"images": batch}), ort.infer({"images": batch})
        assert got.keys() == wanted.keys()
        for name in wanted:
            np.testing.assert_allclose(got[name], wanted[name], atol=2e-3, rtol=1e-4)


@pytest.mark.openvino
def test_openvino_calls_from_two_threads_each_get_their_own_answer(openvino):
    from models.backends.openvino import OpenVinoBackend

    path, _ = resolve_model("shapes-yolo")
    rng = np.random.default_rng(1)
    inputs = [rng.random((1, 3, 320, 320), dtype=np.float32) for _ in range(2)]
    with OpenVinoBackend(path, threads=1, streams=2) as ov:
        alone = [ov.infer({"images": x})["output0"] for x in inputs]
        together: list[list[np.ndarray]] = [[], []]

        def call(i):
            for _ in range(5):
                together[i].append(ov.infer({"images": inputs[i]})["output0"])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i in range(2):
        for got in together[i]:  # a shared request would have mixed the two inputs' outputs
            np.testing.assert_array_equal(got, alone[i])


@pytest.mark.openvino
def test_the_person_detector_agrees_on_natural_pictures(openvino):
    """ssdlite-person (NMS inside the graph, uint8 NHWC input) under OpenVINO against ONNX
    Runtime on the photographs the probe uses."""
    from models.backends.openvino import OpenVinoBackend

    path, spec = resolve_model("ssdlite-person")
    agreement = Agreement()
    with OpenVinoBackend(path, threads=1) as ov, OnnxRuntimeBackend(path, threads=1) as ort:
        for tensor, letterbox in probe_inputs(spec, []):
            agreement.add(choice._detect(ort, spec, tensor, letterbox),
                          choice._detect(ov, spec, tensor, letterbox))
    assert agreement.frames == len(PHOTOS)
    assert agreement.boxes_reference > 0, "no person found: the agreement would be empty"
    assert agreement.agreed == agreement.frames, agreement.as_dict()


@pytest.mark.openvino
@pytest.mark.parametrize(("times", "chosen", "why"), [
    ((10.0, 6.0), "openvino", "and is faster"),
    ((10.0, 9.8), "onnxruntime", "is not 5% faster"),
])
def test_auto_takes_openvino_only_when_it_is_faster_by_the_margin(openvino, monkeypatch,
                                                                    small_clip, times, chosen,
                                                                    why):
    path, spec = resolve_model("shapes-yolo")
    monkeypatch.setattr(choice, "_interleaved_ms", lambda *a: list(times))
    backend, plan, decision = open_cpu_runtime(path, spec, [_File(small_clip)], "auto", 1, 1)
    try:
        assert decision.runtime == chosen and why in decision.reason, decision
        assert type(backend).__name__ == ("OpenVinoBackend" if chosen == "openvino"
                                          else "OnnxRuntimeBackend")
        ort, ov = decision.trials
        assert (ort.runtime, ort.ms_per_frame, ov.runtime, ov.ms_per_frame) == (
            "onnxruntime", times[0], "openvino", times[1])
        assert ov.frames == FILE_FRAMES + len(PHOTOS) and ov.agreeing == ov.frames
    finally:
        backend.close()


@pytest.mark.openvino
def test_auto_keeps_onnx_runtime_when_openvino_disagrees(openvino, monkeypatch, small_clip):
    """However fast it is: a runtime whose detections move is not admitted."""
    from models.backends.openvino import OpenVinoBackend

    path, spec = resolve_model("shapes-yolo")
    real = OpenVinoBackend.infer

    def shifted(self, feeds):
        outputs = real(self, feeds)
        return {k: v + np.float32(8.0) * (np.arange(v.shape[1]) < 4)[None, :, None]
                for k, v in outputs.items()}  # the boxes moved 8 pixels

    monkeypatch.setattr(OpenVinoBackend, "infer", shifted)
    monkeypatch.setattr(choice, "_interleaved_ms", lambda *a: [10.0, 1.0])
    backend, _, decision = open_cpu_runtime(path, spec, [_File(small_clip)], "auto", 1, 1)
    backend.close()
    assert decision.runtime == "onnxruntime" and "disagrees" in decision.reason, decision
    assert decision.trials[1].agreeing < decision.trials[1].frames


def test_auto_is_onnx_runtime_without_openvino(monkeypatch, small_clip):
    path, spec = resolve_model("shapes-yolo")
    monkeypatch.setattr(choice, "openvino_version", lambda: None)
    backend, _, decision = open_cpu_runtime(path, spec, [_File(small_clip)], "auto", 1, 1)
    backend.close()
    assert decision.runtime == "onnxruntime" and "not installed" in decision.reason
    assert decision.as_dict() == {"runtime": "onnxruntime", "reason": decision.reason,
                                  "trials": []}


def test_openvino_on_a_gpu_is_refused_in_one_line(small_clip):
    path, spec = resolve_model("shapes-yolo")
    with pytest.raises(ConfigError, match="runtime openvino runs on the CPU"):
        build_pipeline([small_clip], ["clip"], path, spec, [ListSink()], PipelineMetrics(),
                       PipelineOptions(device="cuda", runtime="openvino"))


@pytest.mark.openvino
def test_a_run_on_openvino_reports_it_and_detects_what_onnx_runtime_does(openvino, small_clip):
    path, spec = resolve_model("shapes-yolo")
    found = {}
    for runtime in ("onnxruntime", "openvino"):
        metrics = PipelineMetrics(CollectorRegistry())
        sink = ListSink()
        pipeline = build_pipeline([small_clip], ["clip"], path, spec, [sink], metrics,
                                  PipelineOptions(runtime=runtime))
        asyncio.run(pipeline.run())
        assert pipeline.plan.runtime.runtime == runtime
        assert BackendReport.for_registry(metrics.registry).choices["infer"] == (
            runtime, "cpu", "")
        found[runtime] = {r.frame.index: r.detections for r in sink.results}
    agreement = Agreement()
    for index, detections in found["onnxruntime"].items():
        agreement.add(detections, found["openvino"].get(index))
    assert agreement.frames == 60 and agreement.agreed == agreement.frames, agreement.as_dict()


@pytest.mark.openvino
@pytest.mark.slow
def test_bench_runtimes_times_checks_and_runs_each_runtime(openvino, small_clip, tmp_path):
    from tests.support.cli import vidpipe

    variant = resolve_model("shapes-yolo")[0].parent / "model.pruned50.onnx"
    code, output = vidpipe("bench", "--runtimes", "--model", variant, "--source", small_clip,
                           "--frames", 20, "--reps", 1, "--out", tmp_path)
    assert code == 0, output
    report = json.loads((tmp_path / "bench.json").read_text())
    [row] = report["models"]
    assert [a["threads"] for a in row["alone"]] == sorted({1, os.cpu_count() or 1})
    for alone in row["alone"]:
        assert alone["onnxruntime_ms"] > 0 and alone["openvino_ms"] > 0
        assert alone["openvino_bf16_ms"] > 0
        assert alone["openvino_over_onnxruntime"] == pytest.approx(
            alone["onnxruntime_ms"] / alone["openvino_ms"], rel=0.01)
    checked = row["check"]
    assert list(checked) == ["auto", "openvino", "openvino-bf16"]
    assert checked["auto"]["runtime"] in ("onnxruntime", "openvino")
    assert [checked[k]["runtime"] for k in ("openvino", "openvino-bf16")] == list(checked)[1:]
    assert checked["openvino"]["frames"] == 20
    assert checked["openvino"]["frame_agreement"] == 1.0  # FP32: the same detections
    e2e = row["end_to_end"]
    assert set(e2e["fps"]) == {"hand loop", "vidpipe onnxruntime", "vidpipe openvino",
                               "vidpipe openvino-bf16", "vidpipe auto"}  # no Ultralytics
    assert e2e["auto_chose"][0] in ("onnxruntime", "openvino")
    assert e2e["auto_over_hand_loop"] == pytest.approx(
        e2e["fps"]["vidpipe auto"] / e2e["fps"]["hand loop"], rel=0.01)
    assert "ONNX Runtime against OpenVINO" in output


def test_bench_runtimes_without_openvino_is_one_line(monkeypatch, small_clip, tmp_path):
    from models.backends import openvino as ov_module
    from tests.support.cli import vidpipe

    monkeypatch.setattr(ov_module, "openvino_version", lambda: None)
    code, output = vidpipe("bench", "--runtimes", "--source", small_clip, "--out", tmp_path)
    assert code == 2 and "needs OpenVINO" in output, output


@pytest.mark.openvino
def test_bfloat16_is_taken_only_when_asked_for_and_says_so(openvino, small_clip, caplog):
    path, spec = resolve_model("shapes-yolo")
    with caplog.at_level("WARNING", logger="pipelines.infer.choice"):
        backend, _, decision = open_cpu_runtime(path, spec, [_File(small_clip)],
                                                "openvino-bf16", 1, 1)
    try:
        # bf16 where the CPU has it (AVX-512 BF16 / AMX), else the plugin's f32
        assert decision.runtime == "openvino-bf16" and backend.precision in ("bf16", "f32")
        assert backend.precision in decision.reason and "not the model's own" in decision.reason
        assert any("openvino-bf16" in r.getMessage() for r in caplog.records)
    finally:
        backend.close()
