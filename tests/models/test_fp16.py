"""FP16 models for TensorRT 11's strongly typed FP16 engines (issue 23, item 1): converted
with their inputs and outputs kept FP32, close to the FP32 model on a photograph; a model
the converter cannot type consistently is refused with the reason, never half converted."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models.errors import ModelError
from models.fp16 import to_fp16
from models.zoo import resolve_model
from pipelines.preprocess.reference import reference_input
from pipelines.synthetic.photos import natural_picture


def session(data) -> ort.InferenceSession:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def test_a_converted_model_keeps_fp32_io_and_gives_the_fp32_model_s_outputs():
    path, spec = resolve_model("shapes-yolo")
    converted = to_fp16(path)
    graph = onnx.load_from_string(converted)
    io = [v.type.tensor_type.elem_type for v in [*graph.graph.input, *graph.graph.output]]
    assert set(io) == {onnx.TensorProto.FLOAT}
    weights = [i.data_type for i in graph.graph.initializer]
    assert weights.count(onnx.TensorProto.FLOAT16) > 0.9 * len(weights)
    picture = natural_picture((640, 384), seed=3)
    x = reference_input(picture, spec.input)[0][None]
    name = session(str(path)).get_inputs()[0].name
    full = session(str(path)).run(None, {name: x})[0]
    half = session(converted).run(None, {name: x})[0]
    assert half.dtype == np.float32
    scale = float(np.abs(full).max())
    assert float(np.abs(full - half).max()) <= 0.01 * scale


def test_a_model_the_converter_cannot_type_is_refused_with_the_reason():
    path, _ = resolve_model("ssdlite-person")  # NMS in a Loop: its subgraph stays FP32
    with pytest.raises(ModelError, match="cannot be converted to FP16: .*Type"):
        to_fp16(path)


class FakeTensorRT:
    """The names build_serialized takes from tensorrt, recording what it asks for."""

    def __init__(self) -> None:
        self.flags: list[int] = []
        self.parsed: list[bytes] = []
        fake = self

        class Network:
            num_inputs = 1

            def get_input(self, i):
                return type("T", (), {"name": "images", "shape": (-1, 3, 320, 320)})()

        class Parser:
            num_errors = 0

            def __init__(self, network, logger):
                pass

            def parse(self, data):
                fake.parsed.append(data)
                return True

        class Config:
            def set_memory_pool_limit(self, pool, size):
                pass

            def add_optimization_profile(self, profile):
                pass

        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags):
                fake.flags.append(flags)
                return Network()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return type("P", (), {"set_shape": lambda *a: None})()

            def build_serialized_network(self, network, config):
                return b"engine"

        self.Builder, self.OnnxParser = Builder, Parser
        self.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda s, level: None})
        self.NetworkDefinitionCreationFlag = type("F", (), {"STRONGLY_TYPED": 1})
        self.MemoryPoolType = type("M", (), {"WORKSPACE": 0})
        self.ProfilingVerbosity = type("V", (), {"DETAILED": 2})
        self.LayerInformationFormat = type("L", (), {"JSON": 1})
        self.Runtime = lambda logger: (_ for _ in ()).throw(RuntimeError("no GPU here"))


@pytest.mark.parametrize("precision, converted", [("fp16", True), ("int8", False),
                                                  ("fp32", False)])
def test_engines_are_strongly_typed_and_fp16_ones_built_from_the_fp16_model(
        monkeypatch, precision, converted):
    import models.engine as engine

    trt = FakeTensorRT()
    monkeypatch.setattr(engine, "import_tensorrt", lambda: trt)
    path, _ = resolve_model("shapes-yolo")
    built = engine.build_serialized(path, precision, 4)
    assert trt.flags == [1 << 1]  # STRONGLY_TYPED, nothing else
    assert (trt.parsed[0] != path.read_bytes()) == converted
    assert built.data == b"engine" and built.layers == {}  # no layer information: unconfirmed
