"""The one typed configuration of a pipeline: what a user may set (``PipelineSettings``, in
``pipelines.settings``) and what a run adds (``PipelineOptions``), checked by pydantic;
unknown keys are errors."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from models.checked import describe_error
from pipelines.analytics.config import AnalyticsConfig
from pipelines.channel import DropPolicy
from pipelines.errors import ConfigError
from pipelines.settings import PipelineSettings


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
    # called with each classifier call's crops and answers, on the analytics thread
    classify_tap: Any = None
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
