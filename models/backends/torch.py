"""TorchBackend: a detector run by torch on CUDA, in FP16 or FP32, replayed as CUDA graphs.

What it accepts (there is no ONNX importer for torch, so not the .onnx file itself):

- a ``torch.nn.Module`` (for instance ShapesYOLO rebuilt from its checkpoint);
- a TorchScript file (``.ts``, ``.torchscript``, ``.jit`` or ``.pt`` saved by
  ``torch.jit.save``), or a vidpipe checkpoint (``model.pt`` as ``vidpipe model train`` and
  the zoo ship it);
- a ``torch.export`` program (``.pt2`` saved by ``torch.export.save``).

The module takes one image tensor ([B, C, H, W] or [B, H, W, C] as the card says) and returns a
tensor, a tuple of tensors or a dict of them; outputs are named ``output_names`` (default
``output0``, ``output1``, ... or the dict's keys) and always handed out as float32.

Double buffering: the backend holds ``slots`` (default 2) sets of device input buffers, each
with its own CUDA stream. ``acquire()`` hands out the next slot, the caller fills
``slot.inputs`` on ``slot.stream`` (batch k+1) while the other slot's work (batch k) still
runs, and ``launch(slot, n)`` enqueues the model on that stream and returns the outputs with
the event that marks them ready. For each batch bucket (1, 2, 4, ... ``max_batch``) and slot,
the forward pass is captured as a CUDA graph (reading the slot's input buffer in place) when
the backend is built, and replayed after that: one launch per batch instead of one per layer.
Captured up front, not at a bucket's first batch: a capture synchronizes the device (every
stream's work waits), and one taken while 32 streams kept the other threads busy failed on the
first lent H200 ("operation failed due to a previous error during capture"). A backend built
while others run (a candidate model beside a live detector) still captures while they work:
unverified on a GPU; a failed capture leaves it eager, logged. Each graph holds its own memory
pool (2 slots x 6 buckets at ``max_batch`` 32). FP32 runs with
TF32 off, so it agrees with ONNX Runtime to float rounding; FP16 casts the model and the input
to half.

On ``device="cpu"`` the same object runs eagerly (no streams, no graphs), which is how the CPU
tests check loading, naming and numerics against ONNX Runtime.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from models.backends.base import TensorInfo
from models.backends.device import (
    DeviceOutputs,
    DeviceSlot,
    batch_bucket,
    cuda_device,
    timing_event,
)
from models.backends.torch_load import load_torch_model
from models.errors import ModelError

log = logging.getLogger(__name__)

Precision = Literal["fp16", "fp32"]
def fp32_exactly() -> None:
    """FP32 means FP32 on the GPU: no TF32 in cuDNN's convolutions or cuBLAS's matmuls (they
    would differ from ONNX Runtime by ~1e-3), cuDNN's deterministic choice of algorithm off
    and its autotuner off (no first-batch search). Process-wide settings: made once, when a
    backend is built, never around each forward (entering ``torch.backends.cudnn.flags``
    from several inference threads raced on them)."""
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


class TorchBackend:
    """A torch detector behind the Backend protocol, plus the device-side acquire/launch."""

    def __init__(self, model: nn.Module | str | Path, *, input_shape: Sequence[int],
                 input_name: str = "images", input_dtype: str = "float32",
                 output_names: Sequence[str] | None = None, device: str = "cuda:0",
                 precision: Precision = "fp32", cuda_graphs: bool = True, max_batch: int = 32,
                 slots: int = 2) -> None:
        if precision not in ("fp16", "fp32"):
            raise ValueError(f"precision must be 'fp16' or 'fp32', got {precision!r}")
        if max_batch < 1 or slots < 1:
            raise ValueError(f"max_batch and slots must be >= 1, got {max_batch}, {slots}")
        self.device = cuda_device(device) if torch.device(device).type == "cuda" \
            else torch.device("cpu")
        self.is_cuda = self.device.type == "cuda"
        self.precision: Precision = precision if self.is_cuda else "fp32"
        self.cuda_graphs = cuda_graphs and self.is_cuda
        self.max_batch = max_batch
        self.input_name = input_name
        self._input_dtype = getattr(torch, input_dtype)
        self._input_shape = tuple(int(d) for d in input_shape)
        module = load_torch_model(model, self.device).to(self.device)
        try:
            module.eval()
        except NotImplementedError:  # torch.export modules are already in inference form
            pass
        self.model = module.half() if self.precision == "fp16" else module
        if self.is_cuda:
            fp32_exactly()
        self._output_names = list(output_names) if output_names else None
        self._slots = [self._slot(i) for i in range(slots)]
        self._turn = itertools.cycle(range(slots))
        self._outputs = self._probe()
        if self.cuda_graphs:
            self._capture_all()

    # -- Backend protocol ---------------------------------------------------------------------
    @property
    def inputs(self) -> list[TensorInfo]:
        return [TensorInfo(self.input_name, (None, *self._input_shape),
                           str(self._input_dtype).removeprefix("torch."))]

    @property
    def outputs(self) -> list[TensorInfo]:
        return list(self._outputs)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Host in, host out: copies in through pinned memory, runs, copies the outputs back
        with non-blocking copies and waits once, where the results leave the GPU."""
        if self.input_name not in feeds:
            raise ModelError(f"feeds must hold {self.input_name!r}, got {sorted(feeds)}")
        images = torch.from_numpy(np.ascontiguousarray(feeds[self.input_name]))
        results: dict[str, list[np.ndarray]] = {}
        for start in range(0, images.shape[0], self.max_batch):
            part = images[start:start + self.max_batch]
            slot = self.acquire()
            with self._on(slot):
                staged = part.pin_memory() if self.is_cuda else part
                slot.inputs[self.input_name][:len(part)].copy_(staged, non_blocking=True)
            done = self.launch(slot, len(part))
            for name, array in self._to_host(done).items():
                results.setdefault(name, []).append(array)
        return {name: np.concatenate(parts) for name, parts in results.items()}

    def close(self) -> None:
        """Wait for the work in flight and drop graphs and buffers. Idempotent."""
        for slot in self._slots:
            if slot.stream is not None:
                slot.stream.synchronize()
            slot.state.clear()
        self._slots = []

    def __enter__(self) -> TorchBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- device side --------------------------------------------------------------------------
    def acquire(self) -> DeviceSlot:
        """The next buffer set (round robin): fill ``slot.inputs`` on ``slot.stream``."""
        if not self._slots:
            raise RuntimeError("TorchBackend is closed")
        return self._slots[next(self._turn)]

    def launch(self, slot: DeviceSlot, batch_size: int) -> DeviceOutputs:
        """Run the model on the first ``batch_size`` rows of the slot's input buffer."""
        if not 1 <= batch_size <= self.max_batch:
            raise ModelError(f"batch of {batch_size} frames; this backend takes "
                             f"1..{self.max_batch}")
        started = timing_event(slot.stream)
        with self._on(slot):
            if self.cuda_graphs:  # rows past batch_size are stale and their outputs dropped
                bucket = batch_bucket(batch_size, self.max_batch)
                outputs = {name: out[:batch_size]
                           for name, out in self._replay(slot, bucket).items()}
            else:
                outputs = self._forward(slot.inputs[self.input_name][:batch_size])
        return DeviceOutputs(outputs, timing_event(slot.stream), slot.stream, started)

    def _replay(self, slot: DeviceSlot, n: int) -> dict[str, torch.Tensor]:
        graph, static_outputs = slot.state[n]  # every bucket was captured when built
        graph.replay()
        return {name: out.clone() for name, out in static_outputs.items()}

    def _capture_all(self) -> None:
        buckets = sorted({batch_bucket(n, self.max_batch) for n in range(1, self.max_batch + 1)})
        for slot in self._slots:
            for n in buckets:
                with self._on(slot):
                    captured = self._capture(slot, n)
                if captured is None:  # logged; eager from now on, no graph kept
                    for each in self._slots:
                        each.state.clear()
                    return
                slot.state[n] = captured

    def _capture(self, slot: DeviceSlot, n: int) -> tuple[Any, dict[str, torch.Tensor]] | None:
        """Capture the forward pass for ``n`` rows of this slot's input buffer; warm-up runs
        first (lazy initialisation and cuDNN's choices must happen outside the capture).
        Capturing synchronizes the device once; it happens once per slot and batch bucket."""
        images = slot.inputs[self.input_name][:n]
        try:
            for _ in range(2):
                self._forward(images)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the other stages' threads keep using CUDA during the capture
            with torch.cuda.graph(graph, stream=slot.stream, capture_error_mode="thread_local"):
                static_outputs = self._forward(images)
        except RuntimeError as e:
            log.warning("CUDA graph capture failed (%s); running eagerly", str(e).splitlines()[0])
            self.cuda_graphs = False
            return None
        return graph, static_outputs

    def _forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        x = images.half() if self.precision == "fp16" and images.is_floating_point() else images
        with torch.no_grad():
            result = self.model(x)
        return {name: out.float() for name, out in self._named(result).items()}

    def _named(self, result: Any) -> dict[str, torch.Tensor]:
        if isinstance(result, torch.Tensor):
            result = (result,)
        if isinstance(result, Mapping):
            return dict(result)
        if not isinstance(result, (tuple, list)) or not all(
                isinstance(t, torch.Tensor) for t in result):
            raise ModelError(f"the torch model must return tensors, got {type(result).__name__}")
        names = self._output_names or [f"output{i}" for i in range(len(result))]
        if len(names) != len(result):
            raise ModelError(f"{len(names)} output names for {len(result)} model outputs")
        return dict(zip(names, result, strict=True))

    def _slot(self, index: int) -> DeviceSlot:
        shape = (self.max_batch, *self._input_shape)
        stream = torch.cuda.Stream(device=self.device) if self.is_cuda else None
        buffer = torch.zeros(shape, dtype=self._input_dtype, device=self.device)
        return DeviceSlot(index, stream, {self.input_name: buffer})

    def _probe(self) -> list[TensorInfo]:
        """Output names and shapes, from one batch-of-one forward pass (also a warm-up)."""
        slot = self._slots[0]
        with self._on(slot):
            outputs = self._forward(slot.inputs[self.input_name][:1])
        if slot.stream is not None:
            slot.stream.synchronize()
        return [TensorInfo(name, (None, *out.shape[1:]), "float32")
                for name, out in outputs.items()]

    def _on(self, slot: DeviceSlot) -> AbstractContextManager[Any]:
        return torch.cuda.stream(slot.stream) if slot.stream is not None else nullcontext()

    def _to_host(self, done: DeviceOutputs) -> dict[str, np.ndarray]:
        if done.stream is None:
            return {name: out.numpy() for name, out in done.outputs.items()}
        with torch.cuda.stream(done.stream):
            host = {name: torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
                    for name, out in done.outputs.items()}
            for name, out in done.outputs.items():
                host[name].copy_(out, non_blocking=True)
        done.stream.synchronize()
        return {name: tensor.numpy().copy() for name, tensor in host.items()}
