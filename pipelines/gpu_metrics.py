"""GPU measurements from NVML (nvidia-ml-py), and which backend each stage runs on.

``GpuSampler`` exports the three NVML metrics of docs/ARCHITECTURE.md on the pipeline's
registry, labelled ``gpu`` with the CUDA device's ordinal (as ``--device cuda:N`` names it).
NVML numbers GPUs its own way (by PCI order, blind to ``CUDA_VISIBLE_DEVICES``), so the
device is looked up in NVML by its UUID, else its PCI bus id, both from CUDA
(``cuda_identity``), never by index:

- ``vidpipe_gpu_utilization_ratio``: fraction of the last sample period in which a kernel ran
  (``nvmlDeviceGetUtilizationRates().gpu`` / 100);
- ``vidpipe_gpu_memory_used_bytes``: ``nvmlDeviceGetMemoryInfo().used``;
- ``vidpipe_decoder_utilization_ratio``: NVDEC busy fraction
  (``nvmlDeviceGetDecoderUtilization()[0]`` / 100).

The gauges read NVML when Prometheus scrapes them (``set_function``): no thread of its own.
Callers that want averages over a run (the CLI's table, the benchmark) call ``sample()`` from
a loop they own, or run ``poll()`` in their event loop; ``summary()`` gives mean and peak.

``BackendReport`` exports ``vidpipe_backend_info{stage, backend, device, fallback}`` = 1 for the
backend each stage was built with; ``fallback`` is the reason it is not the one asked for (""
when it is), so a silent CPU fallback shows on every dashboard.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from pipelines.cuda import import_gpu_library
from pipelines.errors import DeviceError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """A CUDA device as NVML can find it."""

    uuid: str | None  # "GPU-xxxxxxxx-xxxx-...", NVML's form
    pci_bus_id: str | None  # "00000000:3B:00.0"


def cuda_identity(index: int) -> GpuIdentity:
    """The UUID and PCI bus id CUDA reports for its device ``index``."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    domain, bus, device = (getattr(props, f, None)
                           for f in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    pci = None if None in (domain, bus, device) else f"{domain:08X}:{bus:02X}:{device:02X}.0"
    return GpuIdentity(None if uuid is None else f"GPU-{uuid}", pci)


def nvml_handle(nvml: Any, identity: GpuIdentity) -> Any:
    """NVML's handle of the device ``identity`` names (by UUID, else PCI bus id)."""
    errors = []
    for lookup, key in ((getattr(nvml, "nvmlDeviceGetHandleByUUID", None), identity.uuid),
                        (getattr(nvml, "nvmlDeviceGetHandleByPciBusId", None),
                         identity.pci_bus_id)):
        if lookup is None or key is None:
            continue
        try:
            return lookup(key)
        except Exception as e:  # pynvml.NVMLError_NotFound and kin
            errors.append(f"{key}: {e}")
    raise DeviceError("GPU metrics: NVML finds no GPU with " + ("; ".join(errors) or
                                                                "neither a UUID nor a PCI id"))


@dataclass(frozen=True, slots=True)
class GpuSample:
    utilization: float  # 0..1
    memory_used_bytes: int
    decoder_utilization: float  # 0..1


