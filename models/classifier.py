"""PatternNet: the small classifier vidpipe trains and ships, and the crops it learns from.

It tells the fill of a shape — ``solid``, ``shaded`` (a gradient across it) or ``striped``
(two colours) — from a crop of a detected box: a second model for tracked objects, trained
like the shapes detector on rendered scenes whose truth is known (``SceneObject.pattern``).
Crops are cut from full-size clip frames (640x384) exactly as the pipeline cuts them
(``models.crops``: the box grown by the card's context, stretched to 64x64), around boxes
moved and resized a little as a detector's are, half of the pictures JPEG-compressed.

The network is plain Conv-BN-ReLU blocks, global average pooling and one linear layer:
INT8 QDQ quantizes it op by op, and 64x64 costs a fraction of a millisecond a crop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.classifier_spec import ClassifierSpec
from models.crops import crop_pictures
from models.data import CLIP_SIZE, maybe_jpeg, sample_scene
from models.scene import render

PATTERNS: tuple[str, ...] = ("solid", "shaded", "striped")
INPUT_SIZE = 64
BOX_NOISE = 0.08  # a box edge moves up to this fraction of the box's size (a detector's error)
CROP_SEED = 5000  # seeds apart from the detector's training (0), clips (1000) and tracking


@dataclass(frozen=True, slots=True)
class PatternNetConfig:
    widths: tuple[int, ...] = (16, 32, 64, 96)  # each block halves the picture
    classes: tuple[str, ...] = PATTERNS


class PatternNet(nn.Module):
    """(B, 3, 64, 64) RGB in [0, 1] -> (B, classes) logits."""

    def __init__(self, config: PatternNetConfig = PatternNetConfig()) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        channels = 3
        for width in config.widths:
            layers += [nn.Conv2d(channels, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True),
                       nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, len(config.classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def pattern_crops(seed: int, index: int, spec: ClassifierSpec) -> tuple[np.ndarray, np.ndarray]:
    """The crops of scene ``index`` of ``seed`` (N, h, w, 3 RGB uint8) and their patterns
    (N,): every object visible enough to be detected, its box moved as a detector's is."""
    rng = np.random.default_rng([seed, 7, index])
    scene = sample_scene(rng, CLIP_SIZE, moving=False)
    image, truth = render(scene, 0.0, rng)
    image = maybe_jpeg(rng, image)
    if not len(truth.boxes):
        return np.zeros((0, spec.input.height, spec.input.width, 3), np.uint8), \
            np.zeros(0, np.int64)
    boxes = truth.boxes[:, :4].astype(np.float32)
    sizes = np.concatenate([boxes[:, 2:] - boxes[:, :2]] * 2, axis=1)
    boxes = boxes + rng.uniform(-BOX_NOISE, BOX_NOISE, boxes.shape).astype(np.float32) * sizes
    labels = np.array([scene.objects[int(i)].pattern for i in truth.ids], np.int64)
    return crop_pictures(image, boxes, spec), labels


def crop_set(seed: int, scenes: int, spec: ClassifierSpec, start: int = 0,
             on_progress: Callable[[int, int], None] | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """The crops and patterns of scenes ``start`` .. ``start + scenes`` of ``seed``
    (``on_progress(done, scenes)`` every 50 scenes)."""
    pictures, labels = [], []
    for done, i in enumerate(range(start, start + scenes), start=1):
        crops, patterns = pattern_crops(seed, i, spec)
        pictures.append(crops)
        labels.append(patterns)
        if on_progress is not None and (done % 50 == 0 or done == scenes):
            on_progress(done, scenes)
    return np.concatenate(pictures), np.concatenate(labels)


def to_tensor(pictures: np.ndarray) -> torch.Tensor:
    """(N, h, w, 3) RGB uint8 -> (N, 3, h, w) float in [0, 1]: the card's normalisation."""
    return torch.from_numpy(pictures).permute(0, 3, 1, 2).float().div_(255.0)
