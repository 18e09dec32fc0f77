"""The backend registry and the one builder: the device chooses backends, never the stages."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from models.backends.torch import TorchBackend
from models.zoo import resolve_model
from pipelines.backends import StageBackends, host_backends
from pipelines.build import build_pipeline, wire_pipeline
from pipelines.errors import ConfigError
from pipelines.gpu_metrics import BackendReport
from pipelines.infer.device import DeviceRuntime
from pipelines.infer.stage import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.plan import RunPlan
from pipelines.postprocess.gpu import TorchPostprocessor
from pipelines.preprocess.torch_cuda import TorchPreprocessor
from pipelines.threads import ThreadPlan
from tests.support.fakes import FAKE_SPEC, FakeBackend, FakeDecoder, FakeSource, ListSink


class _LiveSource(FakeSource):
    live = True


class _Doubler(torch.nn.Module):
    """An ssd-format model for the fake spec: one fixed box per image, in torch."""

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        n = images.shape[0]
        box = torch.tensor([[[0.25, 0.25, 0.75, 0.75]]]).expand(n, 1, 4)
        return {"boxes": box, "scores": torch.full((n, 1), 0.9), "classes": torch.zeros(n, 1)}


def _device_backends() -> StageBackends:
    """The GPU backends (torch preprocessing, the slot runtime, torch postprocessing), on the
    CPU: the same stage code runs with them."""
    backend = TorchBackend(_Doubler(), input_shape=(32, 32, 3), input_name="image",
                           input_dtype="uint8", device="cpu", max_batch=4,
                           precision="fp32")
    return StageBackends(lambda s: FakeDecoder(), lambda: TorchPreprocessor(FAKE_SPEC.input,
                                                                           "cpu"),
                         DeviceRuntime(backend, "image", name="torch-fp32", device="cpu"),
                         TorchPostprocessor(FAKE_SPEC, torch.device("cpu")), backend.inputs[0],
                         RunPlan(ThreadPlan(1, 1, "given")))


@pytest.mark.parametrize("make", [_device_backends,
                                  lambda: host_backends(lambda s: FakeDecoder(), FakeBackend(),
                                                        FAKE_SPEC)],
                         ids=["gpu backends", "cpu backends"])
def test_every_device_gets_the_same_stages_and_rules(make):
    # live sources keep the newest frame at inference, and channels carry the pipeline's name,
    # whichever backends the stages run on
    metrics = PipelineMetrics()
    sink = ListSink()
    pipeline = wire_pipeline([_LiveSource("cam", 12)], make(), FAKE_SPEC, [sink], metrics,
                             PipelineOptions(name="cam"), 4)
    assert [type(s).__name__ for s in pipeline.stages] == [
        "DecodeStage", "InferStage", "PostprocessStage", "SinkStage"]
    decoded = pipeline.channels[0]
    assert decoded.name == "cam/decoded" and decoded.policy("cam") == "drop_oldest"
    infer = next(s for s in pipeline.stages if isinstance(s, InferStage))
    assert infer.queued == 0  # a camera's batch is taken at the last moment
    asyncio.run(pipeline.run())
    done = metrics.outcomes["cam"]
    assert sum(done.values()) == metrics.received["cam"] == 12, dict(done)
    assert all(len(r.detections) == 1 for r in sink.results)
    assert np.allclose(sink.results[0].detections.xyxy, [[16, 8, 48, 40]])  # source pixels


def test_a_gpu_backend_on_the_cpu_is_refused_in_one_line(small_clip):
    path, spec = resolve_model("shapes-yolo")
    for stage, choice in (("decode", "nvdec"), ("preprocess", "cvcuda"), ("runtime", "tensorrt")):
        with pytest.raises(ConfigError, match=f"{stage} backend {choice} needs a CUDA device"):
            build_pipeline([small_clip], ["clip"], path, spec, [ListSink()], PipelineMetrics(),
                           PipelineOptions(**{stage: choice}))


def test_the_cpu_build_reports_its_backends(small_clip):
    path, spec = resolve_model("shapes-yolo")
    metrics = PipelineMetrics(CollectorRegistry())
    pipeline = build_pipeline([small_clip], ["clip"], path, spec, [ListSink()], metrics,
                              PipelineOptions(frame_limit=2))
    asyncio.run(pipeline.run())
    choices = BackendReport.for_registry(metrics.registry).choices
    runtime = pipeline.plan.runtime.runtime  # auto: OpenVINO where installed and faster
    assert runtime in ("onnxruntime", "openvino")
    assert choices == {"decode": ("pyav", "cpu", ""), "preprocess": ("opencv", "cpu", ""),
                       "infer": (runtime, "cpu", ""), "postprocess": ("numpy", "cpu", "")}


@pytest.mark.parametrize(("values", "message"), [
    ({"decode": "ffmpeg"}, "decode: Input should be 'auto', 'pyav' or 'nvdec'"),
    ({"batch_size": 0}, "batch size: Input should be greater than or equal to 1"),
    ({"workers": 2}, "workers: Extra inputs are not permitted"),
])
def test_bad_options_are_one_line_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        PipelineOptions(**values)


def test_a_torch_backend_leaves_the_caller_s_module_as_it_was():
    """Moving a module to its device and to FP16 happens in place: the backend works on a copy,
    so a second backend (FP32 after FP16, as the GPU tests build them) gets the weights the
    caller gave."""
    given = torch.nn.Conv2d(3, 4, 3)
    weights = given.weight.detach().clone()
    backend = TorchBackend(given, input_shape=(3, 8, 8), device="cpu", max_batch=2,
                           precision="fp32")
    assert backend.model is not given
    with torch.no_grad():
        backend.model.weight.zero_()
    assert torch.equal(given.weight, weights)
