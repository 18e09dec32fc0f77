"""The GPU pipeline: the same Channel / Stage / Pipeline types as build.py, GPU backends inside.

    Source -> DecodeStage (NVDEC, or FFmpeg) -> PreprocessStage (CV-CUDA, or torch)
           -> GpuInferStage (TensorRT, or torch with CUDA graphs) -> GpuPostprocessStage
           -> SinkStage

Each GPU stage owns a CUDA stream; items carry the event recorded after their work
(``Frame.ready``, ``GpuBatch.ready``) and the consumer's stream waits on it, so no thread
waits for the GPU until the kept boxes are copied out in postprocessing (docs/GPU.md).

Backends are chosen per stage, best first, and every fallback is logged once and exported as
``vidpipe_backend_info{stage, backend, device, fallback}``:

- decode: NVDEC (PyNvVideoCodec) -> FFmpeg on the CPU, frames uploaded through pinned memory;
- preprocess: CV-CUDA -> torch;
- infer: a TensorRT engine beside the model (``model.engine`` / ``model.plan``) -> a torch
  model beside it (``model.pt2`` / ``model.ts``, or ``GpuOptions.torch_model``);
- no CUDA, or no GPU runtime for the model at all: the CPU pipeline of build.py, when
  ``GpuOptions.allow_cpu_fallback`` (the default), else DeviceError.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import torch

from models.engine import check_engine, current_environment
from models.runtime.tensorrt import TensorRTBackend
from models.runtime.torch import DeviceUnavailable, Precision, TorchBackend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.build import PipelineOptions, build_pipeline, choose_threads, open_file
from pipelines.channel import Channel, DropPolicy
from pipelines.cuda import (
    distinct_events,
    log_fallback_once,
    require_cuda,
    wait_ready,
)
from pipelines.decode.nvdec import NvdecDecoder
from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.stage import DecodeStage
from pipelines.errors import ChannelClosed, DeviceError
from pipelines.frame import Batch
from pipelines.gpu_metrics import BackendReport
from pipelines.infer import InferStage
from pipelines.metrics import PipelineMetrics
from pipelines.pipeline import Pipeline
from pipelines.postprocess.gpu import GpuBatch, GpuPostprocessStage
from pipelines.preprocess.cvcuda import CvCudaPreprocessor
from pipelines.preprocess.stage import Preprocessor, PreprocessStage
from pipelines.preprocess.torch_cuda import TorchPreprocessor
from pipelines.sinks.stage import Sink, SinkStage
from pipelines.stage import Stage

log = logging.getLogger(__name__)

ENGINE_SUFFIXES = (".engine", ".plan")
TORCH_SUFFIXES = (".pt2", ".ts", ".torchscript")


@dataclass(frozen=True, slots=True)
class GpuOptions:
    """Which GPU backend each stage should use ("auto": the best one that is available)."""

    decode: Literal["auto", "nvdec", "pyav"] = "auto"
    preprocess: Literal["auto", "cvcuda", "torch"] = "auto"
    infer: Literal["auto", "tensorrt", "torch"] = "auto"
    engine: Path | None = None  # TensorRT engine; default: beside the ONNX, same stem
    torch_model: Any = None  # nn.Module, TorchScript or .pt2 path; default: beside the ONNX
    precision: Precision = "fp16"  # torch backend; an engine's precision is its own
    cuda_graphs: bool = True
    allow_cpu_fallback: bool = True


def build_gpu_pipeline(locations: Sequence[str | Path], stream_ids: Sequence[str],
                       model_path: Path, spec: ModelSpec, sinks: Sequence[Sink],
                       metrics: PipelineMetrics, options: PipelineOptions, *,
                       open_source: Callable[[Any, str], Any] = open_file,
                       gpu: GpuOptions | None = None) -> Pipeline:
    """build.build_pipeline for ``options.device == "cuda[:N]"``: sources and model are opened
    here, so a bad file or model fails before any stage starts; whatever was opened is closed
    on failure."""
    gpu = gpu or GpuOptions()
    report = BackendReport.for_registry(metrics.registry)
    try:
        device = require_cuda(options.device)
    except DeviceError as e:
        return _on_cpu(str(e), gpu, report, locations, stream_ids, model_path, spec, sinks,
                       metrics, options, open_source)
    opened: list[Any] = []
    try:
        sources = []
        for location, sid in zip(locations, stream_ids, strict=True):
            sources.append(open_source(location, sid))
            opened.append(sources[-1])
        try:
            backend = inference_backend(model_path, spec, device, gpu, report,
                                        options.batch_size)
        except DeviceError as e:
            for thing in reversed(opened):
                thing.close()
            opened.clear()
            return _on_cpu(str(e), gpu, report, locations, stream_ids, model_path, spec,
                           sinks, metrics, options, open_source)
        opened.append(backend)
        input_info = check_compatible(spec, backend.inputs, backend.outputs, model_path)
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise
    batch_size = min(options.batch_size, backend.max_batch)
    if batch_size < options.batch_size:
        log.warning("%s takes batches of %d at most; batch size lowered from %d",
                    model_path.name, batch_size, options.batch_size)
    decoder_for = decoder_factory(device, gpu, report, choose_threads(options).decode)
    return wire_gpu_pipeline(sources, decoder_for, lambda: preprocessor(spec, device, gpu, report),
                             backend, input_info.name, spec, sinks, metrics, options, batch_size,
                             device)


def wire_gpu_pipeline(sources: Sequence[Any], decoder_for: Callable[[Any], Any],
                      make_preprocessor: Callable[[], Preprocessor], backend: Any,
                      input_name: str, spec: ModelSpec, sinks: Sequence[Sink],
                      metrics: PipelineMetrics, options: PipelineOptions, batch_size: int,
                      device: torch.device) -> Pipeline:
    """Stages and channels around already opened parts (the GPU tests pass their own)."""
    channels: list[Channel[Any]] = []
    stages: list[Stage] = []

    def drop(item: Any, cause: str) -> None:
        frames = item.frames if hasattr(item, "frames") else [getattr(item, "frame", item)]
        for frame in frames:
            metrics.frame_outcome(frame.stream_id, cause)

    def channel(name: str, policy: DropPolicy = "block", producers: int = 1) -> Channel[Any]:
        if options.name:
            name = f"{options.name}/{name}"
        ch: Channel[Any] = Channel(name, options.capacity, policy, producers=producers,
                                   on_drop=drop)
        metrics.register_channel(name, ch.capacity, ch.__len__)
        channels.append(ch)
        return ch

    prepared = channel("prepared", producers=len(sources))
    for source in sources:
        policy = options.policy or ("drop_oldest" if source.live else "block")
        decoded = channel(f"decoded/{source.stream_id}", policy)
        stages.append(DecodeStage(source, decoder_for, decoded, metrics,
                                     frame_limit=options.frame_limit))
        stages.append(PreprocessStage(source.stream_id, make_preprocessor(), decoded, prepared,
                                      metrics))
    inferred = channel("inferred")
    results = channel("results")
    stages.append(GpuInferStage(backend, input_name, prepared, inferred, metrics,
                                batch_size=batch_size, batch_timeout_ms=options.batch_timeout_ms,
                                max_age_s=options.max_age_s))
    keep_images = any(s.wants_images for s in sinks)
    stages.append(GpuPostprocessStage(spec, inferred, results, metrics, device=device,
                                      keep_images=keep_images))
    stages.append(SinkStage(sinks, spec, results, metrics))
    return Pipeline(stages, channels, metrics, [s.stream_id for s in sources])


class GpuInferStage(InferStage):
    """InferStage for a GPU backend (acquire / launch). Batches of all streams are gathered
    into the slot's preallocated input buffer on the slot's stream, after the preprocess
    events, while the other slot's batch may still run: the double buffering. The outputs go
    on as a GpuBatch with the launch's events; nothing here waits for the GPU."""

    async def run(self) -> None:
        try:
            while True:
                try:
                    taken = await self.take(self.input, self.batch_size, self.batch_timeout_s)
                except ChannelClosed:
                    return
                fresh = self._fresh(taken)
                if not fresh:
                    continue
                frames = [f for b in fresh for f in b.frames]
                self.metrics.observe_batch(len(frames))
                # not self.call: enqueueing is not the work; postprocess records the GPU time
                done, _ = await self.worker.run(self._launch, fresh)
                letterboxes = [lb for b in fresh for lb in b.letterboxes]
                output = cast(Channel[Any], self.output)  # carries GpuBatches, not Batches
                await output.put(GpuBatch(frames, letterboxes, done.outputs, done.ready,
                                          done.started))
        finally:
            self.output.close()

    def _launch(self, batches: list[Batch]) -> Any:
        backend: Any = self.backend
        slot = backend.acquire()
        target = slot.inputs[self.input_name]
        frames = [f for b in batches for f in b.frames]
        scope = torch.cuda.stream(slot.stream) if slot.stream is not None else nullcontext()
        with scope:
            if slot.stream is not None:
                wait_ready(slot.stream, distinct_events(frames), [b.tensor for b in batches])
            rows = 0
            for batch in batches:
                target[rows:rows + len(batch)].copy_(batch.tensor, non_blocking=True)
                rows += len(batch)
        return backend.launch(slot, rows)


