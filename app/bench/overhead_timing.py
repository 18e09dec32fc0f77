"""Timers the overhead bench puts around two parts of the engine that run inside other
threads' time: the metrics' recording calls (``TimedMetrics``) and the motion gate's choice
(``time_gates``). The metrics' calls, most of them on the event loop, are timed by the wall
clock: a thread's CPU clock costs 9x as much to read (0.52 against 0.06 µs here), which the
bench's own figures would carry, and a call that waits for the interpreter (on a decoder
thread) counts its wait too. The gate runs on every decoder thread at once, where such waits
would be most of its wall time: it is timed by its thread's CPU clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from pipelines.decode.stage import DecodeStage
from pipelines.metrics import PipelineMetrics
from pipelines.pipeline import Pipeline

F = TypeVar("F", bound=Callable[..., Any])
RECORDING = ("observe_stage", "observe_waits", "frame_received", "frame_outcome",
             "observe_latencies", "observe_batch", "count_detections", "count_gap",
             "count_line_crossing", "count_zone_event", "set_zone_occupancy")


class Stopwatch:
    """Seconds spent in the calls it wraps, by ``clock`` (a race between two threads may
    lose an increment: the figure is a bench's, not the books')."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds = 0.0
        self._clock = clock

    def wrap(self, fn: F) -> F:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self._clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += self._clock() - start
        return timed  # type: ignore[return-value]


class TimedMetrics(PipelineMetrics):
    """PipelineMetrics whose recording calls are timed (``seconds``)."""

    def __init__(self) -> None:
        super().__init__()
        self._watch = Stopwatch()
        for name in RECORDING:
            setattr(self, name, self._watch.wrap(getattr(self, name)))

    @property
    def seconds(self) -> float:
        return self._watch.seconds


def time_gates(pipeline: Pipeline) -> Stopwatch:
    """Time every decode stage's motion measurement and frame selection (the picker and
    the motion gate), both on its decoder thread."""
    watch = Stopwatch(time.thread_time)
    for stage in pipeline.stages:
        if isinstance(stage, DecodeStage):
            stage.selection.select = watch.wrap(stage.selection.select)  # type: ignore[method-assign]
            if stage.meter is not None:
                stage.meter.measure = watch.wrap(stage.meter.measure)  # type: ignore[method-assign]
    return watch
