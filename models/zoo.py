"""Finding a model: a zoo name, a folder with a card, or a user's ONNX file.

``resolve_model`` turns what a user typed after ``--model`` into an ONNX path and a ModelSpec;
``check_compatible`` compares the spec with the loaded graph so a mismatched model fails before
the first frame, with a message that says what the card promised and what the graph has.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from models.backends.base import TensorInfo
from models.classifier_spec import is_classifier_card
from models.errors import ModelError
from models.spec import (
    DEFAULT_MODEL,
    OUTPUT_FORMATS,
    ZOO_DIR,
    ModelSpec,
    SpecError,
    load_card,
    read_classes,
)

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)
# onnx.TensorProto's element types a card-less model's input may have
_ONNX_DTYPES = {1: "float32", 2: "uint8"}  # FLOAT, UINT8


# The optimised variants of a model live beside it (``vidpipe model optimize`` writes them):
# model.int8.onnx, model.pruned50.onnx, model.pruned50.int8.onnx (50: % of channels pruned).
# ``fp32`` is the card's own file.
_VARIANT_NAME = re.compile(r"model\.(?:pruned(\d{1,2})\.)?(?:(int8)\.)?onnx")


def variant_label(path: Path) -> str | None:
    """'int8', 'pruned50', 'pruned50+int8' for a variant's file name, else None."""
    match = _VARIANT_NAME.fullmatch(path.name)
    if match is None or not any(match.groups()):
        return None
    ratio, int8 = match.groups()
    return "+".join(part for part in (f"pruned{ratio}" if ratio else None, int8) if part)


def variant_file(ratio: float | None, int8: bool) -> str:
    """The file name of a variant: the inverse of ``variant_label``."""
    pruned = f"pruned{round(ratio * 100)}." if ratio else ""
    return f"model.{pruned}{'int8.' if int8 else ''}onnx"


def model_variants(model: str | Path | None = None) -> dict[str, tuple[Path, ModelSpec]]:
    """The FP32 model and whichever optimised variants exist beside it, by label: fp32 first,
    then int8, then pruned ones by ratio. A variant's own file names only itself."""
    path, spec = resolve_model(model)
    own_label = variant_label(path)
    if own_label is not None:
        return {own_label: (path, spec)}
    variants = {"fp32": (path, spec)}
    found = {label: candidate for candidate in path.parent.glob("model.*onnx")
             if candidate != path and (label := variant_label(candidate)) is not None}
    for label in sorted(found, key=lambda k: (k.startswith("pruned"), len(k), k)):
        variants[label] = (found[label], spec)
    return variants


def zoo_names() -> list[str]:
    """The zoo's detectors (its classifiers: ``models.classifier_zoo.classifier_names``)."""
    return sorted(p.parent.name for p in ZOO_DIR.glob("*/card.yaml")
                  if not is_classifier_card(p))


def resolve_model(model: str | Path | None = None, *, output_format: str | None = None,
                  classes: Path | None = None,
                  input_size: tuple[int, int] | None = None) -> tuple[Path, ModelSpec]:
    """The ONNX file and spec named by ``model`` (default: the shipped person detector)."""
    name = str(model) if model is not None else DEFAULT_MODEL
    zoo_card = ZOO_DIR / name / "card.yaml"
    if "/" not in name and not name.endswith(".onnx") and zoo_card.is_file():
        return _from_card(zoo_card, None)
    path = Path(name)
    if path.is_dir():
        card = path / "card.yaml"
        if not card.is_file():
            raise SpecError(f"model folder {path} has no card.yaml")
        return _from_card(card, None)
    if not path.is_file():
        raise SpecError(f"model {name!r}: no such file, folder or zoo model "
                        f"(zoo: {', '.join(zoo_names()) or 'empty'})")
    card = path.parent / "card.yaml"
    if card.is_file() and output_format is None:
        return _from_card(card, path)
    if output_format is None:
        raise SpecError(f"model {path} has no card.yaml beside it: give --format "
                        f"({' | '.join(OUTPUT_FORMATS)}) and --classes")
    return path, spec_from_graph(path, output_format, classes, input_size)


def _from_card(card: Path, onnx_path: Path | None) -> tuple[Path, ModelSpec]:
    spec = load_card(card)
    path = onnx_path or card.parent / spec.file
    if not path.is_file():
        raise SpecError(f"model card {card} names {spec.file}, which does not exist")
    return path, spec


