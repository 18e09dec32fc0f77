"""ShadowModel: a second detector run beside the current one on the same pictures — the
candidate a user weighs before swapping models (``vidpipe run --shadow``).

It prepares each picture by its own card (the OpenCV preprocessor: the reference's pixels),
runs its file on ONNX Runtime and decodes the boxes as the pipeline does. Its class ids are
put in the current model's numbering by label, so that the two sides compare box for box;
a label the current model does not have keeps no id (-1) and counts as a box apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from models.backends.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.errors import ConfigError
from pipelines.frame import Detections, Frame, host_array
from pipelines.postprocess.yolo import decode_outputs
from pipelines.preprocess.opencv import OpenCVPreprocessor


class ShadowModel:
    def __init__(self, path: Path, spec: ModelSpec, current: ModelSpec, *,
                 threads: int = 1) -> None:
        shared = set(spec.classes) & set(current.classes)
        if not shared:
            raise ConfigError(f"candidate {spec.name} shares no class with {current.name} "
                              f"({', '.join(spec.classes)} against "
                              f"{', '.join(current.classes)}): nothing to compare")
        self.path, self.spec = path, spec
        self._backend = OnnxRuntimeBackend(path, threads=threads)
        try:
            info = check_compatible(spec, self._backend.inputs, self._backend.outputs, path)
        except Exception:
            self._backend.close()
            raise
        self._input = info.name
        self._preprocessor = OpenCVPreprocessor(spec.input)
        index = {label: i for i, label in enumerate(current.classes)}
        self._to_current = np.array([index.get(label, -1) for label in spec.classes],
                                    np.int32)

    def detect(self, frames: Sequence[Frame]) -> list[Detections]:
        """The candidate's boxes on each frame's picture, in the current model's class ids."""
        batch = self._preprocessor.prepare_many(frames)
        outputs = self._backend.infer({self._input: host_array(batch.tensor, "tensor")})
        spec = self.spec
        found = decode_outputs(outputs, batch.letterboxes, spec.output,
                               (spec.input.width, spec.input.height), spec.num_classes)
        return [Detections(d.xyxy, d.score, self._to_current[d.class_id]) for d in found]

    def close(self) -> None:
        self._backend.close()
