"""ShapesYOLO: the small anchor-free detector that vidpipe trains, prunes, quantizes and ships.

The output is the ``yolov8`` layout the pipeline decodes, ``[B, 4 + C, N]``: rows cx, cy, w, h
in input pixels, then C per-class scores in [0, 1] (no separate objectness row: it is
multiplied in, see ``ShapesYOLO``), one column per cell of a
single stride-8 grid. Decoding from the grid happens inside ``forward`` so the exported ONNX
graph needs no post-processing of its own.

Built to be pruned and quantized later:

- plain Conv-BN-activation blocks, residual adds and one concat per FPN level; no channel
  ``chunk``/``split``, so torch-pruning's dependency graph can follow every channel;
- the activation is a constructor argument (``relu``, ``relu6``, ``silu``): ReLU-family
  activations fold into the preceding conv under INT8 QDQ, SiLU does not, and which one costs
  what accuracy is a measurement, not a guess;
- a decoupled head (box branch, class branch; see ``ShapesYOLO``);
- one output level at stride 8 (fed by a top-down FPN from strides 16 and 32, which gives the
  receptive field for large objects): one grid means one decode path and one loss, and the
  training budget of a CPU goes into the backbone instead of three heads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

Activation = Literal["relu", "relu6", "silu"]
ACTIVATIONS: tuple[str, ...] = ("relu", "relu6", "silu")
STRIDE = 8
PRIOR_SCORE = 0.01  # initial objectness: keeps the early BCE from drowning in background


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Everything needed to rebuild the network; saved beside the weights in model.pt."""

    num_classes: int
    input_size: tuple[int, int] = (320, 320)  # (width, height) the export is traced at
    widths: tuple[int, ...] = (16, 32, 48, 96, 160)  # stem, strides 4, 8, 16, 32
    depths: tuple[int, ...] = (0, 1, 2, 1)  # residual blocks at strides 4, 8, 16, 32
    neck_width: int = 48
    activation: Activation = "relu"
    class_names: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if len(self.widths) != 5 or len(self.depths) != 4:
            raise ValueError(f"widths needs 5 entries and depths 4, got {self.widths}, "
                             f"{self.depths}")
        w, h = self.input_size
        if w % 32 or h % 32:
            raise ValueError(f"input size must be a multiple of 32, got {self.input_size}")
        if self.class_names and len(self.class_names) != self.num_classes:
            raise ValueError(f"{len(self.class_names)} class names for {self.num_classes} "
                             f"classes")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DetectorConfig:
        tuples = ("input_size", "widths", "depths", "class_names")
        fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in data.items()}
        return cls(**fields)


def make_activation(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU}[name](inplace=True)


class ConvBN(nn.Sequential):
    """Conv (no bias: BN follows) -> BatchNorm -> activation; BN folds into the conv on export."""

    def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1,
                 act: str | None = "relu") -> None:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                                   nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(make_activation(act))
        super().__init__(*layers)


class Residual(nn.Module):
    """Two 3x3 convs and an identity add: the add ties in/out channels, which pruning groups."""

    def __init__(self, width: int, act: str) -> None:
        super().__init__()
        self.conv1 = ConvBN(width, width, 3, act=act)
        self.conv2 = ConvBN(width, width, 3, act=None)
        self.act = make_activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.conv2(self.conv1(x)))


def stage(cin: int, cout: int, depth: int, act: str) -> nn.Sequential:
    """A stride-2 conv into a new resolution, then ``depth`` residual blocks."""
    return nn.Sequential(ConvBN(cin, cout, 3, 2, act),
                         *(Residual(cout, act) for _ in range(depth)))


class HeadOutputs(NamedTuple):
    """Raw head outputs at stride 8, each [B, k, h, w]: what the loss trains."""

    box: torch.Tensor  # 4: left, top, right, bottom before ``distances``
    objectness: torch.Tensor  # 1: logit of "an object is centred here"
    classes: torch.Tensor  # C: logits of the class, given an object


