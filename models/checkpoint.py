"""model.pt files: save a trained or pruned ShapesYOLO, load either back.

A pruned network no longer matches its ``DetectorConfig`` widths. Its checkpoint is the plain
state dict (loadable with ``weights_only=True``): ``load_pruned`` builds the full network and
shrinks each conv and BatchNorm to the shapes the saved tensors have.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from models.detector import DetectorConfig, ShapesYOLO


def save_checkpoint(model: ShapesYOLO, path: Path, train: dict[str, Any] | None = None,
                    prune: dict[str, Any] | None = None) -> Path:
    """model.pt: the weights, the network's config, the training run's config and, for a
    pruned network, how it was pruned (its layer widths are then the saved tensors')."""
    saved: dict[str, Any] = {"detector": model.config.to_dict(), "train": train or {},
                             "state_dict": model.state_dict()}
    if prune is not None:
        saved["prune"] = prune
    torch.save(saved, path)
    return path


def load_checkpoint(path: Path) -> ShapesYOLO:
    """The network of a model.pt (trained or pruned), in eval mode; raises ValueError for a
    file that is not one."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        config = DetectorConfig.from_dict(saved["detector"])
        if saved.get("prune"):  # channels pruned: the saved tensors give the layer widths
            return load_pruned(config, saved["state_dict"])
        model = ShapesYOLO(config)
        model.load_state_dict(saved["state_dict"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError,
            pickle.UnpicklingError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{path}: not a ShapesYOLO checkpoint ({type(e).__name__}: "
                         f"{first[:120]})") from e
    return model.eval()


def shrink_to(model: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """Resize every conv and BatchNorm of ``model`` to the tensor shapes in ``state`` (a
    pruned network's state dict), so that ``load_state_dict`` fits; returns ``model``."""
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        weight = state.get(f"{prefix}weight")
        if weight is None:
            continue
        if isinstance(module, nn.Conv2d):
            module.out_channels = int(weight.shape[0])
            module.in_channels = int(weight.shape[1]) * module.groups
        elif isinstance(module, nn.BatchNorm2d):
            module.num_features = int(weight.shape[0])
        else:
            continue
        for key, tensor in list(module.named_parameters(recurse=False)) + \
                list(module.named_buffers(recurse=False)):
            saved = state.get(f"{prefix}{key}")
            if saved is not None and saved.shape != tensor.shape:
                replacement = torch.empty(saved.shape, dtype=tensor.dtype)
                if isinstance(tensor, nn.Parameter):
                    setattr(module, key, nn.Parameter(replacement))
                else:
                    module.register_buffer(key, replacement)
    return model


def load_pruned(config: DetectorConfig, state: dict[str, torch.Tensor]) -> ShapesYOLO:
    """The pruned network of ``state``; ValueError when its layers do not fit together (one
    forward pass on a blank image proves they do)."""
    model = shrink_to(ShapesYOLO(config), state)
    model.load_state_dict(state)  # type: ignore[arg-type]
    model.eval()
    width, height = config.input_size
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, height, width))
    except RuntimeError as e:
        raise ValueError(f"pruned layers do not fit together: {str(e).splitlines()[0]}") from e
    return model  # type: ignore[return-value]
