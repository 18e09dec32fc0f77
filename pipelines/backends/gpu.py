"""The GPU's backends, best first: NVDEC -> FFmpeg with pinned uploads; torch preprocessing
(CV-CUDA only when asked for); a TensorRT engine beside the model -> a torch model beside it;
decoding and NMS in torch.
Imported only when a CUDA device is asked for (``pipelines.backends.open_backends``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from models.backends.device import DeviceUnavailable
from models.backends.tensorrt import TensorRTBackend
from models.backends.torch import TorchBackend
from models.engine import check_engine, current_environment
from models.errors import ModelError
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.backends.common import StageBackends, converted_lazily
from pipelines.cuda import log_fallback_once, require_cuda
from pipelines.decode.nvdec import NvdecDecoder
from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.stage import PictureDecoder
from pipelines.errors import DeviceError
from pipelines.gpu_metrics import BackendReport
from pipelines.infer.device import DeviceRuntime
from pipelines.options import PipelineOptions
from pipelines.plan import RunPlan
from pipelines.postprocess.gpu import TorchPostprocessor
from pipelines.preprocess.cvcuda import CvCudaPreprocessor
from pipelines.preprocess.preprocessor import Preprocessor
from pipelines.preprocess.torch_cuda import TorchPreprocessor
from pipelines.threads import ThreadPlan, choose_threads

ENGINE_SUFFIXES = (".engine", ".plan")
# model.pt: TorchScript, or the checkpoint a vidpipe training run writes beside its ONNX export
TORCH_SUFFIXES = (".pt2", ".ts", ".torchscript", ".pt")


def gpu_backends(model_path: Path, spec: ModelSpec, options: PipelineOptions,
                 report: BackendReport) -> StageBackends:
    """The GPU backends for ``options.device``; DeviceError where it cannot be used."""
    device = require_cuda(options.device)
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
                         RunPlan(ThreadPlan(1, plan.decode, "GPU: one inference call at a time")))


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
    beside = None if options.torch_model is not None else _beside(model_path, TORCH_SUFFIXES)
    source = options.torch_model or beside
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
    except ModelError as e:
        if beside is None:  # the torch model the user named: its error is theirs to see
            raise
        # a file found beside the model that vidpipe cannot run (another tool's model.pt)
        reasons.append(f"{beside.name} beside {model_path.name} is not a torch model vidpipe "
                       f"loads ({e})")
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
                           lazy=converted_lazily(source, options))
    return make


def preprocessor(spec: ModelSpec, device: torch.device, options: PipelineOptions,
                 report: BackendReport) -> Preprocessor:
    """torch, whose resize is OpenCV's arithmetic (the reference's pixels, measured equal);
    CV-CUDA only when asked for (``preprocess="cvcuda"``): its resize is its own and has never
    been measured against the reference. One per stream (each owns a stream)."""
    fallback = ""
    if options.preprocess == "cvcuda":
        try:
            cv = CvCudaPreprocessor(spec.input, str(device))
            report.record("preprocess", "cvcuda", str(device))
            return cv
        except DeviceError as e:
            if not options.allow_cpu_fallback:
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
