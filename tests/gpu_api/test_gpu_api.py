"""Issue 23, item 2: every use of a GPU library in vidpipe's code, collected from the code,
against the real libraries' API (``manifest.json``, which ``make gpu-api`` reads from the
pinned wheels over stand-in driver libraries). No GPU and no wheel needed here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.gpu_api.conformance import MANIFEST, ROOT, check, load
from tests.gpu_api.full_check import MODULES, PACKAGES
from tests.gpu_api.uses import collect


@pytest.fixture(scope="module")
def surface():
    return load()


def tree_with(tmp_path: Path, source: str) -> Path:
    """A tree holding one GPU module, ``models/gpu.py``."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gpu.py").write_text(source)
    return tmp_path


def test_every_use_in_the_code_exists_in_the_pinned_libraries(surface):
    collected = collect(ROOT, surface)
    problems = check(collected, surface)
    counts = {lib: sum(1 for u in collected.uses if u.library == lib) for lib in MODULES}
    print(f"{len(collected.uses)} uses checked: {counts}")
    assert problems == []
    assert len(collected.uses) >= 60 and all(counts.values()), counts
    assert {"models/engine.py", "models/backends/tensorrt.py", "pipelines/decode/nvdec.py",
            "pipelines/preprocess/cvcuda.py", "pipelines/gpu_metrics.py"} <= set(collected.files)


def test_the_builder_flags_tensorrt_11_removed_are_caught(surface, tmp_path):
    """What models/engine.py did before: both flags are gone in TensorRT 11."""
    old = tree_with(tmp_path, '''
def build(model):
    trt = import_tensorrt()
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    network = builder.create_network(0)
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.FP16)
    config.set_flag(trt.BuilderFlag.INT8)
    return builder.build_serialized_network(network, config)
''')
    problems = check(collect(old, surface), surface)
    assert [(u.path, u.where) for u, _ in problems] == [
        ("BuilderFlag.FP16", "models/gpu.py:7"), ("BuilderFlag.INT8", "models/gpu.py:8")]
    assert all("has no" in why for _, why in problems)


def test_unknown_keywords_too_many_arguments_and_methods_of_returned_objects_are_caught(
        surface, tmp_path):
    bad = tree_with(tmp_path, '''
def run(frame):
    cv = import_gpu_library("cvcuda", "cvcuda-cu12", "CV-CUDA")
    cv.resize_into(1, 2, 3, stream=4, interpolation=5)
    trt = import_tensorrt()
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(b"")
    engine.execute_async_v2(0)
    nvml = import_gpu_library("pynvml", "nvidia-ml-py", "NVML")
    nvml.nvmlDeviceGetHandleByUUID("GPU-1", 2)
''')
    problems = {u.path: why for u, why in check(collect(bad, surface), surface)}
    assert "interpolation" in problems["resize_into"]
    assert "has no 'execute_async_v2'" in problems["ICudaEngine.execute_async_v2"]
    assert "takes 1 positional" in problems["nvmlDeviceGetHandleByUUID"]


def test_the_manifest_is_of_the_pinned_versions_the_gpu_image_installs():
    manifest = json.loads(MANIFEST.read_text())
    assert manifest["packages"] == list(PACKAGES)
    pins = dict(p.split("==") for p in PACKAGES)
    versions = {"tensorrt": pins["tensorrt-cu12"], "PyNvVideoCodec": pins["pynvvideocodec"],
                "cvcuda": pins["cvcuda-cu12"], "pynvml": pins["nvidia-ml-py"]}
    assert {k: v["version"] for k, v in manifest["libraries"].items()} == versions
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    for package in ("tensorrt-cu12", "pynvvideocodec", "cvcuda-cu12", "nvidia-ml-py"):
        found = re.search(rf"{package}==([\w.]+)", dockerfile)
        assert found and found.group(1) == pins[package], package
