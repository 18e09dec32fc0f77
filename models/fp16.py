"""An ONNX model in FP16, for a TensorRT 11 FP16 engine.

TensorRT 11 builds strongly typed networks: a layer runs in the type the model gives it, and
the FP16 builder flag is gone. So an FP16 engine is built from an FP16 model: the float
weights and operators converted by onnxconverter-common, the inputs and outputs kept FP32 (the
pipeline's tensors do not change), and kept FP32 where FP16 would be wrong or unsupported
(mixed precision): the converter's block list (NMS, TopK, Resize, ...) and control flow
(Loop, If, Scan). The model's own casts to float now cast to FP16 (the converter types their
outputs FP16 but leaves their target, an attribute, as it was). A converted graph that does
not type-check (ONNX Runtime's session creation infers every type) is refused, with the
reason: the caller then builds FP32 and says so, never an FP32 engine called FP16.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx

from models.errors import ModelError

# Operators that stay FP32, beside onnxconverter-common's own list. (Not Cast: blocking it
# sends the converter's cast insertion round in a loop.)
KEPT_FP32 = ("Loop", "If", "Scan")


def to_fp16(model: Path) -> bytes:
    """``model`` converted to FP16 (I/O kept FP32), serialized; ModelError when it cannot be."""
    from onnxconverter_common import float16

    graph = onnx.load(str(model))
    blocked = list(float16.DEFAULT_OP_BLOCK_LIST) + list(KEPT_FP32)
    try:
        casts = {n.name for n in graph.graph.node if n.op_type == "Cast"}
        with warnings.catch_warnings():  # weights under FP16's smallest normal are clamped
            warnings.simplefilter("ignore", UserWarning)
            converted = float16.convert_float_to_float16(graph, keep_io_types=True,
                                                         op_block_list=blocked)
        for node in converted.graph.node:
            if node.op_type == "Cast" and node.name in casts:
                for attribute in node.attribute:
                    if attribute.name == "to" and attribute.i == onnx.TensorProto.FLOAT:
                        attribute.i = onnx.TensorProto.FLOAT16
        onnx.checker.check_model(converted)
        data = converted.SerializeToString()
        _type_check(data)
    except Exception as e:  # the converter and the checker raise many kinds
        raise ModelError(f"{model.name} cannot be converted to FP16: "
                         f"{str(e).splitlines()[0]}") from e
    return data


def _type_check(data: bytes) -> None:
    """ONNX Runtime loads the graph (every type inferred, nothing run)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
