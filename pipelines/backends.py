"""The backend registry: which decoder, preprocessor, runtime and postprocessor the stages
run, chosen from the device string and the options' per-stage choices, in one place.

- ``cpu``: FFmpeg (PyAV), OpenCV, ONNX Runtime or OpenVINO (``pipelines.infer.choice``),
  numpy; threads from the thread plan.
- ``cuda[:N]``, best first: NVDEC -> FFmpeg with pinned uploads; CV-CUDA -> torch; a TensorRT
  engine beside the model (``model.engine`` / ``model.plan``) -> a torch model beside it
  (``model.pt2`` / ``model.ts``, or ``options.torch_model``); decoding and NMS in torch.
- No CUDA, or no GPU runtime for the model: the CPU backends when
  ``options.allow_cpu_fallback`` (the default), else DeviceError.

Every choice is exported as ``vidpipe_backend_info{stage, backend, device, fallback}`` and
every fallback is logged once. GPU libraries are imported only when their backend is tried.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from models.engine import check_engine, current_environment
from models.runtime.base import Backend, TensorInfo
from models.runtime.device import DeviceUnavailable
from models.runtime.tensorrt import TensorRTBackend
from models.runtime.torch import TorchBackend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.cuda import log_fallback_once, parse_device, require_cuda
from pipelines.decode.nvdec import NvdecDecoder
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.decode.stage import PictureDecoder
from pipelines.errors import ConfigError, DeviceError
from pipelines.gpu_metrics import BackendReport
from pipelines.infer.choice import RuntimeDecision, open_cpu_runtime
from pipelines.infer.device import DeviceRuntime
from pipelines.infer.runtime import HostRuntime, Runtime
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.postprocess.gpu import TorchPostprocessor
from pipelines.postprocess.stage import HostPostprocessor, Postprocessor
from pipelines.preprocess.cvcuda import CvCudaPreprocessor
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.preprocess.stage import Preprocessor
from pipelines.preprocess.torch_cuda import TorchPreprocessor
from pipelines.threads import ThreadPlan, choose_threads

log = logging.getLogger(__name__)

ENGINE_SUFFIXES = (".engine", ".plan")
TORCH_SUFFIXES = (".pt2", ".ts", ".torchscript")
CPU_CHOICES = {"decode": ("pyav",), "preprocess": ("opencv",),
               "runtime": ("onnxruntime", "openvino", "openvino-bf16")}


@dataclass(slots=True)
class StageBackends:
    """What the stages of one pipeline run on: a decoder per source connection, a
    preprocessor per stream, the one runtime and postprocessor; ``input`` is the graph input
    fed and ``plan`` the thread plan they were opened with."""

    decoder_for: Callable[[Any], PictureDecoder]
    preprocessor_for: Callable[[], Preprocessor]
    runtime: Runtime
    postprocessor: Postprocessor
    input: TensorInfo
    plan: ThreadPlan
    runtime_choice: RuntimeDecision | None = None  # the CPU runtime's, when one was chosen

    def close(self) -> None:
        """Close what was opened, for a build that fails before the stages own it."""
        self.runtime.close()
        self.postprocessor.close()


def host_backends(decoder_for: Callable[[Any], PictureDecoder], backend: Backend,
                  spec: ModelSpec, *, infer_workers: int = 1) -> StageBackends:
    """The CPU backends around an already opened host backend (tests pass fakes here)."""
    info = next((i for i in backend.inputs if spec.input.name in (None, i.name)),
                backend.inputs[0])
    return StageBackends(decoder_for, lambda: OpenCVPreprocessor(spec.input),
                         HostRuntime(backend, info.name), HostPostprocessor(spec), info,
                         ThreadPlan(1, 1, "given", infer_workers))


def open_backends(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                  metrics: PipelineMetrics, options: PipelineOptions,
                  scale: ScaleTo | None) -> StageBackends:
    """The backends ``options.device`` asks for, the model opened and checked against its
    card; ``scale``: the size CPU decoders draw pictures at (None: full size)."""
    report = BackendReport.for_registry(metrics.registry)
    fallback = ""
    if parse_device(options.device).is_cuda:
        if options.runtime in CPU_CHOICES["runtime"]:
            raise ConfigError(f"runtime {options.runtime} runs on the CPU (--device cpu); on a "
                              "GPU it is tensorrt or torch")
        try:
            return _gpu_backends(model_path, spec, require_cuda(options.device), options,
                                 report)
        except DeviceError as e:
            if not options.allow_cpu_fallback:
                raise
            fallback = str(e)
            log_fallback_once("pipeline", f"running on the CPU: {fallback}")
    else:
        _refuse_gpu_choices(options)
    return _cpu_backends(model_path, spec, sources, options, report, scale, fallback)


def _refuse_gpu_choices(options: PipelineOptions) -> None:
    for stage, cpu in CPU_CHOICES.items():
        chosen = getattr(options, stage)
        if chosen not in ("auto", *cpu):
            raise ConfigError(f"{stage} backend {chosen} needs a CUDA device (--device "
                              f"cuda[:N]); on the CPU it is {' or '.join(cpu)}")


def _cpu_backends(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                  options: PipelineOptions, report: BackendReport, scale: ScaleTo | None,
                  fallback: str) -> StageBackends:
    backend, plan, decision = open_cpu_runtime(model_path, spec, sources, options.runtime,
                                               options.infer_threads, options.decode_threads,
                                               scaled=scale is not None)
    if scale is not None:
        log.info("decoding straight to the model's letterbox size (input %dx%d): no sink "
                 "needs the full pictures", *scale.input_size)
    try:
        info = check_compatible(spec, backend.inputs, backend.outputs, model_path)
    except BaseException:
        backend.close()
        raise
    for stage, name in (("decode", "pyav"), ("preprocess", "opencv"),
                        ("infer", decision.runtime), ("postprocess", "numpy")):
        report.record(stage, name, "cpu", fallback)
    return StageBackends(lambda s: PyAVDecoder(s.video, threads=plan.decode, scale=scale,
                                               lazy=_converted_lazily(s, options)),
                         lambda: OpenCVPreprocessor(spec.input),
                         HostRuntime(backend, info.name, name=decision.runtime),
                         HostPostprocessor(spec), info, plan, decision)


def _gpu_backends(model_path: Path, spec: ModelSpec, device: torch.device,
                  options: PipelineOptions, report: BackendReport) -> StageBackends:
    backend, name = inference_backend(model_path, spec, device, options, report)
    try:
        info = check_compatible(spec, backend.inputs, backend.outputs, model_path)
    except BaseException:
        backend.close()
        raise
    plan = choose_threads(options.infer_threads, options.decode_threads, os.cpu_count() or 1)
    report.record("postprocess", "torch", str(device))
    return StageBackends(decoder_factory(device, options, report, plan.decode),
                         lambda: preprocessor(spec, device, options, report),
                         DeviceRuntime(backend, info.name, name=name, device=str(device)),
                         TorchPostprocessor(spec, device), info,
                         ThreadPlan(1, plan.decode, "GPU: one inference call at a time"))


def inference_backend(model_path: Path, spec: ModelSpec, device: torch.device,
                      options: PipelineOptions, report: BackendReport) -> tuple[Any, str]:
    """TensorRT if an engine is there and TensorRT imports, else torch if a torch model is
    there, with its backend name; DeviceError (naming what is missing) when neither can
    run the model."""
    reasons: list[str] = []
    if options.runtime in ("auto", "tensorrt"):
        engine = _tensorrt_backend(model_path, device, options, reasons)
        if engine is not None:
            report.record("infer", "tensorrt", str(device))
            return engine, "tensorrt"
    if options.runtime in ("auto", "torch"):
        backend = _torch_backend(model_path, spec, device, options, reasons)
        if backend is not None:
            fallback = "; ".join(reasons) if options.runtime == "auto" and reasons else ""
            if fallback:
                log_fallback_once("infer", f"TensorRT not used ({fallback}); torch "
                                           f"{backend.precision} on {device}")
            name = f"torch-{backend.precision}"
            report.record("infer", name, str(device), fallback)
            return backend, name
    raise DeviceError(f"no GPU inference backend for {model_path.name}: " + "; ".join(reasons))


def _tensorrt_backend(model_path: Path, device: torch.device, options: PipelineOptions,
                      reasons: list[str]) -> TensorRTBackend | None:
    """The engine beside the model (or ``options.engine``) when it is current; else None,
    with the reason added to ``reasons``."""
    engine = options.engine or _beside(model_path, ENGINE_SUFFIXES)
    if engine is None:
        reasons.append(_none_beside("TensorRT engine", model_path, ENGINE_SUFFIXES))
        return None
    try:
        stale = check_engine(engine, model_path, current_environment(device.index or 0))
        if stale is None:
            return TensorRTBackend(engine, device=str(device), max_batch=options.batch_size)
        reasons.append(f"TensorRT engine {engine.name} not used, {stale} (rebuild: "
                       f"vidpipe model build-engine {model_path})")
    except DeviceUnavailable as e:
        reasons.append(str(e))
    return None


def _torch_backend(model_path: Path, spec: ModelSpec, device: torch.device,
                   options: PipelineOptions, reasons: list[str]) -> TorchBackend | None:
    """The torch model beside the model (or ``options.torch_model``); else None, with the
    reason added to ``reasons``."""
    source = options.torch_model or _beside(model_path, TORCH_SUFFIXES)
    if source is None:
        reasons.append(_none_beside("torch model", model_path, TORCH_SUFFIXES))
        return None
    try:
        return TorchBackend(source, input_shape=_input_shape(spec),
                            input_name=spec.input.name or "images",
                            input_dtype=spec.input.dtype, device=str(device),
                            precision=options.precision, cuda_graphs=options.cuda_graphs,
                            max_batch=options.batch_size)
    except DeviceUnavailable as e:
        reasons.append(str(e))
        return None


def decoder_factory(device: torch.device, options: PipelineOptions, report: BackendReport,
                    cpu_threads: int) -> Callable[[Any], PictureDecoder]:
    """The decoder for each source connection: NVDEC where it can, else FFmpeg on the CPU."""
    def make(source: Any) -> PictureDecoder:
        if options.decode != "pyav":
            try:
                decoder = NvdecDecoder(source.video, str(device), low_latency=source.live)
                report.record("decode", "nvdec", str(device))
                return decoder
            except DeviceError as e:
                if options.decode == "nvdec" and not options.allow_cpu_fallback:
                    raise
                log_fallback_once("decode", f"NVDEC not used ({e}); decoding with FFmpeg on "
                                            "the CPU, frames reach the GPU via pinned memory")
                report.record("decode", "pyav", "cpu", str(e))
        else:
            report.record("decode", "pyav", "cpu")
        return PyAVDecoder(source.video, threads=cpu_threads,
                           lazy=_converted_lazily(source, options))
    return make


def _converted_lazily(source: Any, options: PipelineOptions) -> bool:
    """Whether a CPU decoder leaves its pictures' RGB conversion until a stage asks for it:
    for a live stream (most of a busy camera's frames are replaced before the detector
    takes them), and with ``--detect-every`` N > 1 (the frames between never reach the
    model, and a sink that draws asks for them itself)."""
    analytics = options.analytics
    return bool(source.live) or (analytics is not None and analytics.active
                                 and analytics.detect_every > 1)


def preprocessor(spec: ModelSpec, device: torch.device, options: PipelineOptions,
                 report: BackendReport) -> Preprocessor:
    """CV-CUDA where it is installed, else torch; one per stream (each owns a stream)."""
    fallback = ""
    if options.preprocess in ("auto", "cvcuda"):
        try:
            cv = CvCudaPreprocessor(spec.input, str(device))
            report.record("preprocess", "cvcuda", str(device))
            return cv
        except DeviceError as e:
            if options.preprocess == "cvcuda" and not options.allow_cpu_fallback:
                raise
            fallback = str(e)
            log_fallback_once("preprocess", f"CV-CUDA not used ({e}); torch on {device}")
    report.record("preprocess", "torch", str(device), fallback)
    return TorchPreprocessor(spec.input, device)


def _beside(model_path: Path, suffixes: Sequence[str]) -> Path | None:
    for suffix in suffixes:
        candidate = model_path.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def _none_beside(what: str, model_path: Path, suffixes: Sequence[str]) -> str:
    return (f"no {what} beside {model_path.name} "
            f"({' or '.join(model_path.stem + s for s in suffixes)})")


def _input_shape(spec: ModelSpec) -> tuple[int, int, int]:
    w, h = spec.input.width, spec.input.height
    return (h, w, 3) if spec.input.layout == "NHWC" else (3, h, w)
