"""Small CUDA helpers shared by the GPU stages: device strings, lazy library checks, the
event hand-off between stage streams, and pinned staging buffers for CPU-decoded frames.

Nothing here touches CUDA, or imports torch, at import time, so every module that uses it
imports on a machine without a GPU and the CPU path never loads torch; what needs a GPU says
so (DeviceError, naming what is missing) only when it is asked to run.

The hand-off (docs/ARCHITECTURE.md, Concurrency): a producer enqueues its work for an item on
its own stream and records an event after it (``record_ready``); the consumer makes its stream
wait for that event and marks the tensors it reads as in use on its stream (``wait_ready``), so
the caching allocator cannot hand their memory out again while the consumer still reads it.
No host thread waits for the GPU anywhere in between.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pipelines.errors import DeviceError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

DeviceKind = Literal["cpu", "cuda"]


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A parsed device string: ``cpu``, ``cuda`` (= ``cuda:0``) or ``cuda:N``."""

    kind: DeviceKind
    index: int = 0

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device("cpu") if self.kind == "cpu" else torch.device("cuda", self.index)

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


def parse_device(text: str | DeviceSpec) -> DeviceSpec:
    """``cpu`` | ``cuda`` | ``cuda:N``; anything else is a DeviceError naming what is allowed."""
    if isinstance(text, DeviceSpec):
        return text
    value = text.strip().lower()
    if value == "cpu":
        return DeviceSpec("cpu")
    if value == "cuda":
        return DeviceSpec("cuda", 0)
    if value.startswith("cuda:") and value[5:].isdigit():
        return DeviceSpec("cuda", int(value[5:]))
    raise DeviceError(f"unknown device {text!r}; expected 'cpu', 'cuda' or 'cuda:N' (N >= 0)")


def cuda_available() -> bool:
    """Whether torch sees a usable CUDA device (False on CPU-only torch builds)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver raises from deep inside; it means "no"
        return False


def require_cuda(device: str | DeviceSpec) -> torch.device:
    """The torch device for ``device``, or a DeviceError saying why it cannot be used."""
    spec = parse_device(device)
    if not spec.is_cuda:
        raise DeviceError(f"device {spec} is not a CUDA device; the GPU backends need cuda[:N]")
    import torch

    if not torch.backends.cuda.is_built():
        raise DeviceError(f"device {spec}: this torch ({torch.__version__}) is built without "
                          "CUDA; install a CUDA build of torch or use --device cpu")
    if not cuda_available():
        raise DeviceError(f"device {spec}: torch finds no usable CUDA GPU (driver missing or "
                          "no device visible); use --device cpu")
    count = torch.cuda.device_count()
    if spec.index >= count:
        raise DeviceError(f"device {spec}: only {count} CUDA device(s) visible "
                          f"(cuda:0..cuda:{count - 1})")
    return spec.torch_device


def library_available(module: str) -> bool:
    """Whether ``module`` could be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_gpu_library(module: str, package: str, purpose: str) -> ModuleType:
    """Import a GPU library at the moment it is needed; a DeviceError names the missing
    package and what it was wanted for. Import failures of an installed package (a missing
    shared library, a driver too old) are reported the same way, with FFmpeg's or CUDA's words."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = "is not installed" if e.name == module else f"cannot be loaded ({e})"
        raise DeviceError(f"{purpose} needs the Python package {package} (module {module}), "
                          f"which {reason}; pip install {package}, or use --device cpu") from e
    except Exception as e:  # installed, but its driver libraries are not there (PyNvVideoCodec
        # raises RuntimeError without libnvidia-encode.so.1, OSError for a missing .so)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DeviceError(f"{purpose}: {package} is installed but cannot be loaded "
                          f"({first})") from e


# -- stream hand-off -------------------------------------------------------------------------

def new_stream(device: torch.device) -> Any:
    """A new CUDA stream on ``device`` for one stage (blocking w.r.t. nothing but its events)."""
    import torch

    return torch.cuda.Stream(device=device)


def record_ready(stream: Any) -> Any:
    """Record an event on ``stream`` after the work enqueued so far: the item is ready when
    the event completes. Returns the event, to be attached to the item (``Frame.ready``)."""
    import torch

    event = torch.cuda.Event()
    event.record(stream)
    return event


def wait_ready(stream: Any, events: Iterable[Any], tensors: Iterable[torch.Tensor] = ()) -> None:
    """Make ``stream`` wait for the producers' events, and keep the memory of ``tensors``
    (allocated on the producers' streams) from being reused until ``stream`` is done with it."""
    for event in events:
        if event is not None:
            stream.wait_event(event)
    for tensor in tensors:
        if tensor.is_cuda:
            tensor.record_stream(stream)


def distinct_events(items: Sequence[Any]) -> list[Any]:
    """The distinct, non-None ``ready`` events of ``items`` (frames), in order."""
    seen: set[int] = set()
    events = []
    for item in items:
        event = getattr(item, "ready", None)
        if event is not None and id(event) not in seen:
            seen.add(id(event))
            events.append(event)
    return events


# -- pinned staging --------------------------------------------------------------------------

class PinnedStaging:
    """Page-locked host staging through which CPU-decoded frames reach the GPU.

    ``upload`` copies a numpy image into a pinned buffer (a host memcpy) and enqueues the
    host-to-device copy on ``stream`` with ``non_blocking=True``, so the copy engine moves it
    while the thread goes on. The buffers come from torch's caching host allocator, which
    records an event with each non-blocking copy and hands a buffer out again only once its
    copy has completed: a pool that never makes the thread wait for the GPU.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def upload(self, array: np.ndarray | torch.Tensor, stream: Any) -> torch.Tensor:
        """A device copy of ``array``; valid on ``stream`` (enqueued there, not finished)."""
        import torch

        host = torch.from_numpy(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) \
            else array
        staged = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
        staged.copy_(host)
        with torch.cuda.stream(stream):
            device = torch.empty(host.shape, dtype=host.dtype, device=self.device)
            device.copy_(staged, non_blocking=True)
        return device

    def close(self) -> None:
        """Nothing to release: the caching host allocator owns the pinned blocks."""


# -- fallbacks -------------------------------------------------------------------------------

_logged_fallbacks: set[tuple[str, str]] = set()
_fallback_lock = threading.Lock()


def log_fallback_once(stage: str, message: str) -> bool:
    """Log a backend fallback (asked for the GPU path, got another) once per stage and reason;
    returns whether this call logged it. The metric side is ``gpu_metrics.BackendReport``."""
    key = (stage, message)
    with _fallback_lock:
        if key in _logged_fallbacks:
            return False
        _logged_fallbacks.add(key)
    log.warning("%s: %s", stage, message)
    return True
