"""The CPU's backends: FFmpeg (PyAV), OpenCV, ONNX Runtime or OpenVINO, numpy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from models.backends.base import Backend
from models.spec import ModelSpec
from models.zoo import check_compatible
from pipelines.backends.common import StageBackends, converted_lazily
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.decode.stage import PictureDecoder
from pipelines.gpu_metrics import BackendReport
from pipelines.infer.runtime import HostRuntime
from pipelines.options import PipelineOptions
from pipelines.plan import RunPlan, open_planned
from pipelines.postprocess.stage import HostPostprocessor
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.threads import ThreadPlan

log = logging.getLogger(__name__)


def host_backends(decoder_for: Callable[[Any], PictureDecoder], backend: Backend,
                  spec: ModelSpec, *, infer_workers: int = 1) -> StageBackends:
    """The CPU backends around an already opened host backend (tests pass fakes here)."""
    info = next((i for i in backend.inputs if spec.input.name in (None, i.name)),
                backend.inputs[0])
    return StageBackends(decoder_for, lambda: OpenCVPreprocessor(spec.input),
                         HostRuntime(backend, info.name), HostPostprocessor(spec), info,
                         RunPlan(ThreadPlan(1, 1, "given", infer_workers)))


def cpu_backends(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                 options: PipelineOptions, report: BackendReport, scale: ScaleTo | None,
                 fallback: str) -> StageBackends:
    """The CPU backends, the model opened on the runtime ``options.runtime`` asks for (or
    measured, ``auto``) and checked against its card; ``fallback``: why a GPU was not used."""
    backend, plan = open_planned(model_path, spec, sources, options, scaled=scale is not None)
    assert plan.runtime is not None
    runtime = plan.runtime.runtime
    if scale is not None:
        log.info("decoding straight to the model's letterbox size (input %dx%d): no sink "
                 "needs the full pictures", *scale.input_size)
    try:
        info = check_compatible(spec, backend.inputs, backend.outputs, model_path)
    except BaseException:
        backend.close()
        raise
    for stage, name in (("decode", "pyav"), ("preprocess", "opencv"),
                        ("infer", runtime), ("postprocess", "numpy")):
        report.record(stage, name, "cpu", fallback)
    return StageBackends(lambda s: PyAVDecoder(s.video, threads=plan.threads.decode, scale=scale,
                                               lazy=converted_lazily(s, options)),
                         lambda: OpenCVPreprocessor(spec.input),
                         HostRuntime(backend, info.name, name=runtime),
                         HostPostprocessor(spec), info, plan)
