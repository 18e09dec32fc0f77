"""NVML metrics under the contract's names, and the backend report with its fallback label."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from pipelines.cuda import library_available
from pipelines.errors import DeviceError
from pipelines.gpu_metrics import BackendReport, GpuSampler
from tests.gpu.agreement import need


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

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        if index > 0:
            raise RuntimeError("Invalid Argument")
        return "gpu0"

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return SimpleNamespace(gpu=self.util, memory=3)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return SimpleNamespace(total=80 << 30, free=(80 << 30) - self.used, used=self.used)

    def nvmlDeviceGetDecoderUtilization(self, handle):  # noqa: N802
        return [self.decoder, 166_666]


def test_nvml_figures_are_exported_under_the_contract_names():
    registry, nvml = CollectorRegistry(), FakeNvml()
    with GpuSampler(registry, nvml=nvml):
        value = registry.get_sample_value
        assert value("vidpipe_gpu_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.37)
        assert value("vidpipe_gpu_memory_used_bytes", {"gpu": "0"}) == 5 << 30
        assert value("vidpipe_decoder_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.12)
        nvml.util = 90  # read at scrape time, not frozen at start
        assert value("vidpipe_gpu_utilization_ratio", {"gpu": "0"}) == pytest.approx(0.9)
    assert nvml.shutdowns == 1


def test_samples_give_mean_and_peak():
    nvml = FakeNvml()
    with GpuSampler(CollectorRegistry(), nvml=nvml) as sampler:
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
    with GpuSampler(CollectorRegistry(), nvml=FakeNvml()) as sampler:
        async def briefly() -> None:
            task = asyncio.create_task(sampler.poll(0.01))
            await asyncio.sleep(0.1)
            task.cancel()

        asyncio.run(briefly())
        assert sampler.summary()["samples"] >= 2


@pytest.mark.parametrize(("nvml", "index", "message"), [
    (FakeNvml(fail_init=True), 0, "NVML cannot start"), (FakeNvml(), 3, "no GPU 3")])
def test_nvml_failures_are_device_errors(nvml, index, message):
    with pytest.raises(DeviceError, match=message):
        GpuSampler(CollectorRegistry(), index, nvml=nvml)


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
