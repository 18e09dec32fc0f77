"""The one typed configuration of a pipeline: what a user may set (``PipelineSettings``: the
CLI's flags, the service's config keys and ``VIDPIPE_*`` variables, the bench) and what a
run adds (``PipelineOptions``), checked by pydantic; unknown keys are errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipelines.analytics.config import AnalyticsConfig
from pipelines.channel import DropPolicy
from pipelines.errors import ConfigError

DecodeChoice = Literal["auto", "pyav", "nvdec"]
PreprocessChoice = Literal["auto", "opencv", "cvcuda", "torch"]
RuntimeChoice = Literal["auto", "onnxruntime", "openvino", "openvino-bf16", "tensorrt", "torch"]
Precision = Literal["fp16", "fp32"]


def describe_error(error: ValidationError, source: str = "", *, words: bool = False) -> str:
    """The first problem, as one line naming the key (after ``source``, where the keys came
    from, if given; with ``words``, as words: "batch size") and what it allows."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    if words:
        where = where.replace("_", " ")
    allowed = first.get("ctx", {}).get("expected")
    extra = f" (allowed: {allowed})" if allowed and str(allowed) not in first["msg"] else ""
    return f"{source + ': ' if source else ''}{where}: {first['msg']}{extra}"


class PipelineSettings(BaseModel):
    """What a user sets for a pipeline, on any device. The service's config holds these keys
    at its top level; ``vidpipe run`` and ``vidpipe bench`` have a flag for each."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    device: str = "cpu"
    batch_size: int = Field(default=4, ge=1, le=64)
    batch_timeout_ms: float = Field(default=10.0, ge=0)
    infer_threads: int | None = Field(default=None, ge=0)  # None: from the thread plan
    decode_threads: int | None = Field(default=None, ge=0)  # 0: FFmpeg's own choice
    # each stage's backend; the GPU ones apply where the device is cuda[:N]
    decode: DecodeChoice = "auto"
    preprocess: PreprocessChoice = "auto"
    runtime: RuntimeChoice = "auto"
    engine: Path | None = None  # TensorRT engine; default: beside the ONNX, same stem
    precision: Precision = "fp16"  # torch runtime; an engine's precision is its own
    cuda_graphs: bool = True
    allow_cpu_fallback: bool = True  # no CUDA, or no GPU runtime: the CPU backends, logged
    # live: a stream decoding this far behind its camera skips to the next key frame
    max_lag_ms: float = Field(default=250.0, gt=0)


class PipelineOptions(PipelineSettings):
    """The settings plus what the code that builds a pipeline decides for its run. Built with
    keywords; a bad value is a ConfigError naming the key."""

    policy: DropPolicy | None = None  # None: block for files, drop_oldest for live sources
    capacity: int = Field(default=8, ge=1)  # items per channel
    # pictures leave the decoder at the model's letterbox size when no sink needs them whole
    decode_scaled: bool = True
    # ... shrunk by FFmpeg's scaler instead of the card's OpenCV filter: faster, but it
    # changes what the model sees (docs/MODELS.md, "What the model sees"); opt-in
    ffmpeg_resize: bool = False
    max_age_s: float | None = None  # live: drop frames older than this at inference
    frame_limit: int | None = Field(default=None, ge=1)  # stop each stream after this many
    name: str = ""  # prefix of channel names, where several pipelines share one registry
    torch_model: Any = None  # nn.Module, TorchScript or .pt2 path; default: beside the ONNX
    # called with each Batch as the model gets it, on the inference thread (model check)
    input_tap: Any = None
    # every stream's tracker, lines, zones and detection interval (None: detections only)
    analytics: AnalyticsConfig | None = None

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise ConfigError(describe_error(e, words=True)) from None

    @classmethod
    def from_settings(cls, settings: PipelineSettings, **run: Any) -> PipelineOptions:
        """The options of a run with ``settings`` (of any PipelineSettings, such as the
        service's config) and the run's own ``run`` values."""
        keys = PipelineSettings.model_fields
        return cls(**{k: getattr(settings, k) for k in keys}, **run)

    def replace(self, **changes: Any) -> PipelineOptions:
        """A copy with ``changes``, checked like a new one."""
        return type(self)(**{**{k: getattr(self, k) for k in type(self).model_fields},
                             **changes})