class ShapesYOLO(nn.Module):
    """Backbone (strides 2..32) -> top-down FPN to stride 8 -> decoupled head.

    The head is YOLOX's: a box branch (box sides and objectness) and a class branch, each a
    3x3 conv; decoupled heads converge markedly faster than shared ones (YOLOX, fig. 3),
    which a 30-minute CPU budget needs. Scores are factorised as objectness x softmax over
    classes: objectness learns "where" from every cell, while the class branch learns "which"
    from the positives only, instead of five sigmoids each drowned in background cells. The
    export still emits one score per class (yolov8 layout): the product, in [0, 1].
    """

    def __init__(self, config: DetectorConfig) -> None:
        super().__init__()
        self.config = config
        w, d, n, act = config.widths, config.depths, config.neck_width, config.activation
        self.stem = ConvBN(3, w[0], 3, 2, act)
        self.stage4 = stage(w[0], w[1], d[0], act)
        self.stage8 = stage(w[1], w[2], d[1], act)
        self.stage16 = stage(w[2], w[3], d[2], act)
        self.stage32 = stage(w[3], w[4], d[3], act)
        self.lateral32 = ConvBN(w[4], n, 1, act=act)
        self.fuse16 = ConvBN(n + w[3], n, 3, act=act)
        self.fuse8 = ConvBN(n + w[2], n, 3, act=act)
        self.box_branch = ConvBN(n, n, 3, act=act)
        self.cls_branch = ConvBN(n, n, 3, act=act)
        # separate 1x1 convs per output (not one conv split in three): prunable
        self.box = nn.Conv2d(n, 4, 1)
        self.obj = nn.Conv2d(n, 1, 1)
        self.cls = nn.Conv2d(n, config.num_classes, 1)
        self.grid: torch.Tensor
        nn.init.zeros_(self.box.weight)
        for conv, value in ((self.box, 0.0), (self.obj, -math.log(1 / PRIOR_SCORE - 1)),
                            (self.cls, 0.0)):
            if conv.bias is not None:  # always: all are built with a bias
                nn.init.constant_(conv.bias, value)  # boxes start on their cell centres
        self.register_buffer("grid", make_grid(*config.input_size), persistent=False)

    def features(self, images: torch.Tensor) -> HeadOutputs:
        """Raw head outputs at stride 8, for training; ``forward`` decodes them."""
        c8 = self.stage8(self.stage4(self.stem(images)))
        c16 = self.stage16(c8)
        p32 = self.lateral32(self.stage32(c16))
        p16 = self.fuse16(torch.cat([F.interpolate(p32, scale_factor=2.0), c16], 1))
        p8 = self.fuse8(torch.cat([F.interpolate(p16, scale_factor=2.0), c8], 1))
        box_features = self.box_branch(p8)
        return HeadOutputs(self.box(box_features), self.obj(box_features),
                           self.cls(self.cls_branch(p8)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] float RGB in [0, 1] -> [B, 4 + C, N] yolov8 rows, N = H/8 * W/8."""
        raw = self.features(images)
        ltrb = distances(raw.box.flatten(2))
        grid = self.grid_for(images)
        cxcy = grid + (ltrb[:, 2:] - ltrb[:, :2]) * 0.5
        wh = ltrb[:, :2] + ltrb[:, 2:]
        scores = raw.objectness.flatten(2).sigmoid() * raw.classes.flatten(2).softmax(1)
        return torch.cat([cxcy, wh, scores], 1)

    def grid_for(self, images: torch.Tensor) -> torch.Tensor:
        """Cell centres [1, 2, N] in input pixels: the stored one at the configured size (and
        always in the export, where it becomes a constant), else made for this size."""
        h, w = images.shape[-2:]
        if torch.jit.is_tracing() or (w, h) == self.config.input_size:
            return self.grid
        return make_grid(int(w), int(h)).to(images.device)


def distances(raw: torch.Tensor) -> torch.Tensor:
    """Box sides (left, top, right, bottom) in input pixels from raw head outputs [B, 4, N].

    softplus keeps them positive with a gradient everywhere (exp explodes early in training,
    ReLU dies); at the zero-initialised head every box starts about 11 px wide.
    """
    return F.softplus(raw) * STRIDE


def make_grid(width: int, height: int) -> torch.Tensor:
    """Centres of the stride-8 cells in input pixels, [1, 2, N], row-major like ``flatten``."""
    ys, xs = torch.meshgrid(torch.arange(height // STRIDE), torch.arange(width // STRIDE),
                            indexing="ij")
    centres = torch.stack([xs.flatten(), ys.flatten()]).float()
    return ((centres + 0.5) * STRIDE).unsqueeze(0)


def build_detector(config: DetectorConfig) -> ShapesYOLO:
    return ShapesYOLO(config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
