"""AnalyticsStage: between postprocess and the sinks, each stream's tracker, lines and zones.

One thread, one call at a time, so every stream's results are tracked in frame order; a
stream without analytics passes through untouched. ``streams`` may change while it runs (the
service attaches and detaches streams, and replaces their lines and zones): it is read once
per result, on the event loop's side of the hand-over. Its time per call is the ``analytics``
stage's in the metrics: the tracker's cost.
"""

from __future__ import annotations

from pipelines.analytics.stream import StreamAnalytics
from pipelines.channel import Channel
from pipelines.frame import Frame, Result, copied_to_host, on_device
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

TAKE_AT_ONCE = 16


class AnalyticsStage(Stage[Result, Result]):
    def __init__(self, streams: dict[str, StreamAnalytics], input: Channel[Result],
                 output: Channel[Result], metrics: PipelineMetrics, *,
                 keep_images: bool = False) -> None:
        super().__init__("analytics", metrics, input=input, output=output,
                         take_at_once=TAKE_AT_ONCE)
        self.streams = streams
        self.keep_images = keep_images

    def inline(self, items: list[Result]) -> bool:
        """Skipped frames only, none with riders whose pictures a sink wants: no tracker
        call, their lines and zones only counted."""
        return all(r.frame.skipped and not (self.keep_images and r.frame.riders) for r in items)

    def process(self, items: list[Result]) -> list[Result]:
        out: list[Result] = []
        for result in items:
            analytics = self.streams.get(result.frame.stream_id)
            if analytics is None:
                out.append(result)
                continue
            if self.keep_images:
                for rider in result.frame.riders:
                    _on_host(rider)
            out.extend(analytics.process(result))
        return out

    def outputs(self, items: list[Result], result: list[Result],
                seconds: float) -> list[Result]:
        return result


def _on_host(frame: Frame) -> None:
    """A rider's picture made, and on the host, for the sinks that draw on it (its carrier's
    went through postprocessing, which moves it; a GPU decoder's rider is moved here, once its
    decoder's event says it is written: unverified on a GPU)."""
    frame.materialize()
    if on_device(frame.image):
        if frame.ready is not None:
            frame.ready.synchronize()
        frame.image, frame.ready = copied_to_host(frame.image), None
