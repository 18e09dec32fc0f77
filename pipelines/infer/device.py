"""DeviceRuntime: a GPU backend (TensorRT, or torch with CUDA graphs) as a Runtime.

The backend holds two slots (double buffering), each a CUDA stream with preallocated input
buffers. One call gathers its batches into the next slot's input buffer on the slot's
stream, after the preprocessors' events, while the other slot's batch may still run, then
enqueues the model there. The outputs go on, still on the device, with the launch's events:
nothing here waits for the GPU (postprocessing does, where the kept boxes leave it).

UNVERIFIED on a GPU; on ``device="cpu"`` a TorchBackend runs the same code without streams.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Protocol

import torch

from models.backends.base import Backend
from models.backends.device import DeviceOutputs, DeviceSlot
from pipelines.cuda import distinct_events, wait_ready
from pipelines.frame import Batch, tensor_of
from pipelines.infer.runtime import BackendRuntime


class DeviceBackend(Backend, Protocol):
    """What TensorRTBackend and TorchBackend offer beside the host Backend protocol."""

    max_batch: int

    def acquire(self) -> DeviceSlot: ...

    def launch(self, slot: DeviceSlot, batch_size: int) -> DeviceOutputs: ...


class DeviceRuntime(BackendRuntime):
    timed_on_device = True

    def __init__(self, backend: DeviceBackend, input_name: str, *, name: str,
                 device: str) -> None:
        super().__init__(backend, input_name, name=name, device=device)
        self.device_backend = backend
        self.max_batch = backend.max_batch

    def infer(self, batches: list[Batch]) -> Batch:
        slot = self.device_backend.acquire()
        target = slot.inputs[self.input_name]
        frames = [f for b in batches for f in b.frames]
        tensors = [tensor_of(b.tensor) for b in batches]
        scope: Any = torch.cuda.stream(slot.stream) if slot.stream is not None else nullcontext()
        with scope:
            if slot.stream is not None:
                wait_ready(slot.stream, distinct_events(frames), tensors)
            rows = 0
            for tensor in tensors:
                target[rows:rows + len(tensor)].copy_(tensor, non_blocking=True)
                rows += len(tensor)
        done = self.device_backend.launch(slot, rows)
        return Batch(frames, target[:rows], [lb for b in batches for lb in b.letterboxes],
                     outputs=done.outputs, ready=done.ready, started=done.started)
