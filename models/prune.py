"""Structured channel pruning of ShapesYOLO: L1 norm, torch-pruning's dependency graph, progressive.

``prune`` removes ``ratio`` of the prunable channels (0.5: half of each layer's channels,
about three quarters of the multiply-adds) in ``rounds`` equal steps, and fine-tunes on the
training scenes after each step and longer after the last. Which channels go is decided by
the L1 norm of their conv filters (``MagnitudeImportance(p=1)``), summed over every layer
that torch-pruning's dependency graph ties together: the two sides of a residual add, a
concat's inputs and the convs they feed, a BatchNorm and its conv. The library follows the
graph; nothing here lists coupled layers by hand. The three 1x1 output convs are left whole
(their output channels are the box sides, objectness, and classes).

How the ratio is shared among the layers (``allocation``, ``layer_ratios``): "uniform" takes
``ratio`` of every layer; "deep-first" (the default) takes at most half of the shallow
layers (stem, stride-4 and stride-8 stages, neck, head) and the rest from the stride-16 and
stride-32 stages, so that the same ``ratio`` of all channels goes. Up to 0.5 the two are the
same. Above it, uniform pruning leaves the layers every box depends on too narrow to learn
back. A pruned network can be pruned on (``prune(pruned_50, config, teacher=unpruned)``),
which starts a higher ratio from fine-tuned weights.

Fine-tuning learns from the labels and, with ``distill`` (the default), from the unpruned
network itself: its objectness, class and box outputs on the same images are a second target
(``models.loss.distillation_loss``), which carries what the labels cannot (how sure to be of
a half-hidden object), for a teacher forward pass on each batch.

What each choice measured: docs/MODELS.md, "Pruning". A pruned network's checkpoint is read
by ``models.checkpoint.load_checkpoint``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from models.checkpoint import save_checkpoint
from models.detector import ShapesYOLO, count_parameters, make_grid
from models.fitting import WeightAverage, lr_factor, optimiser_step, param_groups
from models.train import SceneSet, TrainConfig

MAX_RATIO = 0.9
ALLOCATIONS: tuple[str, ...] = ("deep-first", "uniform")
SHALLOW_MAX = 0.5  # the most of its channels a shallow layer loses under "deep-first"
SHALLOW = ("stem", "stage4", "stage8", "lateral32", "fuse16", "fuse8", "box_branch",
           "cls_branch")  # ShapesYOLO's modules at strides 2-8, and its neck and head
DEEP = ("stage16", "stage32")


@dataclass(frozen=True, slots=True)
class PruneConfig:
    ratio: float  # fraction of the unpruned network's prunable channels removed, (0, MAX_RATIO]
    rounds: int = 4  # pruning steps: ratio / rounds more channels go at each
    round_steps: int = 100  # fine-tuning steps after each round but the last
    final_steps: int = 800  # fine-tuning steps after the last round
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0  # of the scenes fine-tuned on: the training seed, never the held-out one
    scenes: int = 6400  # the training run's count (and, by seed, its scenes)
    threads: int = 2
    distill: bool = True  # fine-tune towards the unpruned network's outputs too
    allocation: str = "deep-first"  # how ``ratio`` is shared among the layers (module doc)

    def __post_init__(self) -> None:
        if not 0.0 < self.ratio <= MAX_RATIO:
            raise ValueError(f"ratio must be in (0, {MAX_RATIO}], got {self.ratio}")
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation must be one of {', '.join(ALLOCATIONS)}, "
                             f"got {self.allocation!r}")
        if self.rounds < 1 or self.round_steps < 0 or self.final_steps < 1:
            raise ValueError(f"rounds and final steps must be >= 1, round steps >= 0; got "
                             f"{self.rounds}, {self.final_steps}, {self.round_steps}")

    @property
    def total_steps(self) -> int:
        return (self.rounds - 1) * self.round_steps + self.final_steps


@dataclass(frozen=True, slots=True)
class PruneReport:
    step: int  # fine-tuning steps done
    steps: int
    round: int  # pruning rounds done
    loss: float
    parameters: int


@dataclass(slots=True)
class PruneResult:
    model: ShapesYOLO  # pruned and fine-tuned (averaged weights), eval mode
    config: PruneConfig
    parameters: tuple[int, int]  # before, after
    macs: tuple[int, int]  # multiply-adds per image at the configured input size
    wall_s: float
    history: list[dict[str, float]] = field(default_factory=list)
    channels: tuple[int, int] = (0, 0)  # prunable conv channels: unpruned, after

    @property
    def channels_removed(self) -> float:
        """Fraction of the unpruned architecture's prunable channels removed (torch-pruning
        rounds per layer, so it can differ from ``config.ratio`` by a channel here and
        there)."""
        before, after = self.channels
        return 1.0 - after / before if before else 0.0

    def log(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "parameters": list(self.parameters),
                "macs": list(self.macs), "channels": list(self.channels),
                "wall_s": round(self.wall_s, 1), "history": self.history}


def prunable_convs(model: ShapesYOLO) -> list[nn.Conv2d]:
    """The convs whose output channels pruning may remove: all but the three output convs."""
    kept = (model.box, model.obj, model.cls)
    return [m for m in model.modules()
            if isinstance(m, nn.Conv2d) and all(m is not k for k in kept)]


def count_channels(model: ShapesYOLO) -> int:
    return sum(int(c.out_channels) for c in prunable_convs(model))


def layer_ratios(model: ShapesYOLO, ratio: float, allocation: str) -> dict[nn.Module, float]:
    """Per-module pruning ratios (torch-pruning's ``pruning_ratio_dict``) that leave ``model``
    with ``ratio`` of the channels of its unpruned architecture removed. ``model`` may be
    pruned already (a 50% network taken on to 70%): each module's ratio is then what is left
    to remove of the channels it still has, and 0 where it has no more to lose.

    "uniform": every layer loses ``ratio``. "deep-first": the shallow layers (the stem and
    the stride-4 and stride-8 stages, which see the most pixels, and the neck and head, which
    every box passes through) lose at most ``SHALLOW_MAX``; the stride-16 and stride-32
    stages, which hold most of the parameters and few of the multiply-adds, lose the rest.
    Up to ``SHALLOW_MAX`` the two are the same.
    """
    unpruned = ShapesYOLO(model.config)
    full = {name: _channels(getattr(unpruned, name)) for name in SHALLOW + DEEP}
    shallow = sum(full[n] for n in SHALLOW)
    deep = sum(full[n] for n in DEEP)
    target = dict.fromkeys(SHALLOW + DEEP, ratio)
    if allocation == "deep-first" and ratio > SHALLOW_MAX:
        shallow_ratio = SHALLOW_MAX
        deep_ratio = (ratio * (deep + shallow) - shallow_ratio * shallow) / deep
        if deep_ratio > MAX_RATIO:  # the deep layers cannot take it all: the shallow share
            deep_ratio = MAX_RATIO
            shallow_ratio = (ratio * (deep + shallow) - deep_ratio * deep) / shallow
        target = {**dict.fromkeys(SHALLOW, shallow_ratio), **dict.fromkeys(DEEP, deep_ratio)}
    ratios: dict[nn.Module, float] = {}
    for name, wanted in target.items():
        module = getattr(model, name)
        kept_now = _channels(module) / full[name]
        ratios[module] = max(0.0, 1.0 - (1.0 - wanted) / kept_now)
    return ratios


def _channels(module: nn.Module) -> int:
    return sum(int(c.out_channels) for c in module.modules() if isinstance(c, nn.Conv2d))


def count_macs(model: ShapesYOLO) -> int:
    """Multiply-adds of one image at the model's configured input size (torch-pruning's
    counter: convs, BatchNorm, activations)."""
    import torch_pruning as tp

    width, height = model.config.input_size
    macs, _ = tp.utils.count_ops_and_params(model.eval(), torch.zeros(1, 3, height, width))
    return int(macs)


def prune(model: ShapesYOLO, config: PruneConfig,
          on_step: Callable[[PruneReport], None] | None = None,
          on_render: Callable[[int, int], None] | None = None,
          *, teacher: ShapesYOLO | None = None) -> PruneResult:
    """Prune a copy of ``model`` progressively, fine-tuning between rounds and after, until
    ``config.ratio`` of its unpruned architecture's channels are gone. ``model`` may be a
    pruned network already; ``teacher`` (default: ``model`` itself) is the network
    distillation learns from, which for an already pruned ``model`` should be the unpruned
    one. ValueError when ``model`` has lost that many channels already."""
    start = time.monotonic()
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    model = copy.deepcopy(model).eval()
    for parameter in model.parameters():  # a pruned result's averaged weights are frozen
        parameter.requires_grad_(True)
    unpruned_channels = count_channels(ShapesYOLO(model.config))
    already = 1.0 - count_channels(model) / unpruned_channels
    if already >= config.ratio - 0.01:
        raise ValueError(f"the network has lost {already:.0%} of its channels already; "
                         f"pruning it to {config.ratio:.0%} leaves nothing to do")
    before = (count_parameters(model), count_macs(model), unpruned_channels)
    pruner = _pruner(model, config)
    distilled = _frozen(teacher if teacher is not None else model) if config.distill else None
    tuning = _FineTuning(config, SceneSet.render(_scene_config(config), on_render), distilled,
                         on_step, start)
    for round_index in range(config.rounds):
        pruner.step()
        model = tuning.round(model, round_index)
    model.eval()
    after = (count_parameters(model), count_macs(model))
    return PruneResult(model, config, (before[0], after[0]), (before[1], after[1]),
                       time.monotonic() - start, tuning.history,
                       (before[2], count_channels(model)))


def _pruner(model: ShapesYOLO, config: PruneConfig) -> Any:
    """torch-pruning's L1 magnitude pruner over ``model``, the output convs left whole."""
    import torch_pruning as tp

    width, height = model.config.input_size
    return tp.pruner.MagnitudePruner(
        model, torch.zeros(1, 3, height, width),
        importance=tp.importance.MagnitudeImportance(p=1, target_types=[nn.Conv2d]),
        pruning_ratio=config.ratio, iterative_steps=config.rounds,
        pruning_ratio_dict=layer_ratios(model, config.ratio, config.allocation),
        ignored_layers=[model.box, model.obj, model.cls])