def inference_backend(model_path: Path, spec: ModelSpec, device: torch.device, gpu: GpuOptions,
                      report: BackendReport, batch_size: int) -> Any:
    """TensorRT if an engine is there and TensorRT imports, else torch if a torch model is
    there; DeviceError (naming what is missing) when neither can run the model."""
    reasons = []
    if gpu.infer in ("auto", "tensorrt"):
        engine = gpu.engine or _beside(model_path, ENGINE_SUFFIXES)
        if engine is None:
            reasons.append(f"no TensorRT engine beside {model_path.name} "
                           f"({' or '.join(model_path.stem + s for s in ENGINE_SUFFIXES)})")
        else:
            try:
                stale = check_engine(engine, model_path, current_environment(device.index or 0))
                if stale is None:
                    trt = TensorRTBackend(engine, device=str(device), max_batch=batch_size)
                    report.record("infer", "tensorrt", str(device))
                    return trt
                reasons.append(f"TensorRT engine {engine.name} not used, {stale} (rebuild: "
                               f"vidpipe model build-engine {model_path})")
            except DeviceUnavailable as e:
                reasons.append(str(e))
    if gpu.infer in ("auto", "torch"):
        source = gpu.torch_model or _beside(model_path, TORCH_SUFFIXES)
        if source is None:
            reasons.append(f"no torch model beside {model_path.name} "
                           f"({' or '.join(model_path.stem + s for s in TORCH_SUFFIXES)})")
        else:
            try:
                backend = TorchBackend(source, input_shape=_input_shape(spec),
                                       input_name=spec.input.name or "images",
                                       input_dtype=spec.input.dtype, device=str(device),
                                       precision=gpu.precision, cuda_graphs=gpu.cuda_graphs,
                                       max_batch=batch_size)
            except DeviceUnavailable as e:
                reasons.append(str(e))
            else:
                fallback = "; ".join(reasons) if gpu.infer == "auto" and reasons else ""
                if fallback:
                    log_fallback_once("infer", f"TensorRT not used ({fallback}); torch "
                                               f"{backend.precision} on {device}")
                report.record("infer", f"torch-{backend.precision}", str(device), fallback)
                return backend
    raise DeviceError(f"no GPU inference backend for {model_path.name}: " + "; ".join(reasons))


