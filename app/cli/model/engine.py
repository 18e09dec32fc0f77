"""``vidpipe model build-engine``: a TensorRT engine for a model, built once and cached."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.console import console, fail
from app.cli.model import resolve_checked
from models.errors import ModelError


def build_engine(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx (a QDQ one for int8).")],
    precision: Annotated[str, typer.Option(
        "--precision", help="fp16, int8 (from a QDQ model) or fp32.")] = "fp16",
    batch: Annotated[int, typer.Option("--batch", help="Largest batch the engine takes.")] = 8,
    cache: Annotated[Path | None, typer.Option(
        "--cache", help="Engine cache (default: $VIDPIPE_ENGINE_CACHE or "
        "~/.cache/vidpipe/engines).")] = None,
    beside: Annotated[bool, typer.Option(
        "--beside/--cache-only", help="Also copy the engine beside the ONNX it was built from "
        "(same name, .engine), where vidpipe run --device cuda finds it.")] = True,
    calib: Annotated[Path | None, typer.Option(
        "--calib", help="int8 from an FP32 model: video to calibrate the symmetric INT8 QDQ "
        "model that TensorRT takes (written beside it as model.int8.tensorrt.onnx).")] = None,
) -> None:
    """Build (or reuse from the cache) a TensorRT engine for MODEL. Needs a CUDA GPU and the
    tensorrt package; an engine whose model, GPU, TensorRT, batch or precision changed is
    rebuilt, never reused."""
    from models.backends.device import DeviceUnavailable
    from models.engine import PRECISIONS, ensure_engine, record_path

    if precision not in PRECISIONS:
        fail(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if batch < 1:
        fail(f"--batch must be >= 1, got {batch}")
    model_path, spec = resolve_checked(model_name)
    if precision == "int8":
        model_path = _tensorrt_qdq(model_path, spec, calib)
    try:
        with console.status(f"building the {precision} engine (batch <= {batch})"):
            result = ensure_engine(model_path, precision, batch, cache)
    except (DeviceUnavailable, ModelError) as e:
        fail(str(e))
    console.print(f"{'built' if result.built else 'reused'} {result.path} ({result.reason}); "
                  f"it runs in {result.precision}")
    if beside:
        target = model_path.with_name(model_path.name[:-len(".onnx")] + ".engine")
        shutil.copyfile(result.path, target)
        shutil.copyfile(record_path(result.path), record_path(target))
        console.print(f"wrote {target}")


def _tensorrt_qdq(model_path: Path, spec: Any, calib: Path | None) -> Path:
    """The symmetric INT8 QDQ model TensorRT builds from: MODEL itself when it is one, else
    quantized from the FP32 MODEL on --calib frames (``models.quantize``, target tensorrt)."""
    from app.recipes.optimize import CalibrationError, calibration_frames
    from models.quantize import qdq_activations, quantize_model

    kind = qdq_activations(model_path)
    if kind == "asymmetric":
        fail(f"{model_path.name} is quantized for ONNX Runtime on the CPU (UINT8 "
             f"activations); TensorRT takes symmetric INT8 only: give the FP32 model "
             f"and --calib VIDEO")
    if kind == "symmetric":
        return model_path
    if calib is None:
        fail("--precision int8 from an FP32 model needs --calib VIDEO (frames to calibrate "
              "the INT8 ranges on)")
    target = model_path.with_name(model_path.name[:-len(".onnx")] + ".int8.tensorrt.onnx")
    try:
        with console.status("calibrating symmetric INT8 for TensorRT"):
            quantize_model(model_path, target, calibration_frames(calib, spec.input),
                           "percentile", target="tensorrt")
    except (CalibrationError, ModelError) as e:
        fail(str(e))
    console.print(f"wrote {target}")
    return target
