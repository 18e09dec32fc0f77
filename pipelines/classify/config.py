"""What a stream's classifiers are, as checked data: the CLI's ``--classify`` and the
service's ``classifiers:`` block per stream both build these.

A classifier runs on crops of confirmed tracks: once when a track is confirmed, and again
when its picture got better (score x box area more than ``better`` above the one it was
last classified on) and at least ``reclassify_s`` after the last time.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError

from models.checked import Checked, Number, describe_error
from pipelines.errors import ConfigError

ClassifierFormat = Literal["imagenet", "ultralytics-cls"]


class ClassifierConfig(Checked):
    """``model``: a zoo name, a folder with a card, or an ONNX file (with a card beside it, or
    ``format`` and ``classes``: a file of labels, one per line); ``objects``: the detector's
    classes it runs on (None: all)."""

    model: str = Field(min_length=1, max_length=1024)
    format: ClassifierFormat | None = None
    classes: str | None = Field(default=None, max_length=1024)
    reclassify_s: Number = Field(default=2.0, ge=0.0, le=3600.0)
    better: Number = Field(default=0.25, ge=0.0, le=100.0)
    objects: list[str] | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        """What names one loaded model: streams with the same key share it."""
        return self.model, self.format, self.classes


def parse_classify(text: str) -> ClassifierConfig:
    """``MODEL[;KEY=VALUE...]`` (the ``--classify`` flag; keys: format, classes,
    reclassify_s, better, objects as LABEL,LABEL) -> ClassifierConfig, or ConfigError."""
    model, *pairs = [part.strip() for part in text.split(";")]
    values: dict[str, object] = {"model": model}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--classify {text!r}: expected MODEL[;KEY=VALUE...], got "
                              f"{pair!r}")
        key, value = key.strip(), value.strip()
        if key in ("reclassify_s", "better"):
            try:
                values[key] = float(value)
            except ValueError:
                raise ConfigError(f"--classify {text!r}: {key} must be a number") from None
        else:
            values[key] = value.split(",") if key == "objects" else value
    try:
        return ClassifierConfig.model_validate(values)
    except ValueError as e:
        raise ConfigError(f"--classify {text!r}: {_reason(e)}") from None


def _reason(error: ValueError) -> str:
    return describe_error(error) if isinstance(error, ValidationError) else str(error)
