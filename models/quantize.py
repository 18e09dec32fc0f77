"""INT8 post-training quantization: a QDQ ONNX calibrated on frames of the user's own video.

``quantize_model`` runs ONNX Runtime's static quantizer and writes QuantizeLinear /
DequantizeLinear pairs around each quantized op (QDQ), weights INT8 per output channel,
symmetric. The activations depend on who runs the file (``target``), because the two
consumers of QDQ want different things (the measurements: docs/MODELS.md, "INT8"):

- ``onnxruntime`` (the default, ``model.int8.onnx``): UINT8 activations with a zero point
  (asymmetric): ONNX Runtime's x86 integer kernels are built for unsigned activations times
  signed weights (AVX2 ``vpmaddubsw``); symmetric activations were slower and less accurate.
- ``tensorrt``: symmetric INT8 activations (zero point 0), the only kind TensorRT builds an
  explicitly quantized engine from. ``vidpipe model build-engine --precision int8`` makes
  this file itself.

For both, the first conv (the stem, which reads the image) stays float: the [0, 1] image
quantized to 8 bits is where INT8 lost most accuracy, and ONNX Runtime's integer conv of a
3-channel input is slower than its float one, so the float stem is both more accurate and
faster, for 2% of the multiply-adds.

Calibration frames come from the caller, prepared exactly as the pipeline prepares them
(``app.recipes.optimize.calibration_frames`` decodes them from the user's video and runs the
pipeline's own preprocessor; models imports no pipeline code). The activation ranges come
from one of three calibrators (MinMax, Entropy, Percentile); ``vidpipe model quantize`` tries
each and keeps the most accurate.

Always float: the output decoding after the three 1x1 head convs (softplus box sides, grid
offsets, sigmoid x softmax scores, the final concat). Its one output tensor mixes box
coordinates in pixels (0..320) with scores in [0, 1]: one INT8 scale for both would round
every score to 0 or 2.5. Those head convs stay float too (three tiny convs; their outputs are
the logits every score is made of).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import numpy_helper

from models.errors import ModelError

METHODS: tuple[str, ...] = ("minmax", "entropy", "percentile")
TARGETS: tuple[str, ...] = ("onnxruntime", "tensorrt")
HEAD_CONVS = ("/box/Conv", "/obj/Conv", "/cls/Conv")  # node names the exporter gives them


def float_nodes(model: onnx.ModelProto, target: str = "onnxruntime") -> list[str]:
    """Names of the nodes that stay float for ``target`` (the same for both): the convs that
    read the image, and the head convs with everything downstream of them (module doc)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    inputs = {i.name for i in model.graph.input}
    first = [n.name for n in model.graph.node if n.op_type == "Conv" and n.input[0] in inputs]
    if not first:
        raise ModelError("no conv reads the model's input: quantize_model knows ShapesYOLO's "
                         "stem as the conv on the image")
    return sorted(set(float_tail(model)) | set(first))


