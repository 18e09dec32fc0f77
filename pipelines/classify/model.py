"""Classifier: a loaded classifier that answers for crops — the model's input made from the
picture by its card (``models.crops``), its heads read into a label and a confidence each.

The CPU runs it on ONNX Runtime with one thread, on the analytics stage's worker (the calls
are few: once per track and when its picture improves). A GPU device runs it there too, on
the host: the crops are small and the GPU classifier path is not built (docs/GPU.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.backends.base import Backend
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.classifier_spec import ClassifierSpec, Head
from models.classifier_zoo import resolve_classifier
from models.crops import crops_tensor
from pipelines.classify.config import ClassifierConfig
from pipelines.errors import ConfigError

log = logging.getLogger(__name__)
MAX_BATCH = 32  # crops per model call

Answer = dict[str, tuple[str, float]]  # head -> (label, confidence)


@dataclass(slots=True)
class Classifier:
    """One loaded classifier, shared by every stream that names it."""

    path: Path
    spec: ClassifierSpec
    backend: Backend
    calls: int = 0
    crops: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def heads(self) -> dict[str, list[str]]:
        return {h.name: list(h.labels) for h in self.spec.heads}

    def answer(self, tensor: np.ndarray) -> list[Answer]:
        """The answers for a batch of prepared crops (the model's input tensor), in order."""
        answers: list[Answer] = [{} for _ in range(len(tensor))]
        input_name = self.spec.input.name or self.backend.inputs[0].name
        for start in range(0, len(tensor), MAX_BATCH):
            outputs = self.backend.infer({input_name: tensor[start:start + MAX_BATCH]})
            self.calls += 1
            for head in self.spec.heads:
                values = outputs[head.output] if head.output else next(iter(outputs.values()))
                for i, (label, confidence) in enumerate(_read(head, values)):
                    answers[start + i][head.name] = (label, confidence)
        self.crops += len(tensor)
        return answers

    def classify(self, image: np.ndarray, boxes: np.ndarray) -> list[Answer]:
        """The answers for ``boxes`` (N, 4 source pixels) of ``image`` (H, W, 3 RGB)."""
        return self.answer(crops_tensor(image, boxes, self.spec))

    def close(self) -> None:
        self.backend.close()


def _read(head: Head, values: np.ndarray) -> list[tuple[str, float]]:
    """Each row's best label and its confidence, by the head's activation."""
    values = np.asarray(values, np.float32).reshape(len(values), -1)
    if values.shape[1] != len(head.labels):
        raise ConfigError(f"classifier head {head.name}: {values.shape[1]} outputs for "
                          f"{len(head.labels)} labels")
    if head.activation == "softmax":
        shifted = np.exp(values - values.max(axis=1, keepdims=True))
        values = shifted / shifted.sum(axis=1, keepdims=True)
    elif head.activation == "sigmoid":
        values = 1.0 / (1.0 + np.exp(-values))
    best = values.argmax(axis=1)
    return [(head.labels[int(k)], round(float(values[i, k]), 4)) for i, k in enumerate(best)]


def open_classifier(config: ClassifierConfig) -> Classifier:
    """The classifier ``config`` names, loaded (ModelError / SpecError if it cannot be)."""
    classes = Path(config.classes) if config.classes else None
    path, spec = resolve_classifier(config.model, output_format=config.format,
                                    classes=classes)
    backend = OnnxRuntimeBackend(path, threads=1)
    log.info("classifier %s loaded from %s (heads: %s)", spec.name, path.name,
             ", ".join(h.name for h in spec.heads))
    return Classifier(path, spec, backend)


class Classifiers:
    """The classifiers of a pipeline, each loaded once (by ``ClassifierConfig.key``) and
    closed together; once closed their figures (``calls``, ``crops``) stay readable."""

    def __init__(self) -> None:
        self.loaded: dict[tuple[str, str | None, str | None], Classifier] = {}
        self.closed = False

    def get(self, config: ClassifierConfig) -> Classifier:
        if self.closed:
            raise ConfigError(f"classifier {config.model}: its pipeline has closed")
        found = self.loaded.get(config.key)
        if found is None:
            found = self.loaded[config.key] = open_classifier(config)
        return found

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for classifier in self.loaded.values():
                classifier.close()
