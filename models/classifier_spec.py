"""ClassifierSpec: what a pipeline must know about a classifier to feed it crops and read it.

A classifier is an ONNX file plus a ``card.yaml`` with ``kind: classifier``: how a crop is
cut from the picture (``crop``: the box grown by ``context`` of its size on each side) and
made the model's input (``input``: size, resize, colour order, normalisation), and its heads
(one output each: labels and how its numbers become a confidence). A single-label model has
one head; one with several attribute heads names each. The two layouts users bring without
a card — torchvision's ImageNet models (``imagenet``) and Ultralytics' ``-cls`` export —
get theirs from ``classifier_from_graph`` (``models/classifier_zoo.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from models.checked import Checked, Number, describe_error
from models.spec import InputSpec, SpecError, read_card

# stretch: the crop resized to the input whatever its shape (what vidpipe's own classifier
# is trained on); letterbox: fitted, padded; center_crop: the shorter side fitted, the
# longer one cut to the middle (torchvision's and Ultralytics' evaluation transform)
CropResize = Literal["stretch", "letterbox", "center_crop"]
Activation = Literal["softmax", "sigmoid", "none"]
CLASSIFIER_KIND = "classifier"


class CropSpec(Checked):
    """How much of the picture around a box the model sees: ``context`` of the box's width
    and height added on each side (clipped to the picture)."""

    context: Number = Field(default=0.1, ge=0.0, le=1.0)


class ClassifierInput(InputSpec):
    """As a detector's input (``InputSpec``), but a crop may also be cut to fill the input
    (``center_crop``), and is stretched by default."""

    resize: CropResize = "stretch"  # type: ignore[assignment]


class Head(Checked):
    """One answer of the model: ``output`` (the graph output; None: the only one) holds one
    number per label; ``activation`` turns them into confidences (``none``: they already
    are, as in an export that ends in a softmax)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    output: str | None = None
    labels: list[str] = Field(min_length=1)
    activation: Activation = "softmax"


class ClassifierSpec(Checked):
    kind: Literal["classifier"]
    name: str
    file: str = "model.onnx"
    crop: CropSpec = Field(default_factory=CropSpec)
    input: ClassifierInput
    heads: list[Head] = Field(min_length=1)
    description: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    licence: str = ""
    measured: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _heads(self) -> ClassifierSpec:
        names = [h.name for h in self.heads]
        if len(set(names)) != len(names):
            raise ValueError(f"head names must differ, got {names}")
        if len(self.heads) > 1 and any(h.output is None for h in self.heads):
            raise ValueError("a classifier with several heads names each head's output")
        return self


def is_classifier_card(path: Path) -> bool:
    """Whether the card at ``path`` says ``kind: classifier`` (False for a detector's card
    and for one that cannot be read: loading it then says why)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and data.get("kind") == CLASSIFIER_KIND


def load_classifier_card(path: Path) -> ClassifierSpec:
    """Read and validate a classifier's card.yaml; errors name the file and the bad key."""
    data = read_card(path, "classifier card")
    if data.get("kind") != CLASSIFIER_KIND:
        raise SpecError(f"{path} is not a classifier's card (it needs kind: classifier; "
                        f"a detector goes to --model)")
    try:
        return ClassifierSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(describe_error(e, f"classifier card {path}")) from e
