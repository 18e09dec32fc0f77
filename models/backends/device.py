"""What the GPU runtimes (TensorRT, torch) share: the error for a device that cannot run
them, a slot of double-buffered device inputs, a launched batch's outputs and events, and
small CUDA helpers. Nothing here touches CUDA at import time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from models.errors import ModelError


class DeviceUnavailable(ModelError):
    """The GPU runtime cannot run here: no CUDA device, or its library is missing. The
    message names what is missing; ``pipelines.backends`` records it as a fallback's reason."""


@dataclass(slots=True)
class DeviceSlot:
    """One of a GPU backend's buffer sets: its stream and preallocated input buffers
    ([max_batch, ...] per input name), and whatever the runtime keeps per slot."""

    index: int
    stream: Any  # torch.cuda.Stream, or None on the CPU
    inputs: dict[str, torch.Tensor]
    state: dict[Any, Any] = field(default_factory=dict)  # CUDA graphs, an execution context


@dataclass(slots=True)
class DeviceOutputs:
    """A launched batch: outputs on the device, valid once ``ready`` (an event on ``stream``)
    has completed; consumers wait on it with ``stream.wait_event``. ``started`` and ``ready``
    are timing events: once ready, ``gpu_seconds()`` is the batch's time on the GPU."""

    outputs: dict[str, torch.Tensor]
    ready: Any
    stream: Any
    started: Any = None

    def gpu_seconds(self) -> float | None:
        """GPU time from launch to ready; call only after ``ready`` has completed."""
        if self.started is None or self.ready is None:
            return None
        return float(self.started.elapsed_time(self.ready)) / 1000.0


def timing_event(stream: Any) -> Any:
    """A timing CUDA event recorded on ``stream`` now, or None on the CPU."""
    if stream is None:
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def batch_bucket(n: int, limit: int) -> int:
    """The batch size a graph is captured for: the next power of two, at most ``limit``, so a
    slot captures a handful of graphs instead of one per partial batch size."""
    return min(limit, 1 << max(0, n - 1).bit_length())


def cuda_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch CUDA device, or DeviceUnavailable saying why it cannot be used."""
    dev = torch.device(device)
    if dev.type != "cuda":
        raise DeviceUnavailable(f"device {dev} is not a CUDA device")
    if not torch.cuda.is_available():
        raise DeviceUnavailable(f"device {dev}: torch {torch.__version__} finds no CUDA GPU")
    index = 0 if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise DeviceUnavailable(f"device {dev}: only {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)
