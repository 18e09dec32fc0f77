"""TensorRT engine cache: built once, reused while nothing changed, rebuilt when anything did.

The build step and the machine facts are injected here: these tests are about the cache, not
about TensorRT (``tests/gpu/test_engine_gpu.py`` builds a real engine where TensorRT exists).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.backends.device import DeviceUnavailable
from models.engine import (
    BuildEnvironment,
    BuiltEngine,
    built_precision,
    check_engine,
    ensure_engine,
    import_tensorrt,
    layer_precisions,
    record_path,
)
from pipelines.cuda import library_available

H200 = BuildEnvironment("NVIDIA H200", "11.4.0.106")


class CountingBuilder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, model: Path, precision: str, batch: int) -> BuiltEngine:
        self.calls.append((model.name, precision, batch))
        layers = {"fp32": {"FP32": 3}, "fp16": {"FP16": 5, "FP32": 1},
                  "int8": {"INT8": 4, "FP32": 2}}[precision]
        return BuiltEngine(f"engine of {model.read_bytes()!r} {precision} {batch}".encode(),
                           layers)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"graph v1")
    return path


def test_built_once_then_reused_from_the_cache(model: Path, tmp_path: Path) -> None:
    build = CountingBuilder()
    first = ensure_engine(model, "fp16", 8, tmp_path / "cache", env=H200, build=build)
    second = ensure_engine(model, "fp16", 8, tmp_path / "cache", env=H200, build=build)
    assert first.built and first.reason == "no engine in the cache"
    assert not second.built and second.reason == "cached" and second.path == first.path
    assert build.calls == [("model.onnx", "fp16", 8)]
    record = json.loads(record_path(first.path).read_text())
    assert record["gpu"] == "NVIDIA H200" and record["tensorrt"] == "11.4.0.106"
    assert record["batch"] == 8 and record["precision"] == "fp16"


@pytest.mark.parametrize("change", ["model", "gpu", "tensorrt", "batch", "precision"])
def test_any_change_gets_another_engine(model: Path, tmp_path: Path, change: str) -> None:
    build = CountingBuilder()
    first = ensure_engine(model, "fp16", 8, tmp_path, env=H200, build=build)
    env, precision, batch = H200, "fp16", 8
    if change == "model":
        model.write_bytes(b"graph v2")
    elif change == "gpu":
        env = BuildEnvironment("NVIDIA L4", H200.tensorrt)
    elif change == "tensorrt":
        env = BuildEnvironment(H200.gpu, "10.14.1")
    elif change == "batch":
        batch = 16
    else:
        precision = "int8"
    second = ensure_engine(model, precision, batch, tmp_path, env=env, build=build)
    assert second.built and second.path != first.path and len(build.calls) == 2


def test_an_engine_whose_record_disagrees_is_rebuilt_not_reused(model: Path,
                                                                tmp_path: Path) -> None:
    build = CountingBuilder()
    first = ensure_engine(model, "int8", 4, tmp_path, env=H200, build=build)
    record = json.loads(record_path(first.path).read_text())
    record["tensorrt"] = "10.13.0"  # an engine left by another TensorRT under the same name
    record_path(first.path).write_text(json.dumps(record))
    again = ensure_engine(model, "int8", 4, tmp_path, env=H200, build=build)
    assert again.built and "tensorrt '10.13.0' -> '11.4.0.106'" in again.reason
    record_path(first.path).unlink()
    third = ensure_engine(model, "int8", 4, tmp_path, env=H200, build=build)
    assert third.built and "no readable record" in third.reason and len(build.calls) == 3


def test_an_engine_beside_a_model_is_checked_against_it(model: Path, tmp_path: Path) -> None:
    built = ensure_engine(model, "fp16", 8, tmp_path / "cache", env=H200,
                          build=CountingBuilder())
    beside = model.with_suffix(".engine")
    beside.write_bytes(built.path.read_bytes())
    assert "missing" in (check_engine(beside, model, H200) or "")
    record_path(beside).write_text(record_path(built.path).read_text())
    assert check_engine(beside, model, H200) is None
    assert "NVIDIA L4" in (check_engine(beside, model, BuildEnvironment("NVIDIA L4",
                                                                        "11.4.0.106")) or "")
    model.write_bytes(b"graph v2")  # retrained: the engine beside it is stale
    assert "model_sha256" in (check_engine(beside, model, H200) or "")


@pytest.mark.parametrize("precision, batch", [("int4", 8), ("fp16", 0)])
def test_bad_precision_or_batch_is_refused(model: Path, tmp_path: Path, precision: str,
                                           batch: int) -> None:
    with pytest.raises(ValueError, match="precision|batch"):
        ensure_engine(model, precision, batch, tmp_path, env=H200, build=CountingBuilder())


@pytest.mark.skipif(library_available("tensorrt"), reason="TensorRT is installed here")
def test_without_tensorrt_building_says_what_is_missing() -> None:
    with pytest.raises(DeviceUnavailable, match="tensorrt"):
        import_tensorrt()


@pytest.mark.parametrize("requested, layers, built", [
    ("fp16", {"FP16": 40, "FP32": 3}, ("fp16", True)),
    ("fp16", {"FP32": 43}, ("fp32", True)),  # what dropping the flag alone would have built
    ("int8", {"INT8": 30, "FP32": 13}, ("int8", True)),
    ("fp32", {"FP32": 43}, ("fp32", True)),
    ("fp16", {}, ("fp16", False)),  # no layer information: as asked, unconfirmed
])
def test_the_record_names_the_precision_the_layers_say(requested, layers, built):
    assert built_precision(requested, layers) == built


def test_an_fp16_request_built_in_fp32_is_recorded_as_fp32(model: Path, tmp_path: Path):
    def fp32_only(model: Path, precision: str, batch: int) -> BuiltEngine:
        return BuiltEngine(b"engine", {"FP32": 12}, "built FP32: cannot be converted")

    result = ensure_engine(model, "fp16", 4, tmp_path, env=H200, build=fp32_only)
    record = json.loads(record_path(result.path).read_text())
    assert result.precision == "fp32" and record["precision"] == "fp16"  # asked, and built
    assert record["built"] == {"precision": "fp32", "confirmed_by_layers": True,
                               "layers": {"FP32": 12},
                               "note": "built FP32: cannot be converted"}
    again = ensure_engine(model, "fp16", 4, tmp_path, env=H200, build=fp32_only)
    assert not again.built and again.precision == "fp32"


def test_layer_precisions_read_the_engine_inspectors_json():
    info = {"Layers": [
        {"Name": "conv1", "Precision": "HALF"},
        {"Name": "conv2", "Outputs": [{"Name": "x", "Format/Datatype": "Row major linear FP16"}]},
        {"Name": "q", "Outputs": [{"Format/Datatype": "Int8 NC/32HW32"}]},
        {"Name": "head", "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
        "a name only (no detailed profiling)"]}
    assert layer_precisions(info) == {"FP16": 2, "INT8": 1, "FP32": 1}


def test_tensorrt_stubs_are_not_tensorrt(tmp_path: Path, monkeypatch) -> None:
    """Issue 23, item 2: tensorrt-stubs makes ``import tensorrt`` succeed as an empty
    package; the build and the backends must say TensorRT is missing (and fall back), not
    fail with an AttributeError."""
    import sys

    from models.engine import current_environment

    stubs = tmp_path / "site" / "tensorrt"
    stubs.mkdir(parents=True)
    (stubs / "__init__.pyi").write_text("class Builder: ...\n")
    monkeypatch.syspath_prepend(str(stubs.parent))
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    with pytest.raises(DeviceUnavailable, match="type stubs only"):
        import_tensorrt()
    with pytest.raises(DeviceUnavailable, match="type stubs only"):
        current_environment()
