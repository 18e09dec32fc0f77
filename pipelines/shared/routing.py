"""RoutingSink: a shared detector's one sink, handing each result to its stream's sinks.

A stream's sink that fails (a full disk under its results file) costs that sink of that
stream the call's results, logged once and each counted in ``vidpipe_sink_errors_total``:
never the other streams, nor the detector. Each written result settles its frame in the
FairChannel (``wiring.settle``, the sink stage's ``on_written``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pipelines.frame import Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.pictures import PictureKeeper
from pipelines.sinks.stage import Sink, write_each
from pipelines.sources.url import redact_text

log = logging.getLogger(__name__)


class RoutingSink:
    def __init__(self, metrics: PipelineMetrics) -> None:
        self._metrics = metrics
        self.routes: dict[str, list[Sink]] = {}
        self._failing: set[tuple[str, int]] = set()  # (stream, id(sink)) logged already
        self.wants_images = True  # a stream's sinks may draw (the service's snapshots do)
        self.keepers: dict[str, PictureKeeper] = {}  # which of its frames they draw on
        # sees every result after its stream's sinks (a candidate model: it never waits)
        self.observer: Callable[[Result], None] | None = None

    def write(self, result: Result) -> None:
        self.write_all([result])

    def write_all(self, results: Sequence[Result]) -> None:
        """Each stream's results of the call to its sinks, at once where a sink takes them
        so; a sink that fails loses that stream's results of the call, each counted."""
        by_stream: dict[str, list[Result]] = {}
        for result in results:
            by_stream.setdefault(result.frame.stream_id, []).append(result)
        for stream, own in by_stream.items():
            for sink in self.routes.get(stream, ()):
                try:
                    write_each(sink, own)
                except Exception as e:
                    self._failed(stream, sink, e, len(own))
        observer = self.observer
        if observer is not None:
            for result in results:
                observer(result)

    def _failed(self, stream: str, sink: Sink, error: Exception, results: int) -> None:
        kind = type(sink).__name__
        self._metrics.count_sink_error(stream, kind, results)
        if (stream, id(sink)) not in self._failing:
            self._failing.add((stream, id(sink)))
            log.error("stream %s: its %s failed, and loses the results it cannot take "
                      "(vidpipe_sink_errors_total): %s", stream, kind, redact_text(str(error)))

    def keeps_picture(self, frame: Frame) -> bool:
        """Whether ``frame`` keeps its picture past the model: where its stream's sinks
        draw on it, and on every frame while a candidate (``observer``) sees them."""
        keeper = self.keepers.get(frame.stream_id)
        return keeper is None or self.observer is not None or keeper.seen(frame)

    def forget(self, stream: str) -> None:
        self.routes.pop(stream, None)
        self.keepers.pop(stream, None)
        self._failing = {f for f in self._failing if f[0] != stream}

    def close(self, commit: bool = True) -> None:
        """The streams' sinks belong to whoever attached them."""

