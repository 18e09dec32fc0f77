"""pipelines.cuda: device strings, lazy imports, the event hand-off and pinned staging."""

from __future__ import annotations

import logging
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pipelines.cuda import (
    DeviceSpec,
    PinnedStaging,
    cuda_available,
    distinct_events,
    import_gpu_library,
    library_available,
    log_fallback_once,
    new_stream,
    parse_device,
    record_ready,
    require_cuda,
    wait_ready,
)
from pipelines.errors import DeviceError

GPU_MODULES = ["pipelines.cuda", "pipelines.decode.nvdec", "pipelines.preprocess.cvcuda",
               "pipelines.preprocess.torch_cuda", "pipelines.postprocess.gpu",
               "pipelines.gpu_metrics", "pipelines.backends", "pipelines.backends.gpu",
               "pipelines.infer.device",
               "models.backends.tensorrt",
               "models.backends.torch"]
GPU_LIBRARIES = ["tensorrt", "cvcuda", "PyNvVideoCodec", "pynvml"]


@pytest.mark.parametrize(("text", "expected"), [
    ("cpu", DeviceSpec("cpu")), ("CPU", DeviceSpec("cpu")), ("cuda", DeviceSpec("cuda", 0)),
    ("cuda:0", DeviceSpec("cuda", 0)), ("cuda:3", DeviceSpec("cuda", 3)),
    (" cuda:1 ", DeviceSpec("cuda", 1)),
])
def test_device_strings_parse(text, expected):
    assert parse_device(text) == expected
    assert str(parse_device(text)) in ("cpu", f"cuda:{expected.index}")


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "cuda0", "", "mps"])
def test_unknown_device_strings_name_the_allowed_ones(text):
    with pytest.raises(DeviceError, match="expected 'cpu', 'cuda' or 'cuda:N'"):
        parse_device(text)


def test_torch_device_of_a_spec():
    assert parse_device("cuda:2").torch_device == torch.device("cuda", 2)
    assert parse_device("cpu").torch_device == torch.device("cpu")


def test_require_cuda_says_why_not_on_a_machine_without_cuda():
    if cuda_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceError, match="cuda:0"):
        require_cuda("cuda:0")


def test_require_cuda_refuses_the_cpu():
    with pytest.raises(DeviceError, match="not a CUDA device"):
        require_cuda("cpu")


def test_a_missing_library_is_named_with_its_package():
    with pytest.raises(DeviceError, match=r"NVDEC decoding needs the Python package "
                                          r"no-such-pkg \(module vidpipe_no_such_module\)"):
        import_gpu_library("vidpipe_no_such_module", "no-such-pkg", "NVDEC decoding")
    assert not library_available("vidpipe_no_such_module")
    assert library_available("numpy")


def test_gpu_modules_import_without_gpu_libraries():
    """Importing every GPU module loads none of the GPU libraries (a clean interpreter)."""
    code = (f"import sys\nfor m in {GPU_MODULES!r}: __import__(m)\n"
            f"print([m for m in {GPU_LIBRARIES!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_fallback_is_logged_once(caplog):
    with caplog.at_level(logging.WARNING, logger="pipelines.cuda"):
        assert log_fallback_once("decode-test", "NVDEC not used (reason)")
        assert not log_fallback_once("decode-test", "NVDEC not used (reason)")
        assert log_fallback_once("decode-test", "another reason")
    assert [r.getMessage() for r in caplog.records] == [
        "decode-test: NVDEC not used (reason)", "decode-test: another reason"]


def test_distinct_events_keep_order_and_skip_none():
    a, b = object(), object()
    frames = [SimpleNamespace(ready=a), SimpleNamespace(ready=None), SimpleNamespace(ready=a),
              SimpleNamespace(ready=b)]
    assert distinct_events(frames) == [a, b]


@pytest.mark.gpu
def test_the_consumer_stream_waits_for_the_producer_event(cuda):
    """A consumer on another stream reads what the producer wrote, with no host wait."""
    producer, consumer = new_stream(cuda), new_stream(cuda)
    with torch.cuda.stream(producer):
        big = torch.randn(4096, 4096, device=cuda)
        for _ in range(8):  # keep the producer busy so a missing wait would show
            big = big @ big / 4096
        value = torch.full((1024,), 7.0, device=cuda) + big[0, 0] * 0
    ready = record_ready(producer)
    with torch.cuda.stream(consumer):
        wait_ready(consumer, [ready], [value])
        doubled = value * 2
    consumer.synchronize()
    assert torch.all(doubled == 14.0)


@pytest.mark.gpu
def test_pinned_staging_uploads_on_the_stream(cuda):
    staging = PinnedStaging(cuda)
    stream = new_stream(cuda)
    images = [np.random.default_rng(i).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
              for i in range(6)]
    uploaded = [staging.upload(image, stream) for image in images]
    stream.synchronize()
    for image, tensor in zip(images, uploaded, strict=True):
        assert tensor.is_cuda and np.array_equal(tensor.cpu().numpy(), image)
    staging.close()