@dataclass(slots=True)
class _FineTuning:
    """The fine-tuning after each pruning round: a constant learning rate between rounds, a
    warmed-up, decaying one and a weight average after the last."""

    config: PruneConfig
    scenes: SceneSet
    teacher: ShapesYOLO | None
    on_step: Callable[[PruneReport], None] | None
    start: float
    done: int = 0
    history: list[dict[str, float]] = field(default_factory=list)

    def round(self, model: ShapesYOLO, index: int) -> ShapesYOLO:
        """Fine-tune ``model`` after pruning round ``index``; the network to go on with."""
        config = self.config
        grid = make_grid(*self.scenes.images.shape[2:0:-1])
        parameters = count_parameters(model)  # changes only at a pruning round
        last = index == config.rounds - 1
        steps = config.final_steps if last else config.round_steps
        model.train()
        optimiser = torch.optim.AdamW(param_groups(model, 5e-4), lr=config.lr)
        average = WeightAverage(model, 0.995) if last else None
        for step in range(steps):
            for group in optimiser.param_groups:
                group["lr"] = config.lr * (lr_factor(step, steps, min(50, steps // 10))
                                           if last else 1.0)
            batch = self.scenes.batch(self.done, config.batch_size)
            loss, _ = optimiser_step(model, optimiser, batch, grid, self.teacher)
            if average is not None:
                average.update(model)
            self.done += 1
            if self.done % 10 == 0 or self.done == config.total_steps:
                self.history.append({"step": self.done, "round": index + 1,
                                     "loss": round(loss, 4), "parameters": parameters,
                                     "s": round(time.monotonic() - self.start, 1)})
            if self.on_step is not None:
                self.on_step(PruneReport(self.done, config.total_steps, index + 1, loss,
                                         parameters))
        return average.model if average is not None else model


def _frozen(model: ShapesYOLO) -> ShapesYOLO:
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def _scene_config(config: PruneConfig) -> TrainConfig:
    return TrainConfig(steps=config.total_steps, batch_size=config.batch_size,
                       scenes=config.scenes, seed=config.seed, threads=config.threads)


def save_pruned(result: PruneResult, path: Path, train: dict[str, Any] | None = None) -> Path:
    """model.pt of a pruned network: its config, the plain state dict, and how it was made."""
    return save_checkpoint(result.model, path, train, prune=asdict(result.config))


def channel_summary(model: ShapesYOLO) -> str:
    """Output channels of the backbone stages and neck, e.g. '8-16-24-48-80 / neck 24'."""
    stages = [model.stem, model.stage4, model.stage8, model.stage16, model.stage32]
    widths = [_out_channels(s) for s in stages]
    return "-".join(str(w) for w in widths) + f" / neck {_out_channels(model.fuse8)}"


def _out_channels(module: nn.Module) -> int:
    convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
    return int(convs[-1].out_channels) if convs else 0


def ratio_checked(ratio: float) -> float:
    if not (math.isfinite(ratio) and 0.0 < ratio <= MAX_RATIO):
        raise ValueError(f"--ratio must be in (0, {MAX_RATIO}], got {ratio:g}")
    return ratio
