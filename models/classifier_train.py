"""PatternNet trained on the CPU, exported as users export theirs (ONNX, a dynamic batch, a
card), quantized to INT8 and scored on crops of scenes it never saw.

A run is fixed by its ``PatternTrainConfig``: the crops of ``scenes`` rendered scenes of
``seed`` (``models.classifier.crop_set``), steps drawing batches by ``(seed, step)`` with
random flips (a fill pattern has no handedness), weights from ``torch.manual_seed(seed)``.
The classes are rare in the scenes as in the tracking clips (60 / 30 / 10 %), so the loss
weighs each class by the inverse square root of its share.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import yaml
from torch.nn import functional as F  # noqa: N812

from models.backends.onnxruntime import OnnxRuntimeBackend
from models.classifier import (
    CROP_SEED,
    INPUT_SIZE,
    PATTERNS,
    PatternNet,
    crop_set,
    to_tensor,
)
from models.classifier_spec import ClassifierSpec, load_classifier_card
from models.crops import tensor
from models.export import OPSET
from models.quantize import quantize_model

INPUT_NAME, OUTPUT_NAME = "images", "pattern"
HELDOUT_SEED = CROP_SEED + 1


@dataclass(frozen=True, slots=True)
class PatternTrainConfig:
    steps: int = 8000
    batch_size: int = 64
    scenes: int = 5000  # about 33,000 crops
    lr: float = 3e-3
    weight_decay: float = 5e-4
    seed: int = CROP_SEED
    threads: int = 2


def pattern_card(measured: dict[str, Any] | None = None,
                 provenance: dict[str, Any] | None = None) -> ClassifierSpec:
    """The shipped classifier's card: a 64x64 stretched crop with 10 % context, x / 255."""
    return ClassifierSpec.model_validate({
        "kind": "classifier", "name": "shapes-pattern", "file": "model.onnx",
        "description": "The fill of a shape (solid, shaded, striped) from its crop: "
                       "vidpipe's own second model for tracked objects.",
        "crop": {"context": 0.1},
        "input": {"name": INPUT_NAME, "width": INPUT_SIZE, "height": INPUT_SIZE,
                  "layout": "NCHW", "dtype": "float32", "color": "RGB", "resize": "stretch",
                  "interpolation": "bilinear"},
        "heads": [{"name": "pattern", "output": OUTPUT_NAME, "labels": list(PATTERNS),
                   "activation": "softmax"}],
        "licence": "MIT (trained by vidpipe on its own synthetic data)",
        "provenance": provenance or {}, "measured": measured or {}})


def train_pattern(config: PatternTrainConfig,
                  on_step: Callable[[int, float], None] | None = None,
                  on_render: Callable[[int, int], None] | None = None) -> PatternNet:
    """PatternNet trained on ``config``'s crops (``on_render(done, scenes)`` while they are
    rendered, ``on_step(step, loss)`` after each step)."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    pictures, labels = crop_set(config.seed, config.scenes, pattern_card(),
                                on_progress=on_render)
    share = np.bincount(labels, minlength=len(PATTERNS)) / len(labels)
    weight = torch.tensor(1.0 / np.sqrt(np.maximum(share, 1e-3)), dtype=torch.float32)
    model = PatternNet()
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, config.lr,
                                                   total_steps=config.steps)
    model.train()
    for step in range(config.steps):
        rng = np.random.default_rng([config.seed, 8, step])
        pick = rng.integers(0, len(labels), config.batch_size)
        batch = pictures[pick]
        if rng.uniform() < 0.5:
            batch = batch[:, :, ::-1]
        if rng.uniform() < 0.5:
            batch = batch[:, ::-1]
        loss = F.cross_entropy(model(to_tensor(np.ascontiguousarray(batch))),
                               torch.from_numpy(labels[pick]), weight=weight)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if on_step is not None:
            on_step(step + 1, loss.item())
    return model.eval()


def export_pattern(model: PatternNet, path: Path) -> Path:
    """``model`` as ONNX: ``images`` (B, 3, 64, 64) in, ``pattern`` logits (B, 3) out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model.eval(), (torch.zeros(1, 3, INPUT_SIZE, INPUT_SIZE),), str(path),
                          dynamo=False, opset_version=OPSET, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    onnx.checker.check_model(str(path))
    return path


def quantize_pattern(path: Path, out: Path, calibration: np.ndarray) -> Path:
    """The INT8 QDQ variant, calibrated on ``calibration`` crops (N, h, w, 3 RGB uint8); the
    convolution that reads the picture and the linear head (the logits) stay float."""
    graph = onnx.load(str(path))
    keep = [n.name for n in graph.graph.node
            if n.op_type == "Gemm" or (n.op_type == "Conv" and n.input[0] == INPUT_NAME)]
    return quantize_model(path, out, tensor(calibration, pattern_card().input), "minmax",
                          excluded=keep)


def accuracy(path: Path, pictures: np.ndarray, labels: np.ndarray,
             spec: ClassifierSpec) -> dict[str, Any]:
    """Accuracy of the ONNX model at ``path`` on crops, overall and per class (recall)."""
    with OnnxRuntimeBackend(path, threads=2) as backend:
        feeds = tensor(pictures, spec.input)
        found = np.concatenate([
            backend.infer({INPUT_NAME: feeds[i:i + 256]})[OUTPUT_NAME].argmax(1)
            for i in range(0, len(feeds), 256)])
    per_class = {name: round(float((found[labels == k] == k).mean()), 4)
                 for k, name in enumerate(spec.heads[0].labels) if (labels == k).any()}
    return {"accuracy": round(float((found == labels).mean()), 4), "recall": per_class,
            "crops": int(len(labels))}


def ship(out: Path, config: PatternTrainConfig = PatternTrainConfig(), *, heldout_scenes: int
         = 400, on_step: Callable[[int, float], None] | None = None,
         on_render: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Train, export FP32 and INT8 into ``out`` with the card, and score both on held-out
    crops (scenes of another seed); returns the figures the card records."""
    start = time.perf_counter()
    model = train_pattern(config, on_step, on_render)
    minutes = round((time.perf_counter() - start) / 60, 1)
    fp32 = export_pattern(model, out / "model.onnx")
    calibration, _ = crop_set(config.seed, 60, pattern_card(), start=config.scenes)
    int8 = quantize_pattern(fp32, out / "model.int8.onnx", calibration)
    pictures, labels = crop_set(HELDOUT_SEED, heldout_scenes, pattern_card())
    spec = pattern_card()
    measured = {"heldout": {"seed": HELDOUT_SEED, "scenes": heldout_scenes,
                            "fp32": accuracy(fp32, pictures, labels, spec),
                            "int8": accuracy(int8, pictures, labels, spec)}}
    provenance = {"trained_by": "models/classifier_train.py", "steps": config.steps,
                  "batch_size": config.batch_size, "scenes": config.scenes,
                  "seed": config.seed, "minutes": minutes}
    write_classifier_card(pattern_card(measured, provenance), out / "card.yaml")
    return measured


def write_classifier_card(spec: ClassifierSpec, path: Path) -> Path:
    """``spec`` as card.yaml, read back so that a card that would not load never ships."""
    path.write_text(f"# {spec.name}: written by models/classifier_train.py\n"
                    + yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True),
                                     sort_keys=False, width=96, default_flow_style=None))
    load_classifier_card(path)
    return path
