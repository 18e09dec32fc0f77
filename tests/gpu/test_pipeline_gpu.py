"""The pipeline with GPU backends against the CPU backends on the same clip and model: the
same boxes.

On the CPU, the GPU backends run with torch on the CPU (the hand-off code paths without
streams) inside the same stages; with a GPU, NVDEC (where PyNvVideoCodec is installed),
torch-CUDA preprocessing, TorchBackend and GPU NMS.
"""

from __future__ import annotations

import asyncio
import logging
import shutil

import pytest
import torch
from prometheus_client import CollectorRegistry

from models.backends.torch import TorchBackend
from pipelines.backends.gpu import decoder_factory, inference_backend
from pipelines.build import build_pipeline
from pipelines.cuda import cuda_available
from pipelines.decode.pyav import PyAVDecoder
from pipelines.errors import DeviceError
from pipelines.gpu_metrics import BackendReport
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.preprocess.torch_cuda import TorchPreprocessor
from tests.gpu.agreement import CollectSink, agreement, run_cpu_pipeline, run_gpu_pipeline

INPUT = (3, 320, 320)


@pytest.fixture(scope="module")
def cpu_detections(rect_clip, rect_model):
    path, spec, _ = rect_model
    return run_cpu_pipeline(rect_clip, path, spec)


def test_cpu_pipeline_finds_the_rectangles(cpu_detections):
    assert len(cpu_detections) == 30
    assert sum(len(d) for d in cpu_detections.values()) >= 30  # the test is about something


def test_gpu_stages_on_the_cpu_give_the_cpu_pipeline_boxes(rect_clip, rect_model, cpu_detections):
    path, spec, model = rect_model
    backend = TorchBackend(model, input_shape=INPUT, device="cpu", max_batch=4)
    found, metrics, _ = run_gpu_pipeline(
        [rect_clip], spec, backend, lambda s: PyAVDecoder(s.video),
        lambda: TorchPreprocessor(spec.input, "cpu"), torch.device("cpu"), batch_size=4)
    # torch's bilinear resize is OpenCV's to one grey level (OpenCV rounds its weights): a box
    # whose score sits on the threshold may fall either side; nothing else may differ
    result, back = agreement(cpu_detections, found), agreement(found, cpu_detections)
    assert result.ratio >= 0.99 and back.ratio >= 0.99, (result, back)
    assert result.max_score_diff <= 0.005, result
    assert metrics.outcomes["clip"]["processed"] == 30 and metrics.unaccounted("clip") == 0


def test_without_cuda_the_gpu_build_runs_the_cpu_pipeline(rect_clip, rect_model, caplog,
                                                          monkeypatch):
    if cuda_available():
        pytest.skip("this machine has CUDA")
    import pipelines.cuda

    # "once per process": an earlier test may have logged it already
    monkeypatch.setattr(pipelines.cuda, "_logged_fallbacks", set())
    path, spec, _ = rect_model
    metrics = PipelineMetrics(CollectorRegistry())
    sink = CollectSink()
    with caplog.at_level(logging.WARNING):
        pipeline = build_pipeline([rect_clip], ["clip"], path, spec, [sink], metrics,
                                  PipelineOptions(device="cuda:0"))
    asyncio.run(pipeline.run())
    # it is the CPU pipeline, as build_pipeline makes it (decoding at the model's size)
    reference = CollectSink()
    asyncio.run(build_pipeline([rect_clip], ["clip"], path, spec, [reference],
                               PipelineMetrics(CollectorRegistry()), PipelineOptions()).run())
    assert len(reference.found) == 30
    assert agreement(reference.found, sink.found).ratio == 1.0
    assert any("running on the CPU" in r.getMessage() for r in caplog.records)
    backend, device, fallback = BackendReport.for_registry(metrics.registry).choices["infer"]
    # the CPU's runtime as its plan chose it (auto: OpenVINO where installed and faster)
    assert pipeline.plan is not None and pipeline.plan.runtime is not None
    assert (backend, device) == (pipeline.plan.runtime.runtime, "cpu") and "cuda:0" in fallback


def test_without_cuda_and_without_fallback_the_gpu_build_fails(rect_clip, rect_model):
    if cuda_available():
        pytest.skip("this machine has CUDA")
    path, spec, _ = rect_model
    with pytest.raises(DeviceError, match="cuda:0"):
        build_pipeline([rect_clip], ["clip"], path, spec, [], PipelineMetrics(),
                       PipelineOptions(device="cuda:0", allow_cpu_fallback=False))


