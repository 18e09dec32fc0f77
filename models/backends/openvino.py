"""OpenVINO on the CPU: the ONNX file read directly (no conversion step), FP32 or INT8 (QDQ).

OpenVINO is optional (``pip install vidpipe[openvino]``) and imported only when this backend
is opened. Two of its CPU defaults change what vidpipe computes or how it shares the cores, so
they are set here rather than left to the plugin:

- ``INFERENCE_PRECISION_HINT=f32``: on a CPU with bfloat16 support (AVX-512 BF16, AMX) the
  plugin otherwise runs an FP32 model in bfloat16, which moves its outputs (0.69 on
  shapes-yolo's scores and boxes here, against 5e-5 in f32; docs/BENCHMARKS.md). Fidelity
  first: the model's own precision. ``precision="bf16"`` asks for bfloat16 (``--runtime
  openvino-bf16``): much faster on AMX, never chosen for the user, its cost measured by
  ``vidpipe model check --runtime openvino-bf16``.
- ``ENABLE_CPU_PINNING=False``: pinned inference threads fight the decoder threads the thread
  plan keeps cores for.

An INT8 QDQ model is run as OpenVINO reads it: its low-precision transformations fold each
QuantizeLinear/DequantizeLinear pair into int8 kernels, with their own rounding, so its outputs
differ from ONNX Runtime's INT8 ones more than FP32 outputs do: whether the detections still
agree is measured (``vidpipe model check --runtime openvino``), not assumed.

``threads`` is the inference threads per call and ``streams`` the calls at once (the thread
plan's ``infer`` and ``infer_workers``): OpenVINO runs ``streams`` CPU streams of ``threads``
threads each, and ``infer`` may be called from that many threads, each with its own request.
Compiled models are kept in OpenVINO's cache, under vidpipe's (``models.cache``): a repeat run
loads the compiled blob instead of compiling the model again.
"""

from __future__ import annotations

import os
import queue
from pathlib import Path
from typing import Any

import numpy as np

from models.backends.base import GraphPorts, TensorInfo
from models.cache import cache_dir
from models.errors import ModelError

PRECISIONS = ("f32", "bf16")


class OpenVinoUnavailable(ModelError):
    """OpenVINO is not installed."""


class OpenVinoLoadError(ModelError):
    """The file is not a model OpenVINO can read and compile."""


def openvino_version() -> str | None:
    """The installed OpenVINO's version, or None when it is not installed (read from the
    package's metadata: importing OpenVINO itself takes a while)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openvino")
    except PackageNotFoundError:
        return None


class OpenVinoBackend(GraphPorts):
    """An ONNX model compiled by OpenVINO for the CPU."""

    def __init__(self, path: str | Path, *, threads: int = 0, streams: int = 1,
                 precision: str = "f32") -> None:
        if threads < 0 or streams < 1:
            raise ValueError(f"threads must be >= 0 and streams >= 1, got {threads}, {streams}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision}")
        try:
            import openvino as ov
        except ImportError as e:
            raise OpenVinoUnavailable("OpenVINO is not installed: pip install "
                                      "'vidpipe[openvino]'") from e
        self.path = Path(path)
        self.threads = threads
        self.streams = streams
        config: dict[str, Any] = {
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": streams,
            "INFERENCE_PRECISION_HINT": precision, "ENABLE_CPU_PINNING": False,
        }
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads * streams
        blobs = _compiled_cache()
        if blobs is not None:  # a model compiled once loads from its blob after
            config["CACHE_DIR"] = str(blobs)
        try:
            self._compiled: Any = ov.Core().compile_model(str(self.path), "CPU", config)
        except Exception as e:  # OpenVINO raises RuntimeError with its own text for bad files
            raise OpenVinoLoadError(f"{self.path}: not a model OpenVINO can load "
                                    f"({str(e).strip().splitlines()[0][:160]})") from e
        self._inputs = [_info(port) for port in self._compiled.inputs]
        self._outputs = [_info(port) for port in self._compiled.outputs]
        self._output_ports = list(self._compiled.outputs)
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    @property
    def precision(self) -> str:
        """The precision the plugin runs in: the one asked for, or ``f32`` where the CPU has
        no bfloat16 and the plugin fell back."""
        return str(self._compiled.get_property("INFERENCE_PRECISION_HINT").to_string())

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._compiled is None:
            raise RuntimeError(f"backend for {self.path} is closed")
        try:  # a request per concurrent caller: an infer request is not thread-safe
            request = self._requests.get_nowait()
        except queue.Empty:
            request = self._compiled.create_infer_request()
        try:
            # outputs copied out of the request (share_outputs is off by default): the
            # request goes back to the pool and its next call would overwrite them
            results = request.infer(feeds)
            return {info.name: np.asarray(results[port])
                    for info, port in zip(self._outputs, self._output_ports, strict=True)}
        finally:
            self._requests.put(request)

    def close(self) -> None:
        self._compiled = None
        self._requests = queue.SimpleQueue()

    def __enter__(self) -> OpenVinoBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _compiled_cache() -> Path | None:
    """OpenVINO's cache of compiled models, in vidpipe's (``models.cache``), where it can be
    written; None elsewhere (each run compiles again)."""
    folder = cache_dir() / "openvino"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _info(port: Any) -> TensorInfo:
    shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
    return TensorInfo(port.get_any_name(), shape, port.get_element_type().to_dtype().name)
