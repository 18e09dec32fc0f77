"""What a torch model file is, and loading one for TorchBackend: a module handed in (copied),
a TorchScript file, a ``torch.export`` program, or a vidpipe checkpoint (``model.pt``)."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import torch
from torch import nn

from models.errors import ModelError

TORCHSCRIPT_SUFFIXES = (".ts", ".torchscript", ".jit", ".pt")
EXPORT_SUFFIXES = (".pt2",)


def load_torch_model(source: nn.Module | str | Path, device: torch.device) -> nn.Module:
    """A copy of the module, or one loaded from a TorchScript or torch.export file, or from a
    vidpipe checkpoint (``model.pt`` as training writes it: weights and config). A module
    the caller holds is copied: moving it to the device and to FP16 happens in place, and a
    second backend (or the caller) built from the same module would run the FP16 weights (the
    first lent GPU's tests did: "Input type (float) and bias type (c10::Half)")."""
    if isinstance(source, nn.Module):
        return copy.deepcopy(source)
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"torch model {path}: no such file")
    try:
        if path.suffix in EXPORT_SUFFIXES:
            program = torch.export.load(str(path))
            if device.type != "cpu":  # constants and buffers baked into the program move too
                from torch.export.passes import move_to_device_pass

                program = move_to_device_pass(program, device)
            return program.module()
        if path.suffix in TORCHSCRIPT_SUFFIXES:
            if path.suffix == ".pt" and not _is_torchscript(path):
                from models.checkpoint import load_checkpoint

                return load_checkpoint(path)
            return torch.jit.load(str(path), map_location=device)
    except Exception as e:  # torch raises RuntimeError, pickle and zip errors for bad files
        raise ModelError(f"torch model {path}: cannot be loaded ({str(e).splitlines()[0]})") from e
    raise ModelError(f"torch model {path}: expected a TorchScript file "
                     f"({', '.join(TORCHSCRIPT_SUFFIXES)}), a torch.export program (.pt2) or a "
                     "vidpipe checkpoint (model.pt)")


def _is_torchscript(path: Path) -> bool:
    """TorchScript archives hold code (``<archive>/code/``); torch.save's do not."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name for name in archive.namelist())
    except zipfile.BadZipFile:
        return False
