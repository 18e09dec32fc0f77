"""The GPU runtimes against ONNX Runtime on the same model: TorchBackend (on the CPU here, FP32
and FP16 with CUDA graphs on a GPU) and TensorRTBackend (where TensorRT is installed)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from models.backends.device import DeviceUnavailable, batch_bucket
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.backends.torch import TorchBackend
from models.errors import ModelError
from pipelines.cuda import cuda_available, library_available
from tests.gpu.agreement import need

SHAPE = (3, 96, 128)


class SmallNet(nn.Module):
    """Conv-BN-ReLU blocks and a 1x1 head laid out as yolov8 rows: real convolution numerics."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.SiLU())
        self.head = nn.Conv2d(32, 6, 1)
        for bn in self.body:
            if isinstance(bn, nn.BatchNorm2d):
                nn.init.uniform_(bn.running_mean, -0.1, 0.1)
                nn.init.uniform_(bn.running_var, 0.5, 1.5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(images)).flatten(2).sigmoid() * 100


@pytest.fixture(scope="module")
def small_net(tmp_path_factory) -> tuple[nn.Module, Path]:
    model = SmallNet().eval()
    path = tmp_path_factory.mktemp("smallnet") / "model.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, *SHAPE),), str(path), dynamo=False,
                          opset_version=17, input_names=["images"], output_names=["output0"],
                          dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}})
    return model, path


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)


def reference(path: Path, x: np.ndarray) -> np.ndarray:
    with OnnxRuntimeBackend(path, threads=2) as ort:
        return ort.infer({"images": x})["output0"]


def test_torch_backend_on_the_cpu_agrees_with_onnx_runtime(small_net):
    model, path = small_net
    x = images(5)
    with TorchBackend(model, input_shape=SHAPE, device="cpu", max_batch=2) as backend:
        assert [i.shape for i in backend.inputs] == [(None, *SHAPE)]
        assert [(o.name, o.shape) for o in backend.outputs] == [("output0", (None, 6, 192))]
        got = backend.infer({"images": x})["output0"]  # 5 frames through batches of 2
    assert np.abs(got - reference(path, x)).max() < 1e-3


def test_a_forward_never_touches_process_wide_cudnn_settings(small_net, monkeypatch):
    """Issue 23, item 5: the cuDNN flags are process-wide; entered around each forward from
    several inference threads they raced. They are set once, when a backend is built."""
    import threading

    from models.backends.torch import fp32_exactly

    model, _ = small_net
    entered = []
    monkeypatch.setattr(torch.backends.cudnn, "flags",
                        lambda *a, **k: entered.append(threading.get_ident()))
    with TorchBackend(model, input_shape=SHAPE, device="cpu") as backend:
        backend.is_cuda = True  # the CUDA branch of a forward, on CPU tensors
        threads = [threading.Thread(target=backend._forward,
                                    args=(torch.from_numpy(images(2, seed=k)),))
                   for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert entered == []
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.benchmark)
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        fp32_exactly()
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.benchmark
    finally:
        (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
@pytest.mark.parametrize("suffix", [".ts", ".pt2"])
def test_torch_backend_loads_torchscript_and_export_files(small_net, tmp_path, suffix):
    model, path = small_net
    target = tmp_path / f"model{suffix}"
    if suffix == ".ts":
        torch.jit.trace(model, torch.zeros(1, *SHAPE)).save(str(target))
    else:
        batch = torch.export.Dim("batch", max=64)
        torch.export.save(torch.export.export(model, (torch.zeros(2, *SHAPE),),
                                              dynamic_shapes={"images": {0: batch}}),
                          str(target))
    x = images(3, seed=1)
    with TorchBackend(target, input_shape=SHAPE, device="cpu") as backend:
        got = backend.infer({"images": x})["output0"]
    assert np.abs(got - reference(path, x)).max() < 1e-3


def test_the_rectangle_detector_agrees_with_its_onnx(rect_model):
    path, spec, model = rect_model
    x = np.random.default_rng(2).random((2, 3, spec.input.height, spec.input.width),
                                        dtype=np.float32)
    x[:, :, 40:120, 60:200] = 0.95  # a bright block the detector scores
    with TorchBackend(model, input_shape=(3, 320, 320), device="cpu") as backend:
        got = backend.infer({"images": x})["output0"]
    assert np.array_equal(got, reference(path, x))


@pytest.mark.parametrize(("source", "message"), [
    ("missing.ts", "no such file"), ("model.onnx", "expected a TorchScript file")])
def test_unusable_torch_model_files_are_named(tmp_path, source, message):
    if source == "model.onnx":
        (tmp_path / source).write_bytes(b"onnx")
    with pytest.raises(ModelError, match=message):
        TorchBackend(tmp_path / source, input_shape=SHAPE, device="cpu")


def test_the_torch_backend_wants_a_cuda_device_it_can_see():
    if cuda_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
        TorchBackend(SmallNet(), input_shape=SHAPE, device="cuda:0")


def test_without_tensorrt_the_backend_names_it(tmp_path):
    if library_available("tensorrt"):
        pytest.skip("TensorRT is installed")
    from models.backends.tensorrt import TensorRTBackend

    with pytest.raises(DeviceUnavailable, match="tensorrt"):
        TensorRTBackend(tmp_path / "model.engine")


@pytest.mark.parametrize(("n", "limit", "bucket"), [(1, 32, 1), (2, 32, 2), (3, 32, 4),
                                                    (5, 32, 8), (17, 32, 32), (20, 24, 24)])
def test_partial_batches_share_a_few_graph_sizes(n, limit, bucket):
    assert batch_bucket(n, limit) == bucket


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False])
def test_torch_cuda_fp32_agrees_with_onnx_runtime(small_net, cuda, graphs):
    model, path = small_net
    x = images(7)
    with TorchBackend(model, input_shape=SHAPE, device=str(cuda), precision="fp32",
                      cuda_graphs=graphs, max_batch=4) as backend:
        got = backend.infer({"images": x})["output0"]
        again = backend.infer({"images": x})["output0"]  # replays the captured graphs
    expected = reference(path, x)
    assert np.abs(got - expected).max() < 1e-3
    assert np.array_equal(got, again)


