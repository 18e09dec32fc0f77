"""The runtime protocol the inference stage calls, and its host implementation.

A Runtime runs one call's batches on the inference worker: it joins them and runs the model.
``HostRuntime`` wraps a host backend (ONNX Runtime: numpy in, numpy out); the GPU one
(``pipelines.infer.device.DeviceRuntime``) gathers the batches into a preallocated device
buffer and only enqueues the model.
"""

from __future__ import annotations

from typing import Protocol

from models.backends.base import Backend, TensorInfo
from pipelines.frame import Batch, host_array


class Runtime(Protocol):
    """A loaded model behind the inference stage. ``name`` and ``device`` say what it is
    (for ``vidpipe_backend_info``); ``timed_on_device``: its work time is read from device
    events once the outputs are ready (postprocessing records it), not from the host call,
    which only enqueues."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def timed_on_device(self) -> bool: ...

    @property
    def max_batch(self) -> int | None:
        """The most frames one call takes (None: the graph's limit alone)."""
        ...

    @property
    def inputs(self) -> list[TensorInfo]: ...

    @property
    def outputs(self) -> list[TensorInfo]: ...

    def infer(self, batches: list[Batch]) -> Batch: ...

    def close(self) -> None: ...


class BackendRuntime:
    """What every Runtime built on a ``models.backends`` backend shares: names, graph tensors,
    closing."""

    timed_on_device = False
    max_batch: int | None = None

    def __init__(self, backend: Backend, input_name: str, *, name: str, device: str) -> None:
        self.backend = backend
        self.input_name = input_name
        self.name = name
        self.device = device

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.backend.inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self.backend.outputs

    def close(self) -> None:
        self.backend.close()


class HostRuntime(BackendRuntime):
    """A host backend (ONNX Runtime) as a Runtime: the batches are joined with numpy on the
    worker thread (the copy of the join is work, not something for the event loop to do
    between hand-overs) and run at once. ``run`` may be called from several threads."""

    def __init__(self, backend: Backend, input_name: str, *, name: str = "onnxruntime",
                 device: str = "cpu") -> None:
        super().__init__(backend, input_name, name=name, device=device)

    def infer(self, batches: list[Batch]) -> Batch:
        batch = Batch.concat(batches)
        tensor = host_array(batch.tensor, "Batch.tensor")
        batch.outputs = self.backend.infer({self.input_name: tensor})
        return batch
