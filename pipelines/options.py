"""PipelineOptions: everything a pipeline is built with besides its sources, model and sinks,
including which backend each stage runs ("auto": the best one the device has)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pipelines.channel import DropPolicy
from pipelines.errors import ConfigError

DecodeChoice = Literal["auto", "pyav", "nvdec"]
PreprocessChoice = Literal["auto", "opencv", "cvcuda", "torch"]
RuntimeChoice = Literal["auto", "onnxruntime", "tensorrt", "torch"]
Precision = Literal["fp16", "fp32"]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    device: str = "cpu"
    batch_size: int = 4
    batch_timeout_ms: float = 10.0
    policy: DropPolicy | None = None  # None: block for files, drop_oldest for live sources
    capacity: int = 8  # items per channel
    infer_threads: int | None = None  # None: from the thread plan
    decode_threads: int | None = None
    # decode straight to the model's letterbox size when no sink needs the full picture
    decode_scaled: bool = True
    max_age_s: float | None = None  # live: drop frames older than this at inference
    frame_limit: int | None = None  # stop each stream after this many frames
    name: str = ""  # prefix of channel names, where several pipelines share one registry
    # per-stage backends; the GPU ones apply where the device is cuda[:N]
    decode: DecodeChoice = "auto"
    preprocess: PreprocessChoice = "auto"
    runtime: RuntimeChoice = "auto"
    engine: Path | None = None  # TensorRT engine; default: beside the ONNX, same stem
    torch_model: Any = None  # nn.Module, TorchScript or .pt2 path; default: beside the ONNX
    precision: Precision = "fp16"  # torch runtime; an engine's precision is its own
    cuda_graphs: bool = True
    allow_cpu_fallback: bool = True  # no CUDA, or no GPU runtime: the CPU backends, logged

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 64:
            raise ConfigError(f"batch size must be 1..64, got {self.batch_size}")
        if self.batch_timeout_ms < 0:
            raise ConfigError(f"batch timeout must be >= 0 ms, got {self.batch_timeout_ms}")
        if self.capacity < 1:
            raise ConfigError(f"channel capacity must be >= 1, got {self.capacity}")
        for name in ("infer_threads", "decode_threads"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 0, got {value}")
        for name, kind in (("decode", DecodeChoice), ("preprocess", PreprocessChoice),
                           ("runtime", RuntimeChoice), ("precision", Precision)):
            allowed = get_args(kind)
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} backend must be one of {', '.join(allowed)}, got "
                                  f"{getattr(self, name)!r}")
