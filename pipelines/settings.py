"""What a user may set for a pipeline (``PipelineSettings``: the CLI's flags, the service's
config keys and ``VIDPIPE_*`` variables, the bench), checked by pydantic; unknown keys are
errors. ``pipelines.options`` adds what a run decides. This module imports pydantic and
nothing of the engine, so the CLI takes its defaults and choices from here at once."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DecodeChoice = Literal["auto", "pyav", "nvdec"]
PreprocessChoice = Literal["auto", "opencv", "cvcuda", "torch"]
RuntimeChoice = Literal["auto", "onnxruntime", "openvino", "openvino-bf16", "tensorrt", "torch"]
Precision = Literal["fp16", "fp32"]


class PipelineSettings(BaseModel):
    """What a user sets for a pipeline, on any device. The service's config holds these keys
    at its top level; ``vidpipe run`` and ``vidpipe bench`` have a flag for each."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    device: str = "cpu"
    batch_size: int = Field(default=4, ge=1, le=64)
    batch_timeout_ms: float = Field(default=10.0, ge=0)
    # what batching may cost a frame: batches are capped so that a frame waiting for its
    # batch or behind a full call, then behind a queued one and in its own, stays within it
    # (the CPU plan times a call; None: no cap)
    latency_budget_ms: float | None = Field(default=100.0, gt=0)
    infer_threads: int | None = Field(default=None, ge=0)  # None: from the thread plan
    decode_threads: int | None = Field(default=None, ge=0)  # 0: FFmpeg's own choice
    # each stage's backend; the GPU ones apply where the device is cuda[:N]
    decode: DecodeChoice = "auto"
    preprocess: PreprocessChoice = "auto"
    runtime: RuntimeChoice = "auto"
    engine: Path | None = None  # TensorRT engine; default: beside the ONNX, same stem
    # torch runtime; an engine's precision is its own. FP32 by default: FP16 is other
    # arithmetic (2.6% of shapes-yolo's boxes changed on an H200, docs/GPU.md), opted into
    precision: Precision = "fp32"
    cuda_graphs: bool = True
    allow_cpu_fallback: bool = True  # no CUDA, or no GPU runtime: the CPU backends, logged
    # live: a stream decoding this far behind its camera skips to the next key frame
    max_lag_ms: float = Field(default=250.0, gt=0)
    # the thread plan and the CPU runtime's choice, measured once and reused from the cache
    # (VIDPIPE_CACHE_DIR) while the model, the machine, the libraries and the options are
    # the same; False measures again (and stores the new plan)
    plan_cache: bool = True
