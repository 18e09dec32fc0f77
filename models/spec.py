"""ModelSpec: what a pipeline must know about a detector to feed it and read its answers.

A model is an ONNX file plus a ``card.yaml`` that holds this spec. Users bring their own ONNX
with ``--format`` and ``--classes`` (or a card beside it); what the card leaves out is read
from the ONNX graph itself (input name, size, layout and dtype).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import Field, ValidationError, model_validator

from models.checked import Checked, describe_error
from models.errors import ModelError

OutputFormat = Literal["yolov8", "yolov5", "ssd"]
# How a picture is resized to the model's input: the filter the model was trained with.
# Bilinear is what Ultralytics, the TF Object Detection API and torchvision detectors use.
Interpolation = Literal["bilinear", "area", "nearest", "bicubic"]
INTERPOLATIONS: tuple[str, ...] = get_args(Interpolation)
OUTPUT_FORMATS: tuple[str, ...] = ("yolov8", "yolov5", "ssd")
ZOO_DIR = Path(__file__).resolve().parent / "zoo"
DEFAULT_MODEL = "ssdlite-person"


class SpecError(ModelError):
    """The card or the ONNX graph does not describe a model vidpipe can run."""


class InputSpec(Checked):
    name: str | None = None  # None: the graph's only input
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    dtype: Literal["float32", "uint8"] = "float32"
    color: Literal["RGB", "BGR"] = "RGB"
    resize: Literal["letterbox", "stretch"] = "letterbox"
    interpolation: Interpolation = "bilinear"  # every backend resizes with this filter
    pad_value: int = Field(default=114, ge=0, le=255)
    # float inputs: x = (pixel / 255 - mean) / std, per channel in ``color`` order
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """One image's tensor shape in ``layout``, without the batch axis."""
        if self.layout == "NCHW":
            return (3, self.height, self.width)
        return (self.height, self.width, 3)


class OutputSpec(Checked):
    format: OutputFormat
    # ssd only: which graph output holds what (boxes, scores, classes, count)
    names: dict[str, str] = Field(default_factory=dict)
    class_offset: int = 0  # subtract from the model's class numbers (TF detectors count from 1)
    score_threshold: float = Field(default=0.25, ge=0.0, le=1.0)
    iou_threshold: float = Field(default=0.45, ge=0.0, le=1.0)
    max_detections: int = Field(default=300, gt=0)

    @model_validator(mode="after")
    def _ssd_names(self) -> OutputSpec:
        if self.format == "ssd":
            missing = {"boxes", "scores", "classes"} - set(self.names)
            if missing:
                raise ValueError(f"ssd output needs names for {sorted(missing)}")
        return self


class ModelSpec(Checked):
    name: str
    file: str = "model.onnx"
    input: InputSpec
    output: OutputSpec
    classes: list[str] = Field(min_length=1)
    description: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    licence: str = ""
    measured: dict[str, Any] = Field(default_factory=dict)
    # tracker settings fitted to this model (`vidpipe model tune-tracker`): what a stream's
    # tracker takes where its own settings say nothing
    tracker: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def label(self, class_id: int) -> str:
        if 0 <= class_id < len(self.classes):
            return self.classes[class_id]
        return f"class{class_id}"


def read_card(path: Path, what: str = "model card") -> dict[str, Any]:
    """A card.yaml's mapping; SpecError naming the file where it cannot be read or is not
    a mapping."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read {what} {path}: {e}") from e
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must be a mapping, got {type(data).__name__}")
    return data


def load_card(path: Path) -> ModelSpec:
    """Read and validate a card.yaml; errors name the file and the bad key."""
    data = read_card(path)
    if data.get("kind") == "classifier":
        raise SpecError(f"{path} is a classifier's card: it runs on tracked objects "
                        f"(--classify), not as the detector (--model)")
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(describe_error(e, f"model card {path}")) from e


def read_classes(path: Path) -> list[str]:
    """Class names from a text file, one per line (blank lines ignored)."""
    try:
        names = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except OSError as e:
        raise SpecError(f"cannot read class names from {path}: {e.strerror}") from e
    if not names:
        raise SpecError(f"class names file {path} is empty; expected one name per line")
    return names
