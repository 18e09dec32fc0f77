"""Which runtime runs a model on the CPU: ONNX Runtime, or OpenVINO when it is measured faster
and gives the same detections.

``--runtime onnxruntime``, ``openvino`` or ``openvino-bf16`` (OpenVINO in bfloat16: faster
on AMX, not the model's own arithmetic, so never chosen for the user) is taken as asked.
``auto`` (the default) decides per run, after the thread plan (``pipelines.threads``) and at
its threads:

- OpenVINO must be installed (``vidpipe[openvino]``) and load the model, else ONNX Runtime.
- Agreement: both run the model on the same probe frames (the first file's frames, spread
  over its first second, and the demo's photographs, shipped with scikit-image: natural
  pictures whatever the sources are), prepared with the reference preprocessing; OpenVINO is
  admitted only if every frame's detections agree with ONNX Runtime's
  (``pipelines.postprocess.agreement``). ONNX Runtime is the reference: it is how ``vidpipe
  model check`` runs the model directly.
- Speed: each is timed on the plan's threads and calls at once, in interleaved rounds (a
  busy moment hits both); OpenVINO is taken only when its median is at least ``FASTER_BY``
  below ONNX Runtime's, since a few calls cannot tell smaller differences from noise.

The choice, both timings and the agreement are logged and kept (``RuntimeDecision``) for the
run's ``summary.json``.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from models.backends.base import Backend
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.backends.openvino import OpenVinoBackend, openvino_version
from models.errors import ModelError
from models.spec import ModelSpec
from pipelines.frame import Detections
from pipelines.postprocess.agreement import Agreement
from pipelines.postprocess.yolo import decode_outputs
from pipelines.preprocess.reference import reference_input, reference_picture
from pipelines.sources.media import METADATA_ERRORS
from pipelines.synthetic.photos import PHOTOS, load_photo
from pipelines.threads import ThreadPlan, planned_session, time_infer

log = logging.getLogger(__name__)

FASTER_BY = 0.05  # OpenVINO's median must be this much below ONNX Runtime's to be taken
ROUNDS = 3  # interleaved timing rounds, CALLS calls each
CALLS = 3
FILE_FRAMES = 6  # probe frames from the first file: every FRAME_STEP-th
FRAME_STEP = 5


@dataclass(frozen=True, slots=True)
class RuntimeTrial:
    """One runtime's showing: ms per frame at the plan's threads, and on the probe frames how
    many agreed with the reference (None for the reference itself)."""

    runtime: str
    ms_per_frame: float
    frames: int | None = None
    agreeing: int | None = None


@dataclass(frozen=True, slots=True)
class RuntimeDecision:
    """The CPU runtime a run took, and why."""

    runtime: str
    reason: str
    trials: tuple[RuntimeTrial, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "reason": self.reason,
                "trials": [asdict(t) for t in self.trials]}


def open_cpu_runtime(model_path: Path, spec: ModelSpec, sources: Sequence[Any], runtime: str,
                     infer_threads: int | None, decode_threads: int | None, *,
                     scaled: bool = True) -> tuple[Backend, ThreadPlan, RuntimeDecision]:
    """The model opened on the CPU runtime ``runtime`` asks for (``auto``: see the module doc),
    with the thread plan and the choice."""
    session, plan = planned_session(model_path, spec, sources, infer_threads, decode_threads,
                                    scaled=scaled)
    if runtime == "onnxruntime":
        return session, plan, RuntimeDecision("onnxruntime", "asked for")
    if runtime in ("openvino", "openvino-bf16"):
        session.close()
        reason = f"asked for, OpenVINO {openvino_version()} in " \
                 f"{'bf16' if runtime == 'openvino-bf16' else 'f32'}"
        if runtime == "openvino-bf16":
            reason += (": bfloat16 arithmetic, so the outputs are not the model's own (measure "
                       "the cost: vidpipe model check --runtime openvino-bf16)")
        (log.warning if runtime == "openvino-bf16" else log.info)("runtime: %s", reason)
        decision = RuntimeDecision(runtime, reason)
        return open_runtime(model_path, decision, plan), plan, decision
    try:
        choice, candidate = _trial(model_path, spec, sources, plan, session)
    except BaseException:
        session.close()
        raise
    log.info("runtime: %s (%s)", choice.runtime, choice.reason)
    if choice.runtime == "openvino" and candidate is not None:
        session.close()
        return candidate, plan, choice
    if candidate is not None:
        candidate.close()
    return session, plan, choice


def open_runtime(model_path: Path, decision: RuntimeDecision, plan: ThreadPlan) -> Backend:
    """The model opened on the runtime ``decision`` names, at the plan's threads and calls at
    once."""
    if decision.runtime == "onnxruntime":
        return OnnxRuntimeBackend(model_path, threads=plan.infer)
    return OpenVinoBackend(model_path, threads=plan.infer, streams=plan.infer_workers,
                           precision="bf16" if decision.runtime == "openvino-bf16" else "f32")


def _trial(model_path: Path, spec: ModelSpec, sources: Sequence[Any], plan: ThreadPlan,
           reference: OnnxRuntimeBackend) -> tuple[RuntimeDecision, OpenVinoBackend | None]:
    """OpenVINO against ONNX Runtime (``reference``, open at the plan's threads)."""
    version = openvino_version()
    if version is None:
        return RuntimeDecision("onnxruntime", "OpenVINO is not installed (vidpipe[openvino])"), None
    try:
        candidate = OpenVinoBackend(model_path, threads=plan.infer, streams=plan.infer_workers)
    except ModelError as e:
        return RuntimeDecision("onnxruntime", f"OpenVINO {version} cannot load it: {e}"), None
    try:
        agreement = Agreement()
        for tensor, letterbox in probe_inputs(spec, sources):
            agreement.add(_detect(reference, spec, tensor, letterbox),
                          _detect(candidate, spec, tensor, letterbox))
        ort_ms, ov_ms = _interleaved_ms((reference, candidate), spec, plan)
    except Exception as e:  # OpenVINO's own errors on a feed ONNX Runtime takes
        candidate.close()
        return RuntimeDecision("onnxruntime", f"OpenVINO {version} failed on the probe: "
                             f"{str(e).strip().splitlines()[0][:160]}"), None
    trials = (RuntimeTrial("onnxruntime", round(ort_ms, 2)),
              RuntimeTrial("openvino", round(ov_ms, 2), agreement.frames, agreement.agreed))
    at = (f"{ov_ms:.1f} vs {ort_ms:.1f} ms/frame at {plan.infer} thread"
          f"{'s' if plan.infer > 1 else ''} x {plan.infer_workers}")
    if agreement.agreed < agreement.frames:
        reason = (f"OpenVINO {version} disagrees with ONNX Runtime on "
                  f"{agreement.frames - agreement.agreed} of {agreement.frames} probe frames "
                  f"({at})")
        return RuntimeDecision("onnxruntime", reason, trials), candidate
    if ov_ms > ort_ms * (1 - FASTER_BY):
        reason = (f"OpenVINO {version} agrees on {agreement.frames} probe frames but is not "
                  f"{FASTER_BY:.0%} faster ({at})")
        return RuntimeDecision("onnxruntime", reason, trials), candidate
    reason = (f"OpenVINO {version} agrees with ONNX Runtime on {agreement.frames} probe frames "
              f"and is faster ({at})")
    return RuntimeDecision("openvino", reason, trials), candidate


def probe_inputs(spec: ModelSpec, sources: Sequence[Any]) -> Iterator[tuple[np.ndarray, Any]]:
    """The probe frames as model inputs with their letterboxes (reference preprocessing)."""
    for picture in _file_pictures(sources):
        yield reference_input(picture, spec.input)
    for name in PHOTOS:
        yield reference_input(load_photo(name), spec.input)


def _file_pictures(sources: Sequence[Any]) -> Iterator[np.ndarray]:
    """Every ``FRAME_STEP``-th of the first file source's first frames, full size, RGB."""
    path = next((s.path for s in sources if not s.live and getattr(s, "path", None)), None)
    if path is None:
        return
    try:
        with av.open(str(path), metadata_errors=METADATA_ERRORS) as container:
            taken = 0
            for index, frame in enumerate(container.decode(container.streams.video[0])):
                if index % FRAME_STEP == 0:
                    yield reference_picture(frame)
                    taken += 1
                    if taken >= FILE_FRAMES:
                        return
    except (av.FFmpegError, IndexError, OSError) as e:  # the pipeline will say what is wrong
        log.debug("runtime probe: cannot read %s (%s)", path, e)


def _detect(backend: Backend, spec: ModelSpec, tensor: np.ndarray, letterbox: Any) -> Detections:
    name = spec.input.name or backend.inputs[0].name
    outputs = backend.infer({name: tensor[None]})
    return decode_outputs(outputs, [letterbox], spec.output,
                          (spec.input.width, spec.input.height), spec.num_classes)[0]


def _interleaved_ms(backends: Sequence[Backend], spec: ModelSpec,
                    plan: ThreadPlan) -> list[float]:
    """Each backend's median ms per frame over ``ROUNDS`` rounds, taken in turn."""
    rounds: list[list[float]] = [[] for _ in backends]
    for _ in range(ROUNDS):
        for times, backend in zip(rounds, backends, strict=True):
            times.append(time_infer(Path(), spec.input.image_shape, spec.input.dtype, CALLS,
                                    workers=plan.infer_workers, backend=backend).wall_ms)
    return [statistics.median(times) for times in rounds]