@pytest.mark.gpu
def test_torch_cuda_fp16_stays_close(small_net, cuda):
    model, path = small_net
    x = images(4)
    with TorchBackend(model, input_shape=SHAPE, device=str(cuda), precision="fp16") as backend:
        got = backend.infer({"images": x})["output0"]
    assert np.abs(got - reference(path, x)).max() < 1.0  # outputs span 0..100


@pytest.mark.gpu
def test_two_slots_run_two_batches_at_once(small_net, cuda):
    """Double buffering: batch k+1 is written into the other slot while batch k runs."""
    model, path = small_net
    first, second = images(3, seed=3), images(2, seed=4)
    with TorchBackend(model, input_shape=SHAPE, device=str(cuda), precision="fp32",
                      max_batch=4) as backend:
        launched = []
        for x in (first, second):
            slot = backend.acquire()
            with torch.cuda.stream(slot.stream):
                slot.inputs["images"][:len(x)].copy_(torch.from_numpy(x).pin_memory(),
                                                     non_blocking=True)
            launched.append(backend.launch(slot, len(x)))
        assert launched[0].stream is not launched[1].stream
        for done, x in zip(launched, (first, second), strict=True):
            done.ready.synchronize()
            assert done.gpu_seconds() is not None
            got = done.outputs["output0"].cpu().numpy()
            assert np.abs(got - reference(path, x)).max() < 1e-3


@pytest.mark.gpu
def test_tensorrt_engine_agrees_with_onnx_runtime(small_net, cuda, tmp_path):
    need("tensorrt")
    import tensorrt as trt

    from models.backends.tensorrt import TensorRTBackend

    _, onnx_path = small_net
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), parser.get_error(0)
    config = builder.create_builder_config()
    for _ in range(2):  # one profile per execution context: double buffering
        profile = builder.create_optimization_profile()
        profile.set_shape("images", (1, *SHAPE), (4, *SHAPE), (4, *SHAPE))
        config.add_optimization_profile(profile)
    engine = tmp_path / "model.engine"
    engine.write_bytes(bytes(builder.build_serialized_network(network, config)))
    x = images(6)
    with TensorRTBackend(engine, device=str(cuda)) as backend:
        assert backend.max_batch == 4
        got = backend.infer({"images": x})["output0"]
    assert np.abs(got - reference(onnx_path, x)).max() < 1e-2  # TF32 is allowed in the build