def test_the_inference_backend_is_found_beside_the_model(rect_model, tmp_path):
    path, spec, model = rect_model
    onnx = tmp_path / "model.onnx"
    shutil.copy(path, onnx)
    report = BackendReport(CollectorRegistry())
    with pytest.raises(DeviceError, match=r"no TensorRT engine beside model.onnx .*"
                                          r"no torch model beside model.onnx"):
        inference_backend(onnx, spec, torch.device("cpu"), PipelineOptions(), report)
    batch = torch.export.Dim("batch", max=64)
    program = torch.export.export(model, (torch.zeros(2, *INPUT),),
                                  dynamic_shapes={"images": {0: batch}})
    torch.export.save(program, str(tmp_path / "model.pt2"))
    backend, name = inference_backend(onnx, spec, torch.device("cpu"), PipelineOptions(),
                                      report)
    assert isinstance(backend, TorchBackend) and backend.max_batch == 4
    assert name == report.choices["infer"][0]
    name, _, fallback = report.choices["infer"]
    assert name.startswith("torch-") and "TensorRT engine" in fallback


def test_a_model_pt_of_another_tool_beside_the_model_is_a_reason_not_a_crash(rect_model,
                                                                           tmp_path):
    """Ultralytics leaves yolov8n.pt beside its yolov8n.onnx: not a file vidpipe runs, so the
    GPU path says so among its reasons (and the CPU pipeline runs, logged), not a crash."""
    path, spec, _ = rect_model
    onnx = tmp_path / "model.onnx"
    shutil.copy(path, onnx)
    torch.save({"model": "someone else's", "epoch": 3}, tmp_path / "model.pt")
    with pytest.raises(DeviceError, match=r"model.pt beside model.onnx is not a torch model "
                                          r"vidpipe loads"):
        inference_backend(onnx, spec, torch.device("cpu"), PipelineOptions(),
                          BackendReport(CollectorRegistry()))


def gpu_run(clips, rect_model, device, precision, *, batch_size=8, frames=None):
    _, spec, model = rect_model
    registry = CollectorRegistry()
    report = BackendReport.for_registry(registry)
    backend = TorchBackend(model, input_shape=INPUT, device=str(device), precision=precision,
                           max_batch=batch_size)
    found, metrics, wall = run_gpu_pipeline(
        clips, spec, backend, decoder_factory(device, PipelineOptions(), report, 1),
        lambda: TorchPreprocessor(spec.input, device), device, batch_size=batch_size,
        frames=frames, metrics=PipelineMetrics(registry))
    backend.close()
    return found, metrics, report


@pytest.mark.gpu
def test_gpu_pipeline_fp32_agrees_with_the_cpu_pipeline(rect_clip, rect_model, cpu_detections,
                                                        cuda):
    found, metrics, report = gpu_run([rect_clip], rect_model, cuda, "fp32")
    forward, backward = agreement(cpu_detections, found), agreement(found, cpu_detections)
    assert forward.ratio >= 0.99 and backward.ratio >= 0.99, (forward, backward)
    assert forward.max_score_diff <= 0.02, forward
    assert metrics.outcomes["clip"]["processed"] == 30 and metrics.unaccounted("clip") == 0
    assert report.choices["decode"][0] in ("nvdec", "pyav")


@pytest.mark.gpu
def test_gpu_pipeline_fp16_stays_close(rect_clip, rect_model, cpu_detections, cuda):
    found, _, _ = gpu_run([rect_clip], rect_model, cuda, "fp16")
    assert agreement(cpu_detections, found).ratio >= 0.95


@pytest.mark.gpu
def test_many_streams_account_for_every_frame_in_order(rect_clip, rect_model, cuda):
    found, metrics, _ = gpu_run([rect_clip] * 6, rect_model, cuda, "fp16", batch_size=4)
    for stream in ["clip", *(f"clip{i}" for i in range(1, 6))]:
        assert metrics.outcomes[stream]["processed"] == 30, dict(metrics.outcomes[stream])
        assert metrics.unaccounted(stream) == 0
        assert sorted(i for s, i in found if s == stream) == list(range(30))


@pytest.mark.gpu
def test_build_pipeline_runs_a_torch_model_on_the_gpu_end_to_end(rect_clip, rect_model, cuda,
                                                          cpu_detections):
    path, spec, model = rect_model
    metrics = PipelineMetrics(CollectorRegistry())
    sink = CollectSink()
    options = PipelineOptions(device=str(cuda), batch_size=8, torch_model=model,
                              precision="fp32")
    pipeline = build_pipeline([rect_clip], ["clip"], path, spec, [sink], metrics, options)
    asyncio.run(pipeline.run())
    assert agreement(cpu_detections, sink.found).ratio >= 0.99
    choices = BackendReport.for_registry(metrics.registry).choices
    assert choices["infer"][:2] == ("torch-fp32", str(cuda))
    assert choices["preprocess"][0] == "torch"  # CV-CUDA only when asked for


