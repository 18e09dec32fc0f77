"""What every device's backends share: the stages' parts of one pipeline
(``StageBackends``), the CPU's choices, and when a CPU decoder converts lazily."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.backends.base import TensorInfo
from pipelines.decode.stage import PictureDecoder
from pipelines.infer.runtime import Runtime
from pipelines.options import PipelineOptions
from pipelines.plan import RunPlan
from pipelines.postprocess.stage import Postprocessor
from pipelines.preprocess.preprocessor import Preprocessor

log = logging.getLogger(__name__)

MAX_BATCH = 64  # PipelineSettings.batch_size's bound
CPU_CHOICES = {"decode": ("pyav",), "preprocess": ("opencv",),
               "runtime": ("onnxruntime", "openvino", "openvino-bf16")}


@dataclass(slots=True)
class StageBackends:
    """What the stages of one pipeline run on: a decoder per source connection, a
    preprocessor per stream, the one runtime and postprocessor; ``input`` is the graph input
    fed and ``plan`` what they were opened with (threads, runtime, batch size)."""

    decoder_for: Callable[[Any], PictureDecoder]
    preprocessor_for: Callable[[], Preprocessor]
    runtime: Runtime
    postprocessor: Postprocessor
    input: TensorInfo
    plan: RunPlan

    def close(self) -> None:
        """Close what was opened, for a build that fails before the stages own it."""
        self.runtime.close()
        self.postprocessor.close()


def converted_lazily(source: Any, options: PipelineOptions) -> bool:
    """Whether a CPU decoder leaves its pictures' RGB conversion until a stage asks for it:
    for a live stream (most of a busy camera's frames are replaced before the detector
    takes them), and with ``--detect-every`` N > 1 or ``--detect-fps`` (the frames between
    never reach the model, and a sink that draws asks for them itself)."""
    analytics = options.analytics
    return bool(source.live) or (analytics is not None and analytics.active
                                 and analytics.thins)


def with_batch_size(backends: StageBackends, options: PipelineOptions,
                    model_path: Path) -> StageBackends:
    """``backends`` with the plan's batch size: ``options.batch_size``, or less where the
    graph or the runtime takes fewer frames at once, or where a full batch would pass the
    latency budget (``latency_cap``); said in the log."""
    wanted = options.batch_size
    limits = [n for n in (backends.input.fixed_batch, backends.runtime.max_batch)
              if n is not None]
    fitted = min([wanted, *limits])
    if fitted < wanted:
        log.warning("%s takes batches of %d at most; batch size lowered from %d",
                    model_path.name, fitted, wanted)
    call_ms, budget = backends.plan.call_ms, options.latency_budget_ms
    if call_ms is not None and budget is not None:
        cap = latency_cap(call_ms, budget, options.batch_timeout_ms)
        if cap < fitted:
            log.info("batches of %d at most, not %d: a frame's call takes %.1f ms here, and a "
                     "frame that waits for its batch (%g ms at most) or behind a full call, "
                     "then behind a queued one and in its own, must stay within the %g ms "
                     "latency budget (latency_budget_ms)", cap, fitted, call_ms,
                     options.batch_timeout_ms, budget)
            fitted = cap
    backends.plan = dataclasses.replace(backends.plan, batch_size=fitted)
    return backends


def latency_cap(call_ms: float, budget_ms: float, batch_timeout_ms: float) -> int:
    """The most frames a call may take so that a frame's time in inference stays within
    ``budget_ms``: it waits for its batch to fill or behind the full call in flight,
    whichever is longer, then behind a full call queued before its own (a file pipeline and
    LoadGen's engine queue one), then its own call; a call's time taken as ``call_ms`` per
    frame. At least 1."""
    fits = [b for b in range(1, MAX_BATCH + 1)
            if max(batch_timeout_ms, b * call_ms) + 2 * b * call_ms <= budget_ms]
    return max(fits, default=1)
