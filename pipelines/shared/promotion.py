"""A shared detector's model replaced while it runs (a candidate promoted): the inference
stage takes the new runtime between two calls, so the frames already taken finish on the
current model, none waits or is dropped for it, and each frame says which model saw it
(``Frame.model``); a restart loads the new one.

The new runtime is loaded ahead (``prepare``, when the candidate starts), not at the swap:
loading a model takes the cores for a moment, which a busy machine's cameras would wait
out; the swap itself loads nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

from models.spec import ModelSpec
from pipelines.backends import StageBackends, open_backends
from pipelines.errors import ConfigError
from pipelines.infer.stage import InferStage
from pipelines.shared.detector import SharedDetector

log = logging.getLogger(__name__)


def check_promotable(detector: SharedDetector, model_path: Path, spec: ModelSpec) -> None:
    """ConfigError unless ``spec`` is the detector's card but for its file: only the model
    file is swapped (another input, output or classes would change how its streams' frames
    are prepared and labelled)."""
    if (spec.input, spec.output, spec.classes) != \
            (detector.spec.input, detector.spec.output, detector.spec.classes):
        raise ConfigError(f"{model_path.name}: its card's input, output or classes differ "
                          f"from {detector.spec.name}'s; a promotion swaps the model file "
                          "only (give the streams the new model instead)")


def prepare(detector: SharedDetector, model_path: Path, spec: ModelSpec) -> StageBackends:
    """``model_path`` loaded as the detector's runtime would be, ready to be swapped in
    (blocking: call it in a thread); ConfigError where it cannot take the detector's place."""
    check_promotable(detector, model_path, spec)
    # the detector's batches, whatever the new model's own latency cap would be: the stage
    # takes them as it did
    options = detector.options.model_copy(update={"latency_budget_ms": None})
    backends = open_backends(model_path, spec, [], detector.metrics, options, scale=None)
    assert backends.plan.batch_size is not None
    if backends.plan.batch_size < detector.batch_size:
        backends.close()
        raise ConfigError(f"{model_path.name} takes batches of {backends.plan.batch_size} at "
                          f"most, the detector's are {detector.batch_size}")
    backends.postprocessor.close()  # the stage's own decodes its boxes: the same card
    return backends


def promote(detector: SharedDetector, backends: StageBackends, model_path: Path,
            spec: ModelSpec) -> None:
    """Infer with the prepared ``backends`` from the next call on; a restart loads
    ``model_path``."""
    options, metrics = detector.options, detector.metrics

    def reopen() -> StageBackends:
        return open_backends(model_path, spec, [], metrics, options, scale=None)

    infer = next(s for s in detector.pipeline.stages if isinstance(s, InferStage))
    infer.swap(backends.runtime, model_path.name)
    detector.model_path, detector.reopen = model_path, reopen
    metrics.count_model_load(spec.name, options.device)
    log.info("detector %s: %s promoted; the frames taken from now on are inferred with it",
             detector.name, model_path.name)
