"""AnalyticsStage: between postprocess and the sinks, each stream's tracker, classifiers,
lines and zones.

One call at a time (on its thread, or a light one on the event loop), so every stream's
results are tracked in frame order; a stream without analytics passes through untouched.
``streams`` may change while it runs (the service attaches and detaches streams, and replaces
their lines and zones): it is read once per result. Its time per call is the ``analytics``
stage's in the metrics (the tracker's cost, and the classifiers', which are also the
``classify`` stage's).
"""

from __future__ import annotations

from pipelines.analytics.stream import StreamAnalytics, Tracked
from pipelines.channel import Channel
from pipelines.classify.model import Classifiers
from pipelines.classify.step import Job, Tap, classify
from pipelines.frame import Frame, Picture, Result, copied_to_host, on_device
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

TAKE_AT_ONCE = 16


class AnalyticsStage(Stage[Result, Result]):
    def __init__(self, streams: dict[str, StreamAnalytics], input: Channel[Result],
                 output: Channel[Result], metrics: PipelineMetrics, *,
                 keep_images: bool = False, classifiers: Classifiers | None = None,
                 tap: Tap | None = None) -> None:
        super().__init__("analytics", metrics, input=input, output=output,
                         take_at_once=TAKE_AT_ONCE, light_here=classifiers is None)
        self.streams = streams
        self.keep_images = keep_images
        self.classifiers = classifiers  # owned: closed with the stage
        self.tap = tap  # sees each classifier call (``vidpipe model check``)

    def close(self) -> None:
        super().close()
        if self.classifiers is not None:
            self.classifiers.close()

    def inline(self, items: list[Result]) -> bool:
        """Skipped frames only, none with riders whose pictures a sink wants: no tracker
        call, their lines and zones only counted."""
        return all(r.frame.skipped and not (self.keep_images and r.frame.riders) for r in items)

    def light(self, items: list[Result]) -> bool:
        """Light calls run on the event loop (``Stage.light``), but never with a classifier
        (a model's call) or a rider's picture to move off a GPU (a wait for the device)."""
        return super().light(items) and not (self.keep_images and any(
            on_device(r.image) for result in items for r in result.frame.riders))

    def process(self, items: list[Result]) -> list[Result]:
        """Tracked, then classified (every stream's crops of the call in one batch per
        classifier), then counted; each stream's results in frame order."""
        tracked: list[tuple[StreamAnalytics, Tracked] | Result] = []
        jobs: list[Job] = []
        for result in items:
            analytics = self.streams.get(result.frame.stream_id)
            if analytics is None:
                tracked.append(result)
                continue
            if self.keep_images:
                for rider in result.frame.riders:
                    _on_host(rider)
            step = analytics.track(result)
            tracked.append((analytics, step))
            frame = step.result.frame
            if analytics.attributes is not None and frame.image is not None \
                    and len(step.result.detections):
                jobs.append(Job(frame.stream_id, frame.index, analytics.attributes,
                                _full(frame), step.result.detections, analytics.now(frame)))
        if jobs:
            seconds = classify(jobs, self.metrics.count_classification, self.tap)
            if seconds:
                self.metrics.observe_stage("classify", seconds)
        out: list[Result] = []
        for item in tracked:
            if isinstance(item, Result):
                out.append(item)
            else:
                out.extend(item[0].count(item[1]))
        return out

    def outputs(self, items: list[Result], result: list[Result],
                seconds: float) -> list[Result]:
        return result


def _full(frame: Frame) -> Picture:
    """The frame's full picture on the host (the classifiers' boxes are in its pixels)."""
    if frame.scaled:
        raise ValueError(f"stream {frame.stream_id}: classifiers need the full picture, the "
                         f"decoder shrank it")
    _on_host(frame)
    assert frame.image is not None
    return frame.image


def _on_host(frame: Frame) -> None:
    """A rider's picture made, and on the host, for the sinks that draw on it (its carrier's
    went through postprocessing, which moves it; a GPU decoder's rider is moved here, once its
    decoder's event says it is written: unverified on a GPU)."""
    frame.materialize()
    if on_device(frame.image):
        if frame.ready is not None:
            frame.ready.synchronize()
        frame.image, frame.ready = copied_to_host(frame.image), None