def decoder_factory(device: torch.device, gpu: GpuOptions, report: BackendReport,
                    cpu_threads: int) -> Callable[[Any], Any]:
    """The decoder for each source connection: NVDEC where it can, else FFmpeg on the CPU."""
    def make(source: Any) -> Any:
        if gpu.decode != "pyav":
            try:
                decoder = NvdecDecoder(source.video, str(device), low_latency=source.live)
                report.record("decode", "nvdec", str(device))
                return decoder
            except DeviceError as e:
                if gpu.decode == "nvdec" and not gpu.allow_cpu_fallback:
                    raise
                log_fallback_once("decode", f"NVDEC not used ({e}); decoding with FFmpeg on "
                                            "the CPU, frames reach the GPU via pinned memory")
                report.record("decode", "pyav", "cpu", str(e))
        else:
            report.record("decode", "pyav", "cpu")
        return PyAVDecoder(source.video, threads=cpu_threads)
    return make


def preprocessor(spec: ModelSpec, device: torch.device, gpu: GpuOptions,
                 report: BackendReport) -> Preprocessor:
    """CV-CUDA where it is installed, else torch; one per stream (each owns a stream)."""
    fallback = ""
    if gpu.preprocess in ("auto", "cvcuda"):
        try:
            cv = CvCudaPreprocessor(spec.input, str(device))
            report.record("preprocess", "cvcuda", str(device))
            return cv
        except DeviceError as e:
            if gpu.preprocess == "cvcuda" and not gpu.allow_cpu_fallback:
                raise
            fallback = str(e)
            log_fallback_once("preprocess", f"CV-CUDA not used ({e}); torch on {device}")
    report.record("preprocess", "torch", str(device), fallback)
    return TorchPreprocessor(spec.input, device)


def _on_cpu(reason: str, gpu: GpuOptions, report: BackendReport,
            locations: Sequence[str | Path], stream_ids: Sequence[str], model_path: Path,
            spec: ModelSpec, sinks: Sequence[Sink], metrics: PipelineMetrics,
            options: PipelineOptions, open_source: Callable[[Any, str], Any]) -> Pipeline:
    """The CPU pipeline instead, when allowed: logged once and exported per stage."""
    if not gpu.allow_cpu_fallback:
        raise DeviceError(reason)
    log_fallback_once("pipeline", f"running on the CPU: {reason}")
    for stage, backend in (("decode", "pyav"), ("preprocess", "opencv"),
                           ("infer", "onnxruntime"), ("postprocess", "numpy")):
        report.record(stage, backend, "cpu", reason)
    return build_pipeline(locations, stream_ids, model_path, spec, sinks, metrics,
                          dataclasses.replace(options, device="cpu"), open_source=open_source)


def _beside(model_path: Path, suffixes: Sequence[str]) -> Path | None:
    for suffix in suffixes:
        candidate = model_path.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def _input_shape(spec: ModelSpec) -> tuple[int, int, int]:
    w, h = spec.input.width, spec.input.height
    return (h, w, 3) if spec.input.layout == "NHWC" else (3, h, w)