class GpuSampler:
    """NVML readings of CUDA device ``gpu_index``, exported on ``registry``. Use as a context
    manager or call ``close()``: NVML is initialised here and shut down there.
    ``identity`` finds the device (``cuda_identity`` by default)."""

    def __init__(self, registry: CollectorRegistry, gpu_index: int = 0, *,
                 nvml: ModuleType | Any = None,
                 identity: Callable[[int], GpuIdentity] = cuda_identity) -> None:
        self._nvml = nvml or import_gpu_library("pynvml", "nvidia-ml-py", "GPU metrics (NVML)")
        try:
            self._nvml.nvmlInit()
        except Exception as e:  # pynvml.NVMLError_* : no driver, no device
            raise DeviceError(f"GPU metrics: NVML cannot start ({e}); is the NVIDIA driver "
                              "installed and a GPU visible?") from e
        self._open = True
        try:
            self._handle = nvml_handle(self._nvml, identity(gpu_index))
        except Exception as e:
            self.close()
            raise DeviceError(f"GPU metrics: NVML has no CUDA device {gpu_index} ({e})") from e
        self.gpu_index = gpu_index
        self._lock = threading.Lock()
        self._samples: list[GpuSample] = []
        label = str(gpu_index)
        self._gauges = [
            Gauge("vidpipe_gpu_utilization_ratio", "Fraction of time a GPU kernel ran (NVML)",
                  ["gpu"], registry=registry),
            Gauge("vidpipe_gpu_memory_used_bytes", "GPU memory in use (NVML)", ["gpu"],
                  registry=registry),
            Gauge("vidpipe_decoder_utilization_ratio", "Fraction of time NVDEC was busy (NVML)",
                  ["gpu"], registry=registry),
        ]
        self._gauges[0].labels(label).set_function(lambda: self.read().utilization)
        self._gauges[1].labels(label).set_function(lambda: self.read().memory_used_bytes)
        self._gauges[2].labels(label).set_function(lambda: self.read().decoder_utilization)

    def read(self) -> GpuSample:
        """NVML's current figures (each NVML utilisation is averaged over its own period)."""
        nvml = self._nvml
        utilization = nvml.nvmlDeviceGetUtilizationRates(self._handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(self._handle)
        decoder = nvml.nvmlDeviceGetDecoderUtilization(self._handle)
        return GpuSample(utilization.gpu / 100.0, int(memory.used), decoder[0] / 100.0)

    def sample(self) -> GpuSample:
        """Read now and keep the reading for ``summary()``."""
        reading = self.read()
        with self._lock:
            self._samples.append(reading)
        return reading

    async def poll(self, interval_s: float = 0.5) -> None:
        """Sample every ``interval_s`` until cancelled (a task in the caller's event loop)."""
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(interval_s)

    def summary(self) -> dict[str, float]:
        """Mean and peak of the kept samples (empty dict when none were taken)."""
        with self._lock:
            samples = list(self._samples)
        if not samples:
            return {}
        util = [s.utilization for s in samples]
        dec = [s.decoder_utilization for s in samples]
        mem = [s.memory_used_bytes for s in samples]
        return {"gpu_utilization_mean": sum(util) / len(util), "gpu_utilization_max": max(util),
                "decoder_utilization_mean": sum(dec) / len(dec),
                "decoder_utilization_max": max(dec), "memory_used_bytes_max": float(max(mem)),
                "samples": float(len(samples))}

    def close(self) -> None:
        """Shut NVML down. Idempotent."""
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # shutting down a half-started NVML must not mask the real error
                pass

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gpu_sampler_for(device: str, registry: CollectorRegistry) -> GpuSampler | None:
    """The NVML sampler of ``device`` when it is a CUDA device this process can use (None on
    the CPU); without NVML (no nvidia-ml-py, no driver) the gauges are off and the log says
    why, once: the pipeline runs on."""
    from pipelines.cuda import cuda_available, parse_device

    spec = parse_device(device)
    if not spec.is_cuda or not cuda_available():
        return None
    try:
        return GpuSampler(registry, spec.index or 0)
    except DeviceError as e:
        log.warning("GPU gauges off: %s", e)
        return None


class BackendReport:
    """Which backend each stage runs on, as ``vidpipe_backend_info`` on ``registry``.
    One per registry (``for_registry``): pipelines that share a registry share it."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, BackendReport] = \
        weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    @classmethod
    def for_registry(cls, registry: CollectorRegistry) -> BackendReport:
        with cls._lock:
            report = cls._by_registry.get(registry)
            if report is None:
                report = cls._by_registry[registry] = cls(registry)
            return report

    def __init__(self, registry: CollectorRegistry) -> None:
        self._gauge = Gauge("vidpipe_backend_info", "1 per stage for the backend it runs on; "
                            "fallback says why it is not the one asked for",
                            ["stage", "backend", "device", "fallback"], registry=registry)
        self.choices: dict[str, tuple[str, str, str]] = {}

    def record(self, stage: str, backend: str, device: str, fallback: str = "") -> None:
        self.choices[stage] = (backend, device, fallback)
        self._gauge.labels(stage, backend, device, fallback).set(1)
