"""Finding a classifier: a zoo name, a folder or an ONNX file with its card, or a card-less
ONNX in one of the two layouts users bring (``--format``):

- ``imagenet``: torchvision's (and timm's) ImageNet models: a float NCHW input, ImageNet's
  mean and std, the crop's shorter side fitted and its middle cut, logits out (softmax);
- ``ultralytics-cls``: Ultralytics' ``yolo export format=onnx`` of a ``-cls`` model: x / 255,
  the same fit and cut, probabilities out (its graph ends in a softmax), the labels read from
  the ``names`` the export writes into the graph's metadata.

Labels come from ``--classes`` (one per line) where given, then from the graph, else they
are numbered.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Any, Literal, get_args

from models.classifier_spec import (
    ClassifierSpec,
    is_classifier_card,
    load_classifier_card,
)
from models.errors import ModelError
from models.spec import ZOO_DIR, SpecError, read_classes
from models.zoo import read_graph

log = logging.getLogger(__name__)
ClassifierFormat = Literal["imagenet", "ultralytics-cls"]
CLASSIFIER_FORMATS: tuple[str, ...] = get_args(ClassifierFormat)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def classifier_names() -> list[str]:
    """The zoo's classifiers."""
    return sorted(p.parent.name for p in ZOO_DIR.glob("*/card.yaml") if is_classifier_card(p))


def resolve_classifier(model: str | Path, *, output_format: str | None = None,
                       classes: Path | None = None) -> tuple[Path, ClassifierSpec]:
    """The ONNX file and card of the classifier ``model`` names."""
    name = str(model)
    zoo_card = ZOO_DIR / name / "card.yaml"
    if "/" not in name and not name.endswith(".onnx") and zoo_card.is_file():
        return _from_card(zoo_card, None)
    path = Path(name)
    if path.is_dir():
        if not (path / "card.yaml").is_file():
            raise SpecError(f"classifier folder {path} has no card.yaml")
        return _from_card(path / "card.yaml", None)
    if not path.is_file():
        raise SpecError(f"classifier {name!r}: no such file, folder or zoo classifier "
                        f"(zoo: {', '.join(classifier_names()) or 'none'})")
    card = path.parent / "card.yaml"
    if output_format is None and card.is_file():
        return _from_card(card, path)
    if output_format is None:
        raise SpecError(f"classifier {path} has no card.yaml beside it: give its format "
                        f"({' | '.join(CLASSIFIER_FORMATS)}) and its classes")
    return path, classifier_from_graph(path, output_format, classes)


def _from_card(card: Path, onnx_path: Path | None) -> tuple[Path, ClassifierSpec]:
    spec = load_classifier_card(card)
    path = onnx_path or card.parent / spec.file
    if not path.is_file():
        raise SpecError(f"classifier card {card} names {spec.file}, which does not exist")
    return path, spec


def classifier_from_graph(path: Path, output_format: str,
                          classes: Path | None = None) -> ClassifierSpec:
    """A card for a user's card-less classifier in one of ``CLASSIFIER_FORMATS``."""
    if output_format not in CLASSIFIER_FORMATS:
        raise SpecError(f"a classifier's format must be one of "
                        f"{', '.join(CLASSIFIER_FORMATS)}, got {output_format!r}")
    model = read_graph(path)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise ModelError(f"{path}: a {output_format} classifier has one input and one output, "
                         f"the graph has {len(inputs)} and {len(graph.output)}")
    dims = [d.dim_value or None for d in inputs[0].type.tensor_type.shape.dim]
    out_dims = [d.dim_value or None for d in graph.output[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or dims[1] != 3 or len(out_dims) != 2:
        raise ModelError(f"{path}: expected a (B, 3, H, W) input and a (B, classes) output, "
                         f"got {dims} and {out_dims}")
    height, width = dims[2] or 224, dims[3] or 224
    metadata = {p.key: p.value for p in model.metadata_props}
    labels = _labels(path, classes, metadata.get("names"), out_dims[1])
    ultralytics = output_format == "ultralytics-cls"
    card: dict[str, Any] = {
        "kind": "classifier", "name": path.stem, "file": path.name,
        "description": f"user classifier {path.name} ({output_format})",
        "crop": {"context": 0.0},
        "input": {"name": inputs[0].name, "width": width, "height": height,
                  "resize": "center_crop", "interpolation": "bilinear",
                  "mean": (0.0, 0.0, 0.0) if ultralytics else IMAGENET_MEAN,
                  "std": (1.0, 1.0, 1.0) if ultralytics else IMAGENET_STD},
        "heads": [{"name": re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:64] or "class",
                   "output": graph.output[0].name, "labels": labels,
                   "activation": "none" if ultralytics else "softmax"}]}
    return ClassifierSpec.model_validate(card)


def _labels(path: Path, classes: Path | None, names: str | None,
            count: int | None) -> list[str]:
    """From ``classes``, else the graph's ``names`` metadata (Ultralytics': a dict literal of
    index to name), else class0..class{count-1}."""
    if classes is not None:
        labels = read_classes(classes)
    elif names:
        try:
            table = ast.literal_eval(names)
        except (ValueError, SyntaxError) as e:
            raise ModelError(f"{path}: its 'names' metadata is not a mapping: {e}") from e
        labels = [str(table[k]) for k in sorted(table)] if isinstance(table, dict) else \
            [str(v) for v in table]
    elif count:
        log.info("%s: no class names given; using class0..class%d", path.name, count - 1)
        labels = [f"class{i}" for i in range(count)]
    else:
        raise SpecError(f"{path}: cannot tell the number of classes; give its classes file")
    if count is not None and len(labels) != count:
        raise ModelError(f"{path}: {len(labels)} labels for an output of {count} classes")
    return labels


def names_classifier(model: str, output_format: str | None = None) -> bool:
    """Whether ``model`` (as ``--model``/``MODEL`` would take it) is a classifier: a zoo
    classifier, a folder or file whose card says so, or a card-less one given a classifier
    format."""
    if output_format is not None:
        return output_format in CLASSIFIER_FORMATS
    path = Path(model)
    if "/" not in model and not model.endswith(".onnx") and (ZOO_DIR / model).is_dir():
        card = ZOO_DIR / model / "card.yaml"
    elif path.is_dir():
        card = path / "card.yaml"
    else:
        card = path.parent / "card.yaml"
    return card.is_file() and is_classifier_card(card)
