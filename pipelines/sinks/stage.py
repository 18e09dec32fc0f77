"""SinkStage: hands each Result to every sink, then counts the frame as processed.

A frame is ``processed`` once every sink has it (``skipped_idle`` for one the model did not
see because nothing moved); its end-to-end latency runs from capture to that moment (for the
frames the model saw, or that the tracker filled in: the latency of detection). The sinks
belong to whoever built the pipeline: only they know whether the run
succeeded, and so whether to commit or discard what the sinks wrote.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol, Self, runtime_checkable

from models.spec import ModelSpec
from pipelines.channel import Channel
from pipelines.frame import Result
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

TAKE_AT_ONCE = 16  # most results written per call to the sink worker


class Sink(Protocol):
    """Where results go. ``close(commit=False)`` discards what was written (a failed run)."""

    wants_images: bool

    def write(self, result: Result) -> None: ...

    def close(self, commit: bool = True) -> None: ...


@runtime_checkable
class WritesAtOnce(Protocol):
    """A sink that takes a call's results in one go: the lines of a call in one write, its
    readers woken once for them (``write_all`` does what ``write`` on each would)."""

    def write_all(self, results: Sequence[Result]) -> None: ...


def write_each(sink: Sink, results: Sequence[Result]) -> None:
    """The results into ``sink``: at once where it takes them so, else one by one."""
    if isinstance(sink, WritesAtOnce):
        sink.write_all(results)
    else:
        for result in results:
            sink.write(result)


class ClosingSink:
    """A sink as a context manager: what it wrote is committed when the block ends normally,
    discarded when it ends with an error."""

    def close(self, commit: bool = True) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.close(commit=kind is None)


class SinkStage(Stage[Result, None]):
    """Whatever results are waiting (up to TAKE_AT_ONCE) in one call: on the event loop
    while the calls are light (``Stage.light``: a write is often cheaper than the hand-over
    to the thread), else on the worker. A sink's write never waits on the network: the
    outputs that send queue what they send."""

    def __init__(self, sinks: Sequence[Sink], spec: ModelSpec, input: Channel[Result],
                 metrics: PipelineMetrics, *,
                 on_written: Callable[[list[Result]], None] | None = None) -> None:
        """``on_written`` hears each call's results once they are written and counted, on
        the event loop, in order (a shared detector settles their frames)."""
        super().__init__("sink", metrics, input=input, output=None, take_at_once=TAKE_AT_ONCE,
                         light_here=True)
        self.sinks = list(sinks)
        self.spec = spec
        self.on_written = on_written
        self.emitted: Counter[str] = Counter()

    def process(self, items: list[Result]) -> None:
        for sink in self.sinks:
            write_each(sink, items)

    def outputs(self, items: list[Result], result: None, seconds: float) -> list[None]:
        self._account(items)
        if self.on_written is not None:
            self.on_written(items)
        return []

    def _account(self, results: list[Result]) -> None:
        """The call's frames in the books: each stream's outcomes and boxes counted once
        for the call, each detected frame's latency observed."""
        now = time.monotonic()
        outcomes: Counter[tuple[str, str]] = Counter()
        boxes: Counter[tuple[str, int]] = Counter()
        latencies: dict[str, list[float]] = {}
        for result in results:
            frame = result.frame
            stream = frame.stream_id
            if frame.skipped:
                outcomes[stream, f"skipped_{frame.skipped}"] += 1
            else:
                latencies.setdefault(stream, []).append(now - frame.captured_at)
                outcomes[stream, "processed"] += 1
            if len(result.detections):
                for class_id in result.detections.class_id.tolist():
                    boxes[stream, class_id] += 1
        for stream, seconds in latencies.items():
            self.metrics.observe_latencies(stream, seconds)
        for (stream, outcome), count in outcomes.items():
            self.metrics.frame_outcome(stream, outcome, count)
            self.emitted[stream] += count
        for (stream, class_id), count in boxes.items():
            self.metrics.count_detections(stream, self.spec.label(class_id), count)
