"""ONNX Runtime on the CPU: FP32 or INT8 (QDQ) models."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort

from models.backends.base import GraphPorts, TensorInfo
from models.errors import ModelError

log = logging.getLogger(__name__)

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(uint8)": "uint8",
    "tensor(int8)": "int8", "tensor(int32)": "int32", "tensor(int64)": "int64",
    "tensor(double)": "float64", "tensor(bool)": "bool",
}


class ModelLoadError(ModelError):
    """The file is not an ONNX model ONNX Runtime can load."""


class OnnxRuntimeBackend(GraphPorts):
    """An ONNX model in an ONNX Runtime session.

    ``threads`` is the intra-op thread count (0 lets ONNX Runtime use every core); the
    pipeline chooses it from the cores it has, since decode threads compete for the same cores.
    """

    def __init__(self, path: str | Path, *, threads: int = 0) -> None:
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        self.path = Path(path)
        self.threads = threads
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: ORT's warnings are about its own graph
        # Spinning intra-op threads would steal the cores that decoding needs between calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # A batch holds whatever frames wait, so the input's shape changes from call to
        # call; ONNX Runtime would plan and keep a block of memory for each shape it sees
        # (the service's detector at 4 cameras: ~40 MB; docs/BENCHMARKS.md).
        options.enable_mem_pattern = False
        try:
            self._session: ort.InferenceSession | None = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own untyped errors for bad files
            raise ModelLoadError(f"{self.path}: not an ONNX model ONNX Runtime can load "
                                 f"({str(e).splitlines()[0][:160]})") from e
        self._inputs = [_info(i) for i in self._session.get_inputs()]
        self._outputs = [_info(o) for o in self._session.get_outputs()]
        self._output_names = [o.name for o in self._outputs]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            raise RuntimeError(f"backend for {self.path} is closed")
        values = self._session.run(self._output_names, feeds)
        return dict(zip(self._output_names, values, strict=True))

    def close(self) -> None:
        self._session = None

    def __enter__(self) -> OnnxRuntimeBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _info(node: ort.NodeArg) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) and d > 0 else None for d in (node.shape or ()))
    return TensorInfo(node.name, shape, _ORT_TYPES.get(node.type, node.type))
