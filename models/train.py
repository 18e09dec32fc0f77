"""Training ShapesYOLO on the CPU, on a set of rendered scenes, reproducibly.

A run is fixed by its ``TrainConfig``: it first renders ``scenes`` images (chunk ``k`` from
``(seed, k)``, see ``models.data``; on every core, in worker processes), then step ``i``
draws its batch from them with random flips by ``(seed, i)``; the weights start from
``torch.manual_seed(seed)``, and the learning rate follows the step count, not the clock.

Why a rendered set and not a fresh scene per image: rendering a batch costs about as much
as the training step itself, so rendering on the fly took a large share of the cores; a
rendered set seen several times, flipped, trains the same network in more steps per minute
(docs/BENCHMARKS.md, "Measurements behind code choices").

The same config on the same torch build and thread count gives the same weights. ``minutes``
is only a safety cap: a run it cuts short says so in its log (``stopped_early``), because
its learning rate never finished decaying.

The weights kept are an exponential moving average of the trained ones (as YOLOv5/v8 do):
on a run this short the average is a markedly better detector than the last step's weights.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import cv2
import numpy as np
import torch

from models.data import TRAIN_SIZE, TrainBatch, training_batch
from models.detector import Activation, DetectorConfig, ShapesYOLO, make_grid
from models.evaluate import Accuracy, FrameTruth, mean_average_precision
from models.fitting import (
    WeightAverage,
    images_to_tensor,
    lr_factor,
    optimiser_step,
    param_groups,
)
from models.scene import CLASSES


@dataclass(frozen=True, slots=True)
class TrainConfig:
    steps: int = 3000
    batch_size: int = 16
    scenes: int = 6400  # images rendered once and drawn from (capped at steps x batch size)
    lr: float = 3e-3
    weight_decay: float = 5e-4
    warmup_steps: int = 100
    ema_decay: float = 0.998
    seed: int = 0
    minutes: float = 30.0  # safety cap on wall time
    threads: int = 2
    activation: Activation = "relu"
    image_size: tuple[int, int] = TRAIN_SIZE

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch size must be >= 1, got {self.steps}, "
                             f"{self.batch_size}")
        if self.scenes < 1:
            raise ValueError(f"scenes must be >= 1, got {self.scenes}")
        if self.minutes <= 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")


@dataclass(frozen=True, slots=True)
class StepReport:
    step: int  # steps done
    steps: int
    loss: float
    parts: dict[str, float]
    elapsed_s: float


@dataclass(slots=True)
class TrainResult:
    model: ShapesYOLO  # the averaged weights, in eval mode
    config: TrainConfig
    steps_done: int
    wall_s: float
    cpu_s: float  # CPU time of the process, all threads: wall time on idle cores x cores used
    stopped_early: bool
    history: list[dict[str, float]] = field(default_factory=list)  # every 10th step

    def log(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "steps_done": self.steps_done,
                "wall_s": round(self.wall_s, 1), "cpu_s": round(self.cpu_s, 1),
                "stopped_early": self.stopped_early,
                "history": self.history}


def detector_config(config: TrainConfig) -> DetectorConfig:
    return DetectorConfig(num_classes=len(CLASSES), activation=config.activation,
                          class_names=CLASSES)


def train(config: TrainConfig, on_step: Callable[[StepReport], None] | None = None,
          network: DetectorConfig | None = None,
          on_render: Callable[[int, int], None] | None = None) -> TrainResult:
    """Train from scratch; ``on_step`` hears about every step and ``on_render`` about the
    scenes rendered so far (for progress bars). ``network`` overrides the default
    architecture (tests train tiny ones)."""
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    torch.set_num_threads(config.threads)
    start, cpu_start = time.monotonic(), time.process_time()
    scenes = SceneSet.render(config, on_render)
    model = ShapesYOLO(network or detector_config(config)).train()
    optimiser = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr)
    average = WeightAverage(model, config.ema_decay)
    grid = make_grid(*config.image_size)
    deadline = start + config.minutes * 60
    history: list[dict[str, float]] = []
    done = 0
    for step in range(config.steps):
        batch = scenes.batch(step, config.batch_size)
        for group in optimiser.param_groups:
            group["lr"] = config.lr * lr_factor(step, config.steps, config.warmup_steps)
        loss, parts = optimiser_step(model, optimiser, batch, grid)
        average.update(model)
        done = step + 1
        elapsed = time.monotonic() - start
        if step % 10 == 0 or done == config.steps:
            history.append({"step": done, "loss": round(loss, 4), "s": round(elapsed, 1),
                            **{k: round(v, 4) for k, v in parts.items()}})
        if on_step is not None:
            on_step(StepReport(done, config.steps, loss, parts, elapsed))
        if time.monotonic() > deadline:
            break
    return TrainResult(average.model, config, done, time.monotonic() - start,
                       time.process_time() - cpu_start, done < config.steps, history)


RENDER_CHUNK = 16  # scenes per rendering task: chunk k is training_batch(seed, k, 16)


@dataclass(frozen=True, slots=True)
class SceneSet:
    """Rendered training images and their truth; batches drawn from them with flips."""

    seed: int
    images: np.ndarray  # [S, H, W, 3] uint8
    boxes: list[np.ndarray]
    ignore: list[np.ndarray]

    @classmethod
    def render(cls, config: TrainConfig,
               on_render: Callable[[int, int], None] | None = None) -> SceneSet:
        """``config.scenes`` images (at most steps x batch size), on ``config.threads``
        worker processes when there is more than one chunk to render."""
        wanted = min(config.scenes, config.steps * config.batch_size)
        chunks = math.ceil(wanted / RENDER_CHUNK)
        parts: list[TrainBatch] = []
        if chunks == 1 or config.threads == 1:
            for k in range(chunks):
                parts.append(training_batch(config.seed, k, RENDER_CHUNK, config.image_size))
                if on_render is not None:
                    on_render(len(parts) * RENDER_CHUNK, chunks * RENDER_CHUNK)
        else:  # spawn, not fork: a forked child of a process with OpenMP threads can hang
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(config.threads, mp_context=context) as pool:
                for part in pool.map(training_batch, itertools.repeat(config.seed),
                                     range(chunks), itertools.repeat(RENDER_CHUNK),
                                     itertools.repeat(config.image_size)):
                    parts.append(part)
                    if on_render is not None:
                        on_render(len(parts) * RENDER_CHUNK, chunks * RENDER_CHUNK)
        return cls(config.seed, np.concatenate([p.images for p in parts]),
                   [b for p in parts for b in p.boxes], [b for p in parts for b in p.ignore])

    def __len__(self) -> int:
        return len(self.images)

    def batch(self, step: int, size: int) -> TrainBatch:
        """Batch of step ``step``: distinct scenes, each flipped left-right and/or upside
        down at random (every class is symmetric under both), the same for the same step."""
        rng = np.random.default_rng([self.seed, 3, step])
        picks = rng.choice(len(self), size, replace=len(self) < size)
        flips = rng.integers(0, 2, (size, 2)).astype(bool)
        height, width = self.images.shape[1:3]
        images, boxes, ignore = [], [], []
        for index, (mirror, upside_down) in zip(picks, flips, strict=True):
            image = self.images[index]
            rows = [self.boxes[index].copy(), self.ignore[index].copy()]
            if mirror:
                image = image[:, ::-1]
                for r in rows:
                    r[:, [0, 2]] = width - r[:, [2, 0]]
            if upside_down:
                image = image[::-1]
                for r in rows:
                    r[:, [1, 3]] = height - r[:, [3, 1]]
            images.append(image)
            boxes.append(rows[0])
            ignore.append(rows[1])
        return TrainBatch(np.stack(images), boxes, ignore)


@torch.no_grad()
def validate(model: ShapesYOLO, seed: int, batches: int = 4, batch_size: int = 32,
             score_threshold: float = 0.01, iou_threshold: float = 0.6) -> Accuracy:
    """mAP on freshly rendered still images of ``seed``: a quick check without the pipeline
    (the figures that count come from clips run through it: ``vidpipe model evaluate``)."""
    model.eval()
    truths, predictions = [], []
    for index in range(batches):
        batch = training_batch(seed, index, batch_size)
        output = model(images_to_tensor(batch.images)).numpy()
        for rows, boxes, ignore in zip(output, batch.boxes, batch.ignore, strict=True):
            truths.append(FrameTruth(boxes, ignore))
            predictions.append(detections_from_rows(rows, score_threshold, iou_threshold))
    return mean_average_precision(truths, predictions, CLASSES)


def detections_from_rows(rows: np.ndarray, score_threshold: float,
                         iou_threshold: float) -> np.ndarray:
    """One image's yolov8 rows [4 + C, N] -> (K, 6) x1, y1, x2, y2, score, class after NMS."""
    scores = rows[4:].max(0)
    classes = rows[4:].argmax(0)
    keep = scores >= score_threshold
    cx, cy, w, h = rows[:4, keep]
    xywh = np.stack([cx - w / 2, cy - h / 2, w, h], 1)
    kept = np.asarray(cv2.dnn.NMSBoxesBatched(
        xywh.tolist(), scores[keep].tolist(), classes[keep].tolist(), score_threshold,
        iou_threshold), dtype=np.int64).reshape(-1)
    x1, y1 = xywh[kept, 0], xywh[kept, 1]
    return np.stack([x1, y1, x1 + xywh[kept, 2], y1 + xywh[kept, 3], scores[keep][kept],
                     classes[keep][kept]], 1)