def read_graph(path: Path) -> onnx.ModelProto:
    """The ONNX graph of ``path`` (the onnx package, half a second to import, is loaded here:
    only a model without a card needs its graph read)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf raises several unrelated types for a non-ONNX file
        raise ModelError(f"{path}: not an ONNX model ({type(e).__name__})") from e


def spec_from_graph(path: Path, output_format: str, classes: Path | None,
                    input_size: tuple[int, int] | None) -> ModelSpec:
    """A spec for a user's ONNX: input layout/size/dtype from the graph, the rest from flags."""
    if output_format not in OUTPUT_FORMATS:
        raise SpecError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, "
                        f"got {output_format!r}")
    graph = read_graph(path).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise ModelError(f"{path}: expected one image input, the graph has {len(inputs)}")
    tensor = inputs[0].type.tensor_type
    dims = [d.dim_value if d.dim_value > 0 else None for d in tensor.shape.dim]
    dtype = _ONNX_DTYPES.get(tensor.elem_type)
    if len(dims) != 4 or dtype is None:
        raise ModelError(f"{path}: input {inputs[0].name!r} must be a 4-D float32 or uint8 "
                         f"image tensor, got {len(dims)}-D elem_type {tensor.elem_type}")
    layout = "NHWC" if dims[3] == 3 else "NCHW"
    h, w = (dims[1], dims[2]) if layout == "NHWC" else (dims[2], dims[3])
    if h is None or w is None:
        if input_size is None:
            raise ModelError(f"{path}: the input size is dynamic; give --input-size WxH")
        w, h = input_size
    names = read_classes(classes) if classes else _numbered_classes(graph, output_format, path)
    return ModelSpec.model_validate({
        "name": path.stem, "file": path.name, "description": f"user model {path.name}",
        "input": {"name": inputs[0].name, "width": w, "height": h, "layout": layout,
                  "dtype": dtype},
        "output": {"format": output_format,
                   "names": _ssd_names(graph) if output_format == "ssd" else {}},
        "classes": names,
    })


def _numbered_classes(graph: onnx.GraphProto, output_format: str, path: Path) -> list[str]:
    """class0..classN-1, when the output shape says how many classes there are."""
    dims = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    count = {"yolov8": dims[1] - 4 if len(dims) == 3 else 0,
             "yolov5": dims[2] - 5 if len(dims) == 3 else 0}.get(output_format, 0)
    if count <= 0:
        raise SpecError(f"{path}: cannot tell the number of classes; give --classes names.txt")
    log.info("%s: no class names given; using class0..class%d", path.name, count - 1)
    return [f"class{i}" for i in range(count)]


def _ssd_names(graph: onnx.GraphProto) -> dict[str, str]:
    names: dict[str, str] = {}
    for output in graph.output:
        lowered = output.name.lower()
        for role, key in (("boxes", "box"), ("scores", "score"), ("classes", "class"),
                          ("count", "num")):
            if key in lowered and role not in names:
                names[role] = output.name
    return names


def check_compatible(spec: ModelSpec, inputs: list[TensorInfo],
                     outputs: list[TensorInfo], path: Path) -> TensorInfo:
    """The graph input the spec feeds; raises ModelError where graph and spec disagree."""
    wanted = [i for i in inputs if spec.input.name in (None, i.name)]
    if len(wanted) != 1:
        raise ModelError(f"{path}: card input {spec.input.name!r} not among the graph's inputs "
                         f"{[i.name for i in inputs]}")
    info = wanted[0]
    if info.dtype != spec.input.dtype or len(info.shape) != 4:
        raise ModelError(f"{path}: card says a 4-D {spec.input.dtype} input, the graph has "
                         f"{info.dtype} {info.shape}")
    s = spec.input
    expected = (s.height, s.width, 3) if s.layout == "NHWC" else (3, s.height, s.width)
    for got, want in zip(info.shape[1:], expected, strict=True):
        if got is not None and got != want:
            raise ModelError(f"{path}: card says input {s.layout} {expected}, the graph has "
                             f"{info.shape[1:]}")
    _check_outputs(spec, outputs, path)
    return info


def _check_outputs(spec: ModelSpec, outputs: list[TensorInfo], path: Path) -> None:
    names = {o.name: o for o in outputs}
    fmt = spec.output.format
    if fmt == "ssd":
        missing = [n for n in spec.output.names.values() if n not in names]
        if missing:
            raise ModelError(f"{path}: card names ssd outputs {missing} the graph lacks "
                             f"(graph outputs: {sorted(names)})")
        return
    if len(outputs) != 1 or len(outputs[0].shape) != 3:
        raise ModelError(f"{path}: {fmt} expects one 3-D output, the graph has "
                         f"{[(o.name, o.shape) for o in outputs]}")
    shape = outputs[0].shape
    per_box = 4 + spec.num_classes if fmt == "yolov8" else 5 + spec.num_classes
    got = shape[1] if fmt == "yolov8" else shape[2]
    if got is not None and got != per_box:
        layout = "[B, 4+C, N]" if fmt == "yolov8" else "[B, N, 5+C]"
        raise ModelError(f"{path}: {fmt} output must be {layout} with C={spec.num_classes} "
                         f"classes, got {shape}")
