"""The backend registry: which decoder, preprocessor, runtime and postprocessor the stages
run, chosen from the device string and the options' per-stage choices, in one place.

- ``cpu`` (``backends.cpu``): FFmpeg (PyAV), OpenCV, ONNX Runtime or OpenVINO
  (``pipelines.infer.choice``), numpy; threads from the thread plan.
- ``cuda[:N]`` (``backends.gpu``), best first: NVDEC -> FFmpeg with pinned uploads; torch
  preprocessing (OpenCV's arithmetic; CV-CUDA only when asked for); a TensorRT engine beside
  the model (``model.engine`` / ``model.plan``) -> a torch model beside it (``model.pt2`` /
  ``model.ts`` / ``model.pt``, or ``options.torch_model``); decoding and NMS in torch.
- No CUDA, or no GPU runtime for the model: the CPU backends when
  ``options.allow_cpu_fallback`` (the default), else DeviceError.

Every choice is exported as ``vidpipe_backend_info{stage, backend, device, fallback}`` and
every fallback is logged once. ``backends.gpu`` (and with it torch and the GPU libraries) is
imported only when a CUDA device is asked for: the CPU path never loads them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from models.spec import ModelSpec
from pipelines.backends.common import CPU_CHOICES, StageBackends, with_batch_size
from pipelines.backends.cpu import cpu_backends, host_backends
from pipelines.cuda import log_fallback_once, parse_device
from pipelines.decode.pyav import ScaleTo
from pipelines.errors import ConfigError, DeviceError
from pipelines.gpu_metrics import BackendReport
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions

__all__ = ["StageBackends", "host_backends", "open_backends"]

log = logging.getLogger(__name__)


def open_backends(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                  metrics: PipelineMetrics, options: PipelineOptions,
                  scale: ScaleTo | None) -> StageBackends:
    """The backends ``options.device`` asks for, the model opened and checked against its
    card, with their plan (threads, runtime, batch size); ``scale``: the size CPU decoders
    draw pictures at (None: full size)."""
    report = BackendReport.for_registry(metrics.registry)
    fallback = ""
    if parse_device(options.device).is_cuda:
        if options.runtime in CPU_CHOICES["runtime"]:
            raise ConfigError(f"runtime {options.runtime} runs on the CPU (--device cpu); on a "
                              "GPU it is tensorrt or torch")
        from pipelines.backends.gpu import gpu_backends  # torch and the GPU libraries

        try:
            return with_batch_size(gpu_backends(model_path, spec, options, report),
                                   options, model_path)
        except DeviceError as e:
            if not options.allow_cpu_fallback:
                raise
            fallback = str(e)
            log_fallback_once("pipeline", f"running on the CPU: {fallback}")
    else:
        _refuse_gpu_choices(options)
    backends = cpu_backends(model_path, spec, sources, options, report, scale, fallback)
    return with_batch_size(backends, options, model_path)


def _refuse_gpu_choices(options: PipelineOptions) -> None:
    for stage, cpu in CPU_CHOICES.items():
        chosen = getattr(options, stage)
        if chosen not in ("auto", *cpu):
            raise ConfigError(f"{stage} backend {chosen} needs a CUDA device (--device "
                              f"cuda[:N]); on the CPU it is {' or '.join(cpu)}")
