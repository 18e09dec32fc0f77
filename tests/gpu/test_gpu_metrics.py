"""NVML metrics under the contract's names, and the backend report with its fallback label."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from pipelines.cuda import library_available
from pipelines.errors import DeviceError
from pipelines.gpu_metrics import BackendReport, GpuIdentity, GpuSampler
from tests.gpu.agreement import need

# CUDA's device 0 is the GPU NVML lists second (CUDA_VISIBLE_DEVICES=1, say)
CUDA_DEVICES = {0: GpuIdentity("GPU-aaaa", "00000000:3B:00.0"),
                1: GpuIdentity(None, "00000000:3B:00.0"),  # an old torch: PCI only
                2: GpuIdentity("GPU-cccc", None)}


def identity(index: int) -> GpuIdentity:
    return CUDA_DEVICES[index]


class FakeNvml:
    """The four pynvml calls the sampler makes, with figures a test sets."""

    def __init__(self, *, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.util, self.used, self.decoder = 37, 5 << 30, 12
        self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    # NVML's own order is not CUDA's: index 0 here is another GPU than CUDA's device 0
    devices = {"GPU-aaaa": "nvml-1", "00000000:3B:00.0": "nvml-1", "GPU-bbbb": "nvml-0"}

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return f"nvml-{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        if uuid not in self.devices:
            raise RuntimeError("Not Found")
        return self.devices[uuid]

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:  # noqa: N802
        if bus not in self.devices:
            raise RuntimeError("Not Found")
        return self.devices[bus]

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        assert handle == "nvml-1", "the readings of another GPU"
        return SimpleNamespace(gpu=self.util, memory=3)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return SimpleNamespace(total=80 << 30, free=(80 << 30) - self.used, used=self.used)

    def nvmlDeviceGetDecoderUtilization(self, handle):  # noqa: N802
        return [self.decoder, 166_666]


def test_nvml_figures_are_exported_under_the_contract_names():
    registry, nvml = CollectorRegistry(), FakeNvml()
    with GpuSampler(registry, nvml=nvml, identity=identity):
        value = registry.get_sample_value
        assert value("vidpipe_gpu_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.37)
        assert value("vidpipe_gpu_memory_used_bytes", {"gpu": "0"}) == 5 << 30
        assert value("vidpipe_decoder_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.12)
        nvml.util = 90  # read at scrape time, not frozen at start
        assert value("vidpipe_gpu_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.9)
    assert nvml.shutdowns == 1


def test_samples_give_mean_and_peak():
    nvml = FakeNvml()
    with GpuSampler(CollectorRegistry(), nvml=nvml, identity=identity) as sampler:
        assert sampler.summary() == {}
        for util, decoder in ((20, 10), (60, 30)):
            nvml.util, nvml.decoder = util, decoder
            sampler.sample()
        summary = sampler.summary()
    assert summary["gpu_utilization_mean"] == pytest.approx(0.4)
    assert summary["gpu_utilization_max"] == pytest.approx(0.6)
    assert summary["decoder_utilization_mean"] == pytest.approx(0.2)
    assert summary["samples"] == 2


def test_poll_samples_until_cancelled():
    with GpuSampler(CollectorRegistry(), nvml=FakeNvml(), identity=identity) as sampler:
        async def briefly() -> None:
            task = asyncio.create_task(sampler.poll(0.01))
            await asyncio.sleep(0.1)
            task.cancel()

        asyncio.run(briefly())
        assert sampler.summary()["samples"] >= 2


@pytest.mark.parametrize("index", [0, 1])
def test_the_gpu_is_found_in_nvml_by_uuid_or_pci_bus_never_by_index(index):
    """Issue 23, item 3: NVML's index 0 is not CUDA's device 0; the fake's readings fail
    for any other GPU than the one CUDA's device 0 is."""
    registry = CollectorRegistry()
    with GpuSampler(registry, index, nvml=FakeNvml(), identity=identity):
        assert registry.get_sample_value("vidpipe_gpu_utilization_ratio",
                                         {"gpu": str(index)}) == pytest.approx(0.37)


@pytest.mark.parametrize(("nvml", "index", "message"), [
    (FakeNvml(fail_init=True), 0, "NVML cannot start"),
    (FakeNvml(), 2, "no CUDA device 2 .*GPU-cccc: Not Found")])
def test_nvml_failures_are_device_errors(nvml, index, message):
    with pytest.raises(DeviceError, match=message):
        GpuSampler(CollectorRegistry(), index, nvml=nvml, identity=identity)


def test_without_nvidia_ml_py_the_sampler_names_it():
    if library_available("pynvml"):
        pytest.skip("nvidia-ml-py is installed")
    with pytest.raises(DeviceError, match="nvidia-ml-py"):
        GpuSampler(CollectorRegistry())


def test_backend_report_is_one_per_registry_and_labels_fallbacks():
    registry = CollectorRegistry()
    report = BackendReport.for_registry(registry)
    assert BackendReport.for_registry(registry) is report
    report.record("decode", "pyav", "cpu", "PyNvVideoCodec is not installed")
    report.record("infer", "torch-fp16", "cuda:0")
    value = registry.get_sample_value
    assert value("vidpipe_backend_info", {"stage": "decode", "backend": "pyav", "device": "cpu",
                                          "fallback": "PyNvVideoCodec is not installed"}) == 1
    assert value("vidpipe_backend_info", {"stage": "infer", "backend": "torch-fp16",
                                          "device": "cuda:0", "fallback": ""}) == 1


@pytest.mark.gpu
def test_real_nvml_readings_are_sane():
    need("pynvml")
    registry = CollectorRegistry()
    with GpuSampler(registry) as sampler:
        reading = sampler.sample()
    assert 0.0 <= reading.utilization <= 1.0
    assert 0.0 <= reading.decoder_utilization <= 1.0
    assert reading.memory_used_bytes > 0


def test_the_service_exports_its_gpu_s_gauges_and_shows_them(monkeypatch, tmp_path):
    """Issue 23, item 3: the running service samples its GPU (a fake NVML here: no GPU on
    this machine), on /metrics and in /api/stats, and shuts NVML down when it stops."""
    from fastapi.testclient import TestClient

    import app.service.service
    from app.service.api import create_app
    from app.service.config import ServiceConfig
    from tests.support.api import LOCAL

    nvml = FakeNvml()
    monkeypatch.setattr(app.service.service, "gpu_sampler_for", lambda device, registry: GpuSampler(
        registry, 0, nvml=nvml, identity=identity))
    with TestClient(create_app(ServiceConfig(results_dir=tmp_path / "results")),
                    base_url=LOCAL) as client:
        metrics = client.get("/metrics").text
        gpus = client.get("/api/stats").json()["gpus"]
    assert 'vidpipe_gpu_utilization_ratio{gpu="0"} 0.37' in metrics
    assert 'vidpipe_decoder_utilization_ratio{gpu="0"} 0.12' in metrics
    assert gpus == [{"gpu": 0, "utilization": 0.37, "decoder_utilization": 0.12,
                     "memory_used_bytes": 5 << 30, "worker": "local"}]
    assert nvml.shutdowns == 1


def test_on_the_cpu_no_sampler_is_made():
    from pipelines.gpu_metrics import gpu_sampler_for

    assert gpu_sampler_for("cpu", CollectorRegistry()) is None
