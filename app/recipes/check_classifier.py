"""``vidpipe model check`` for a classifier: do the pipeline's crops and answers equal the
model's, run directly on the same crops?

The pipeline side is a real run — the detector, the default tracker and the classifier on
the clip's frames — with a tap on the classifiers' step that sees, for each call, the boxes,
the tensor the model was fed and the answers. The reference side decodes the clip again at
full size (``reference_picture``), cuts each of those boxes with the card's crop, resize,
colour and normalisation written plainly here (not ``models.crops``: the check must not
share the code it checks) and runs the model file with a plain ONNX Runtime session, one crop
a call. Per crop: the input's difference in grey levels, and whether every head's label is
the same (its confidence within 0.01).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from app.recipes.check import reference_pictures
from app.run.sources import stream_ids
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.classifier_spec import ClassifierSpec
from models.spec import ModelSpec
from pipelines.analytics.config import DEFAULT_TRACKER, AnalyticsConfig, TrackerSettings
from pipelines.build import build_pipeline
from pipelines.classify.config import ClassifierConfig
from pipelines.classify.model import Answer, Classifier
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions

CONFIDENCE_MATCH = 0.01
_FILTERS = {"bilinear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST,
            "bicubic": cv2.INTER_CUBIC}


def reference_crop(picture: np.ndarray, box: np.ndarray, spec: ClassifierSpec) -> np.ndarray:
    """The card's crop of ``box``, plainly: the box grown by ``context`` on each side, whole
    pixels within the picture, then the card's resize (the model's input, one crop, as
    float32 or uint8 in the card's layout)."""
    height, width = picture.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    gx, gy = (x2 - x1) * spec.crop.context, (y2 - y1) * spec.crop.context
    left = int(np.clip(np.floor(x1 - gx), 0, width - 1))
    top = int(np.clip(np.floor(y1 - gy), 0, height - 1))
    right = int(max(min(np.ceil(x2 + gx), width), left + 1))
    bottom = int(max(min(np.ceil(y2 + gy), height), top + 1))
    crop = picture[top:bottom, left:right]
    s = spec.input
    flt = _FILTERS[s.interpolation]
    if s.resize == "stretch":
        fitted = cv2.resize(crop, (s.width, s.height), interpolation=flt)
    else:
        h, w = crop.shape[:2]
        fill = s.resize == "center_crop"
        scale = (max if fill else min)(s.width / w, s.height / h)
        new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
        if fill:
            new_w, new_h = max(new_w, s.width), max(new_h, s.height)
        sized = cv2.resize(crop, (new_w, new_h), interpolation=flt)
        fitted = np.full((s.height, s.width, 3), s.pad_value, np.uint8)
        if fill:
            t, lft = (new_h - s.height) // 2, (new_w - s.width) // 2
            fitted = sized[t:t + s.height, lft:lft + s.width]
        else:
            t, lft = (s.height - new_h) // 2, (s.width - new_w) // 2
            fitted[t:t + new_h, lft:lft + new_w] = sized
    if s.color == "BGR":
        fitted = fitted[:, :, ::-1]
    out: np.ndarray = fitted
    if s.dtype == "float32":
        out = ((fitted.astype(np.float32) / 255.0 - np.array(s.mean, np.float32))
               / np.array(s.std, np.float32)).astype(np.float32)
    return np.ascontiguousarray(out.transpose(2, 0, 1) if s.layout == "NCHW" else out)


def direct_answer(backend: OnnxRuntimeBackend, spec: ClassifierSpec,
                  tensor: np.ndarray) -> Answer:
    """The model run directly on one crop: each head's best label and its confidence."""
    outputs = backend.infer({spec.input.name or backend.inputs[0].name: tensor[None]})
    answer: Answer = {}
    for head in spec.heads:
        values = (outputs[head.output] if head.output else next(iter(outputs.values())))[0]
        values = values.astype(np.float64).ravel()
        if head.activation == "softmax":
            values = np.exp(values - values.max()) / np.exp(values - values.max()).sum()
        elif head.activation == "sigmoid":
            values = 1 / (1 + np.exp(-values))
        k = int(values.argmax())
        answer[head.name] = (head.labels[k], float(values[k]))
    return answer


@dataclass(slots=True)
class CropCheck:
    """What the tap saw, held to the reference as it comes (frames come in order)."""

    spec: ClassifierSpec
    backend: OnnxRuntimeBackend
    pictures: Iterator[np.ndarray]
    on_progress: Callable[[int, int | None], None] | None = None
    frames: int | None = None
    crops: int = 0
    agreed: int = 0
    max_input_diff: float = 0.0
    max_confidence_diff: float = 0.0
    labels: dict[str, int] = field(default_factory=dict)
    _index: int = -1
    _picture: np.ndarray | None = None

    def __call__(self, stream: str, frame: int, classifier: Classifier, boxes: np.ndarray,
                 tensor: np.ndarray, answers: list[Answer]) -> None:
        while self._index < frame:
            self._picture, self._index = next(self.pictures), self._index + 1
        assert self._picture is not None
        scale = 255.0 * float(np.max(self.spec.input.std)) \
            if self.spec.input.dtype == "float32" else 1.0
        for box, fed, said in zip(boxes, tensor, answers, strict=True):
            wanted = reference_crop(self._picture, box, self.spec)
            diff = float(np.abs(fed.astype(np.float32) - wanted.astype(np.float32)).max())
            self.max_input_diff = max(self.max_input_diff, diff * scale)
            direct = direct_answer(self.backend, self.spec, wanted)
            same = all(said[h][0] == label and abs(said[h][1] - c) <= CONFIDENCE_MATCH
                       for h, (label, c) in direct.items())
            self.max_confidence_diff = max(self.max_confidence_diff, *(
                abs(said[h][1] - c) for h, (_, c) in direct.items()))
            self.crops += 1
            self.agreed += same
            for h, (label, _) in direct.items():
                key = f"{h}={label}"
                self.labels[key] = self.labels.get(key, 0) + 1
        if self.on_progress is not None:
            self.on_progress(frame + 1, self.frames)


def check_classifier(path: Path, spec: ClassifierSpec, model: str, clip: Path,
                     detector: tuple[Path, ModelSpec], options: PipelineOptions, *,
                     frames: int = 300,
                     on_progress: Callable[[int, int | None], None] | None = None,
                     ) -> dict[str, Any]:
    """The pipeline's classifier calls on the first ``frames`` of ``clip`` (``detector``
    finding the boxes) against the model run directly on the reference crops."""
    pictures = reference_pictures(clip)
    backend = OnnxRuntimeBackend(path)
    check = CropCheck(spec, backend, pictures, on_progress, frames)
    analytics = AnalyticsConfig(track=TrackerSettings(kind=DEFAULT_TRACKER),
                                classifiers=[ClassifierConfig(model=model, reclassify_s=0.0,
                                                              better=0.0)])
    run = options.model_copy(update={"analytics": analytics, "classify_tap": check,
                                     "frame_limit": frames})
    try:
        pipeline = build_pipeline([clip], stream_ids([clip]), detector[0], detector[1], [],
                                  PipelineMetrics(), run)
        asyncio.run(pipeline.run())
    finally:
        pictures.close()
        backend.close()
    return {"classifier": spec.name, "file": path.name, "detector": detector[1].name,
            "clip": str(clip), "crops": check.crops,
            "agreement": round(check.agreed / check.crops, 4) if check.crops else None,
            "max_input_diff": round(check.max_input_diff, 4),
            "max_confidence_diff": round(check.max_confidence_diff, 5),
            "labels": dict(sorted(check.labels.items()))}