def float_tail(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that stay float: the head convs and everything downstream of them."""
    names = {node.name for node in model.graph.node}
    missing = [n for n in HEAD_CONVS if n not in names]
    if missing:
        raise ModelError(f"no {', '.join(missing)} node in the graph: quantize_model knows "
                         f"ShapesYOLO's head by its node names")
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    tail, queue = set(), [n for n in model.graph.node if n.name in HEAD_CONVS]
    while queue:
        node = queue.pop()
        if node.name in tail:
            continue
        tail.add(node.name)
        for tensor in node.output:
            queue.extend(consumers.get(tensor, []))
    return sorted(tail)


def qdq_activations(model_path: Path) -> Literal["none", "symmetric", "asymmetric"]:
    """How a model's QuantizeLinear nodes quantize: "none" (no QDQ: a float model),
    "symmetric" (INT8, zero point 0: what TensorRT takes) or "asymmetric" (UINT8 or a zero
    point: ONNX Runtime's CPU flavour)."""
    graph = onnx.load(str(model_path))
    initial = {i.name: i for i in graph.graph.initializer}
    points = [numpy_helper.to_array(initial[n.input[2]]) for n in graph.graph.node
              if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in initial]
    if not points:
        return "none"
    if any(p.dtype != np.int8 or p.any() for p in points):
        return "asymmetric"
    return "symmetric"


def quantize_model(model_path: Path, out_path: Path, frames: np.ndarray, method: str,
                   *, target: str = "onnxruntime",
                   on_progress: Callable[[str], None] | None = None,
                   excluded: list[str] | None = None) -> Path:
    """Write the QDQ INT8 model of ``model_path`` calibrated on ``frames`` [N, C, H, W] for
    ``target`` (``onnxruntime``: UINT8 activations; ``tensorrt``: symmetric INT8). The nodes
    that stay float: ``excluded``, or by default ShapesYOLO's (``float_nodes``)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if method not in METHODS:
        raise ValueError(f"calibration method must be one of {', '.join(METHODS)}, "
                         f"got {method!r}")
    graph = onnx.load(str(model_path))
    input_name = graph.graph.input[0].name
    symmetric = target == "tensorrt"
    with tempfile.TemporaryDirectory(prefix="vidpipe-quant-") as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        quant_pre_process(str(model_path), str(prepared), skip_symbolic_shape=True)
        if on_progress is not None:
            on_progress(f"calibrating ({method}, {len(frames)} frames)")
        cache = None
        if method == "entropy":  # see _entropy_ranges: quantize_static's own is MinMax here
            cache = _entropy_ranges(prepared, Path(scratch),
                                    _calibration_reader(input_name, frames), symmetric)
        reader = None if cache is not None else _calibration_reader(input_name, frames)
        _quantize_static(prepared, out_path, reader, method, symmetric,
                         float_nodes(graph, target) if excluded is None else excluded, cache)
    onnx.checker.check_model(str(out_path))
    return out_path


def _calibration_reader(input_name: str, frames: np.ndarray) -> Any:
    """ONNX Runtime's calibration data reader over ``frames``, one frame per feed."""
    from onnxruntime.quantization import CalibrationDataReader

    class Frames(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._feeds: Iterator[dict[str, np.ndarray]] = (
                {input_name: frames[i:i + 1]} for i in range(len(frames)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    return Frames()


def _quantize_static(prepared: Path, out_path: Path, reader: Any, method: str,
                     symmetric: bool, excluded: list[str], cache: Path | None) -> None:
    """ONNX Runtime's static QDQ quantizer with the choices the module docstring explains."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    calibrators = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                   "percentile": CalibrationMethod.Percentile}
    quantize_static(
        str(prepared), str(out_path), reader, quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
        weight_type=QuantType.QInt8, calibrate_method=calibrators[method],
        nodes_to_exclude=excluded,
        extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True,
                       "CalibMovingAverage": False},
        calibration_cache_path=cache,
    )


ENTROPY_BINS, ENTROPY_QUANTIZED_BINS = 2048, 128  # TensorRT's entropy calibration uses these


def _entropy_ranges(model: Path, scratch: Path, frames: Any, symmetric: bool) -> Path:
    """KL-divergence (entropy) ranges over a 2048-bin histogram, saved as a calibration cache
    for ``quantize_static``. Its own Entropy calibrator cannot be given the bin counts and uses
    128 bins with 128 quantized bins: the only threshold it can try is the whole range, so it
    gave exactly MinMax's model (measured: the same mAP to four decimals)."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    calibrator = create_calibrator(
        model, None, augmented_model_path=str(scratch / "augmented.onnx"),
        calibrate_method=CalibrationMethod.Entropy,
        extra_options={"num_bins": ENTROPY_BINS, "num_quantized_bins": ENTROPY_QUANTIZED_BINS,
                       "symmetric": symmetric})
    calibrator.collect_data(frames)
    cache = scratch / "entropy-ranges.json"
    save_tensors_data(calibrator.compute_data(), cache)
    return cache