@pytest.mark.gpu
def test_a_shared_detector_on_the_gpu_serves_several_streams_with_every_frame_counted(
        rect_clip, rect_model, cuda, cpu_detections):
    """The service's engine (issue 23, item 4): one SharedDetector on the GPU (the model
    loaded once, double-buffered slots) fed by four streams of the clip; every frame of
    each is a result or a counted drop, and the boxes are the CPU pipeline's."""
    from pipelines.shared.detector import SharedDetector
    from pipelines.sources.file import FileSource

    path, spec, model = rect_model
    metrics = PipelineMetrics(CollectorRegistry())
    options = PipelineOptions(device=str(cuda), batch_size=8, torch_model=model,
                              precision="fp32", capacity=2)
    detector = SharedDetector.open("rect@gpu", path, spec, metrics, options)
    sinks = {f"cam{k}": CollectSink() for k in range(4)}

    async def serve() -> None:
        runner = asyncio.create_task(detector.run())
        feeds = [detector.attach(FileSource(rect_clip, sid), [sink], "block")
                 for sid, sink in sinks.items()]
        await asyncio.gather(*(feed.run() for feed in feeds))
        for sid in sinks:
            await detector.detach(sid)
        detector.close()
        await runner

    try:
        asyncio.run(serve())
    finally:
        detector.release()
    for sid, sink in sinks.items():
        assert metrics.outcomes[sid]["processed"] == 30 and metrics.unaccounted(sid) == 0
        renamed = {("clip", i): boxes for (_, i), boxes in sink.found.items()}
        assert agreement(cpu_detections, renamed).ratio >= 0.99, sid
    assert max(detector.batches) > 1  # the streams' frames were batched together


def test_the_zoo_s_checkpoint_runs_in_torch_as_its_onnx_export_does(tmp_path):
    """The zoo ships model.pt (weights and config) beside model.onnx: the GPU path finds it and
    computes what ONNX Runtime computes from the export, here on the CPU."""
    import numpy as np
    import onnxruntime as ort

    from models.tracking_data import make_tracking_clip
    from models.zoo import resolve_model
    from pipelines.preprocess.reference import reference_input
    from pipelines.sources.file import FileSource

    path, spec = resolve_model("shapes-yolo")
    backend, name = inference_backend(path, spec, torch.device("cpu"),
                                      PipelineOptions(precision="fp32"),
                                      BackendReport(CollectorRegistry()))
    assert name == "torch-fp32" and type(backend.model).__name__ == "ShapesYOLO"
    clip = make_tracking_clip(tmp_path / "clip.mp4", clip=0, frames=2, occluded=False)
    with FileSource(clip, "s") as source:
        decoder = PyAVDecoder(source.video)
        image = next(p for packet in source.packets() for p in decoder.decode(packet)).image
    tensor = reference_input(image, spec.input)[0][None]
    expected = ort.InferenceSession(str(path)).run(None, {spec.input.name: tensor})[0]
    with torch.no_grad():
        got = backend.model(torch.from_numpy(tensor)).numpy()
    assert np.abs(got - expected).max() < 1e-3
    backend.close()


@pytest.mark.gpu
def test_the_zoo_s_trained_detector_on_the_gpu_gives_the_cpu_pipeline_s_boxes(tmp_path, cuda):
    """A trained detector, not a hand-made one: shapes-yolo's checkpoint on the GPU (NVDEC,
    torch preprocessing and postprocessing, FP32) against its ONNX export in the CPU pipeline,
    on a tracking clip (textured background, moving and overlapping shapes)."""
    from models.tracking_data import make_tracking_clip
    from models.zoo import resolve_model

    path, spec = resolve_model("shapes-yolo")
    clip = make_tracking_clip(tmp_path / "clip.mp4", clip=1, frames=60, occluded=True)
    cpu = run_cpu_pipeline(clip, path, spec)
    for precision, least in (("fp32", 0.99), ("fp16", 0.97)):
        sink = CollectSink()
        metrics = PipelineMetrics(CollectorRegistry())
        options = PipelineOptions(device=str(cuda), batch_size=8, precision=precision)
        asyncio.run(build_pipeline([clip], ["clip"], path, spec, [sink], metrics,
                                   options).run())
        forward, backward = agreement(cpu, sink.found), agreement(sink.found, cpu)
        print(f"shapes-yolo {precision} GPU vs CPU: {forward}; back {backward}")
        assert forward.boxes > 100
        assert forward.ratio >= least and backward.ratio >= least, (precision, forward, backward)
