"""The options several commands share, as typer annotations. Defaults and choices come from
``PipelineSettings`` (the one typed configuration), so ``--help`` lists what the code
accepts and the CLI, the service's config and the bench cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.settings import (
    DecodeChoice,
    PipelineSettings,
    Precision,
    PreprocessChoice,
    RuntimeChoice,
)

DEFAULTS = PipelineSettings()  # the pipeline's defaults: the options' defaults
LATENCY_BUDGET_MS = DEFAULTS.latency_budget_ms or 0.0  # the flag's 0: None, no cap


ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="Zoo name (default: ssdlite-person), a folder with card.yaml, or an "
    ".onnx file (its card.yaml beside it, or give --format and --classes).")]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="Output layout of a model without a card: yolov8 ([B,4+C,N]), yolov5 "
    "([B,N,5+C]) or ssd (boxes/scores/classes, NMS inside).")]
ClassesOpt = Annotated[Path | None, typer.Option(
    "--classes", help="Text file of class names, one per line, for a model without a card.")]
InputSizeOpt = Annotated[str | None, typer.Option(
    "--input-size", help="WxH, for a model without a card whose input size is dynamic.")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="cpu (FFmpeg, OpenCV, ONNX Runtime) or cuda[:N] (NVDEC, torch "
    "preprocessing, TensorRT or torch; each falls back to the next, logged once; without CUDA "
    "the CPU pipeline runs, with a warning).")]
OutOpt = Annotated[Path, typer.Option(
    "--out", "-o", help="Folder for detections.jsonl, summary.json and annotated videos.")]
DecodeOpt = Annotated[DecodeChoice, typer.Option(
    "--decode", help="Decoder: auto (the device's best), pyav (FFmpeg on the CPU) or nvdec.")]
PreprocessOpt = Annotated[PreprocessChoice, typer.Option(
    "--preprocess", help="Preprocessor: auto (opencv on the CPU, torch on a GPU: both give "
    "the reference's pixels for a bilinear card, torch within a grey level for the other "
    "filters), opencv, torch, or cvcuda (GPU; its resize is not OpenCV's and "
    "was never measured against it: opt in knowingly).")]
RuntimeOpt = Annotated[RuntimeChoice, typer.Option(
    "--runtime", help="Inference runtime: auto, onnxruntime or openvino (CPU; auto takes "
    "OpenVINO where it is installed, measured faster and agreeing with ONNX Runtime), "
    "openvino-bf16 (OpenVINO in bfloat16: faster on AMX CPUs, but not the model's own "
    "arithmetic: check it with vidpipe model check --runtime openvino-bf16), tensorrt or "
    "torch (GPU).")]
PrecisionOpt = Annotated[Precision, typer.Option(
    "--precision", help="GPU, torch runtime: fp32 (the default: the model's own arithmetic; "
    "shapes-yolo on an H200 gave the CPU pipeline's boxes, 345 of 346) or fp16 (faster, but "
    "other numbers: 337 of 346 boxes the same; docs/GPU.md). A TensorRT engine runs in the "
    "precision it was built with.")]
BatchOpt = Annotated[int, typer.Option(
    "--batch-size", "-b", help="Most frames per inference call, taken across all "
    "streams.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--batch-timeout-ms", help="Longest wait for a batch to fill after its first "
    "frame; on the CPU only while every inference thread is busy (a frame is not held while "
    "one is free).")]
LatencyBudgetOpt = Annotated[float, typer.Option(
    "--latency-budget-ms", min=0.0, help="What batching may cost a frame: batches are "
    "capped so that a frame waiting for its batch to fill or behind a full call, then "
    "behind a queued one and in its own call, stays within it (a frame's call is timed "
    "when the CPU plan is measured; 0: no cap).")]
MaxLagOpt = Annotated[float, typer.Option(
    "--max-lag-ms", min=1.0, help="Cameras: a stream whose decoding falls this far behind "
    "skips to the next key frame (the frames skipped count as dropped_stale), so that its "
    "latency stays bounded when there are more cameras than the cores can decode.")]
InferThreadsOpt = Annotated[int | None, typer.Option(
    "--infer-threads", help="ONNX Runtime threads of one inference call at a time "
    "(default: chosen from the measured cost of decoding vs inference, as two calls at once "
    "where the threads split evenly; logged, and kept in the cache for the next run).")]
DecodeThreadsOpt = Annotated[int | None, typer.Option(
    "--decode-threads", help="FFmpeg threads per stream (default: 1, or cores / files "
    "when decoding a file on one thread costs over twice inference's time for its frames; "
    "0 = FFmpeg's choice).")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Measure the thread plan and the runtime choice again instead of "
    "taking them from the cache (VIDPIPE_CACHE_DIR), and store the new ones.")]
LogLevelOpt = Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")]
