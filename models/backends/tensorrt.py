"""TensorRTBackend: a serialized TensorRT engine (INT8 / FP16 / FP32), run on the stage's stream.

TensorRT 11 API (10 the same), as its Python reference describes it: ``trt.Runtime(logger)
.deserialize_cuda_engine(bytes)`` loads the engine; I/O tensors are found by name
(``num_io_tensors``, ``get_tensor_name``, ``get_tensor_mode``, ``get_tensor_dtype``,
``get_tensor_shape``); each execution context gets its input shapes with ``set_input_shape``,
every I/O address with ``set_tensor_address``, and runs with ``execute_async_v3(stream)``,
which only enqueues.

Double buffering, as TorchBackend (same ``acquire`` / ``launch`` contract): two slots, each an
execution context with its own CUDA stream and its own preallocated input buffers, so batch
k+1 is copied into one slot while batch k runs in the other. Outputs are fresh tensors from
torch's caching allocator, bound per launch (binding is cheap), so a batch's outputs stay valid
however long the postprocess stage takes. An engine with dynamic shapes needs one optimization
profile per context that runs concurrently (TensorRT's rule); with fewer profiles the backend
runs one context and says so. ``infer`` (host arrays in and out) copies through pinned memory
with non-blocking copies and waits once, where the results leave the GPU.

Memory and streams are torch's: TensorRT and torch share the device's primary CUDA context.

UNVERIFIED: no GPU it was tried on had TensorRT, so this module has not run; every
name it takes from TensorRT is checked against the real 11.4 bindings (``tests/gpu_api``), and
its test skips where ``tensorrt`` is missing.
"""

from __future__ import annotations

import importlib
import itertools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.backends.base import TensorInfo
from models.backends.device import (
    DeviceOutputs,
    DeviceSlot,
    DeviceUnavailable,
    cuda_device,
    timing_event,
)
from models.errors import ModelError

log = logging.getLogger(__name__)


def import_tensorrt() -> Any:
    """The ``tensorrt`` module, or DeviceUnavailable naming the package to install. A
    ``tensorrt`` without TensorRT in it (``tensorrt-stubs``: type stubs only, which import
    as an empty package) is not TensorRT either."""
    try:
        module = importlib.import_module("tensorrt")
    except ImportError as e:
        raise DeviceUnavailable(
            "the TensorRT backend needs the Python package tensorrt (pip install "
            f"tensorrt-cu12 or tensorrt-cu13), which cannot be imported ({e})") from e
    if not hasattr(module, "Builder") or not hasattr(module, "__version__"):
        where = ", ".join(getattr(module, "__path__", [])) or "?"
        raise DeviceUnavailable(
            f"the tensorrt package at {where} holds no TensorRT (type stubs only, as "
            "tensorrt-stubs installs): pip install tensorrt-cu12 or tensorrt-cu13")
    return module


class TensorRTBackend:
    """A TensorRT engine behind the Backend protocol, plus the device-side acquire/launch."""

    def __init__(self, engine_path: str | Path, *, device: str = "cuda:0", slots: int = 2,
                 max_batch: int | None = None) -> None:
        self.path = Path(engine_path)
        trt = import_tensorrt()
        self.device = cuda_device(device)
        if not self.path.is_file():
            raise ModelError(f"TensorRT engine {self.path}: no such file")
        self._trt = trt
        self._logger = trt.Logger(trt.Logger.WARNING)
        with torch.cuda.device(self.device):
            torch.cuda.init()  # the primary context TensorRT will run in
            self._runtime = trt.Runtime(self._logger)
            self.engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
        if self.engine is None:
            raise ModelError(f"TensorRT engine {self.path}: cannot be deserialized (built by "
                             f"another TensorRT version or for another GPU?)")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._input_names = [n for n in names if is_input[n]]
        self._output_names = [n for n in names if not is_input[n]]
        self._dtypes = {n: _torch_dtype(trt.nptype(self.engine.get_tensor_dtype(n)))
                        for n in names}
        self._shapes = {n: tuple(int(d) for d in self.engine.get_tensor_shape(n)) for n in names}
        self._dynamic = any(d < 0 for n in self._input_names for d in self._shapes[n])
        self.max_batch = self._batch_limit(max_batch)
        self._slots = [self._slot(i) for i in range(self._usable_slots(slots))]
        self._turn = itertools.cycle(range(len(self._slots)))

    # -- Backend protocol ---------------------------------------------------------------------
    @property
    def inputs(self) -> list[TensorInfo]:
        return [self._info(n) for n in self._input_names]

    @property
    def outputs(self) -> list[TensorInfo]:
        return [self._info(n) for n in self._output_names]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = set(self._input_names) - set(feeds)
        if missing:
            raise ModelError(f"feeds lack the engine's inputs {sorted(missing)}")
        n = len(next(iter(feeds.values())))
        results: dict[str, list[np.ndarray]] = {}
        for start in range(0, n, self.max_batch):
            stop = min(n, start + self.max_batch)
            slot = self.acquire()
            with torch.cuda.stream(slot.stream):
                for name in self._input_names:
                    part = torch.from_numpy(np.ascontiguousarray(feeds[name][start:stop]))
                    slot.inputs[name][:stop - start].copy_(part.pin_memory(), non_blocking=True)
            done = self.launch(slot, stop - start)
            with torch.cuda.stream(slot.stream):
                host = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True)
                        for k, v in done.outputs.items()}
                for k, v in done.outputs.items():
                    host[k].copy_(v, non_blocking=True)
            slot.stream.synchronize()
            for k, v in host.items():
                results.setdefault(k, []).append(v.numpy().copy())
        return {k: np.concatenate(parts) for k, parts in results.items()}

    def close(self) -> None:
        """Wait for the work in flight, then release contexts and engine. Idempotent."""
        for slot in self._slots:
            slot.stream.synchronize()
            slot.state.clear()
        self._slots = []
        self.engine = None

    def __enter__(self) -> TensorRTBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- device side --------------------------------------------------------------------------
    def acquire(self) -> DeviceSlot:
        """The next slot (round robin): fill ``slot.inputs`` on ``slot.stream``."""
        if not self._slots:
            raise RuntimeError(f"TensorRT backend for {self.path} is closed")
        return self._slots[next(self._turn)]

    def launch(self, slot: DeviceSlot, batch_size: int) -> DeviceOutputs:
        """Enqueue the engine on the first ``batch_size`` rows of the slot's input buffers."""
        if not 1 <= batch_size <= self.max_batch:
            raise ModelError(f"batch of {batch_size}; engine {self.path.name} takes "
                             f"1..{self.max_batch}")
        context = slot.state["context"]
        # a static engine always runs its full batch; the rows past batch_size are ignored
        rows = batch_size if self._dynamic else self.max_batch
        started = timing_event(slot.stream)
        with torch.cuda.stream(slot.stream):
            for name in self._input_names:
                view = slot.inputs[name][:rows]
                if not context.set_input_shape(name, tuple(view.shape)):
                    raise ModelError(f"engine {self.path.name} rejects input {name!r} of shape "
                                     f"{tuple(view.shape)}")
                context.set_tensor_address(name, view.data_ptr())
            outputs = {}
            for name in self._output_names:
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
                out = torch.empty(shape, dtype=self._dtypes[name], device=self.device)
                context.set_tensor_address(name, out.data_ptr())
                outputs[name] = out
            if not context.execute_async_v3(slot.stream.cuda_stream):
                raise ModelError(f"engine {self.path.name}: execute_async_v3 failed to enqueue")
            named = {k: v[:batch_size].float() for k, v in outputs.items()}
        return DeviceOutputs(named, timing_event(slot.stream), slot.stream, started)

    # -- set-up -------------------------------------------------------------------------------
    def _batch_limit(self, wanted: int | None) -> int:
        """The most rows a launch takes: the static batch, or the profile's max batch."""
        name = self._input_names[0]
        if self._dynamic:
            _, _, largest = self.engine.get_tensor_profile_shape(name, 0)
            limit = int(largest[0])
        else:
            limit = self._shapes[name][0]
        return min(limit, wanted) if wanted is not None and self._dynamic else limit

    def _usable_slots(self, wanted: int) -> int:
        profiles = int(self.engine.num_optimization_profiles)
        if self._dynamic and profiles < wanted:
            log.warning("%s has %d optimization profile(s) for dynamic shapes; TensorRT runs "
                        "one context per profile at a time, so no double buffering (build the "
                        "engine with %d identical profiles for it)", self.path.name, profiles,
                        wanted)
            return max(1, profiles)
        return wanted

    def _slot(self, index: int) -> DeviceSlot:
        stream = torch.cuda.Stream(device=self.device)
        context = self.engine.create_execution_context()
        if context is None:
            raise ModelError(f"engine {self.path.name}: cannot create an execution context "
                             "(out of GPU memory?)")
        if self._dynamic and int(self.engine.num_optimization_profiles) > 1:
            context.set_optimization_profile_async(index, stream.cuda_stream)
        inputs = {}
        for name in self._input_names:
            shape = (self.max_batch, *(max(d, 1) for d in self._shapes[name][1:]))
            if any(d < 0 for d in self._shapes[name][1:]):
                _, _, largest = self.engine.get_tensor_profile_shape(name, 0)
                shape = (self.max_batch, *(int(d) for d in largest[1:]))
            inputs[name] = torch.zeros(shape, dtype=self._dtypes[name], device=self.device)
        return DeviceSlot(index, stream, inputs, {"context": context})

    def _info(self, name: str) -> TensorInfo:
        dims = self._shapes[name]
        shape = tuple(None if d < 0 else d for d in dims)
        return TensorInfo(name, shape, str(self._dtypes[name]).removeprefix("torch."))


def _torch_dtype(numpy_type: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype=numpy_type)).dtype
