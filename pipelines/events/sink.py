"""EventSink: a tracked stream's results -> events in the schema, handed to the event outputs
(a file, MQTT, webhooks), with each object's snapshot and clip written by a MediaWriter.

On the sink stage, in frame order per stream: each result's object events (``new``,
``update``) and analytics events (``line_cross``, ``zone_enter``, ...) are stamped and
published at once (an output that raises loses that event, counted ``dropped``, and never
the pipeline or the other outputs); an object's ``end`` goes to the MediaWriter, which
writes its snapshot and waits for its clip's last packets (``post_s`` after the object was
last seen) before publishing it, so the URIs an ``end`` carries always resolve. The one
media thread serves every stream in turn: a stream whose packets stop coming holds the
``end`` events queued behind its own for up to ``post_s`` + 10 s. An output never blocks the
pipeline: each takes an event into its own bounded queue and counts what it could not send.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from models.spec import ModelSpec
from pipelines.analytics.stream import class_ids
from pipelines.events.config import ClipSettings, EventSettings
from pipelines.events.lifecycle import BestPicture, ObjectEvent, ObjectLifecycle
from pipelines.events.media import MediaStore, write_clip, write_snapshots
from pipelines.events.ring import PacketRing
from pipelines.events.schema import EventStamper
from pipelines.frame import Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.stage import ClosingSink
from pipelines.walltime import iso_utc

log = logging.getLogger(__name__)

# how long, beyond its post-roll, an object's end waits for its clip's last packets
CLIP_GRACE_S = 10.0
# the media folder is pruned at most this often (it stats every file kept)
PRUNE_EVERY_S = 10.0


class EventOutput(Protocol):
    """Where events go. ``publish`` never blocks the caller (it may be called from the sink
    stage and the media thread at once); ``publish_state`` is a stream's counts after its
    latest events (MQTT keeps it retained)."""

    name: str

    def publish(self, event: dict[str, Any]) -> None: ...

    def publish_state(self, stream: str, state: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class MediaJob:
    event: dict[str, Any]
    stream: str
    spec: ModelSpec  # the labels a snapshot's box is drawn with
    best: BestPicture | None
    class_id: int
    clip: tuple[float, float] | None  # (start, end) pts seconds
    ring: PacketRing | None
    publish: Callable[[dict[str, Any]], None]


@dataclass
class MediaWriter:
    """One thread that writes the objects' media and then publishes their ``end``."""

    store: MediaStore
    clips: ClipSettings | None
    uri: Callable[[str, str, str], str]  # (kind, event id, stream) -> what the event says

    def __post_init__(self) -> None:
        self._jobs: queue.Queue[MediaJob | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="event-media", daemon=True)
        self._thread.start()
        self._closed = False
        self._pruned_at = float("-inf")

    def submit(self, job: MediaJob) -> None:
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._write(job)
            except Exception as e:  # the event still goes, without what failed
                log.error("stream %s: media of event %s not written: %s", job.stream,
                          job.event["id"], e)
            job.publish(job.event)  # EventSink._publish: each output's failure is its own

    def _write(self, job: MediaJob) -> None:
        event, folder = job.event, self.store.folder(job.stream)
        if job.best is not None:
            write_snapshots(folder, event["id"], job.best, job.class_id, job.spec)
            event["snapshot"] = self.uri("snapshot", event["id"], job.stream)
            event["snapshot_clean"] = self.uri("clean", event["id"], job.stream)
        if job.clip is not None and job.ring is not None and self.clips is not None:
            start, end = job.clip
            job.ring.wait_until(end, self.clips.post_s + CLIP_GRACE_S)
            cut = job.ring.cut(start, end)
            if cut is not None:
                event["clip_s"] = round(write_clip(folder / f"{event['id']}.mp4", cut), 3)
                event["clip_start_pts"] = round(cut.start, 6)
                event["clip_start_time"] = iso_utc(cut.started_at)
                event["clip"] = self.uri("clip", event["id"], job.stream)
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = time.monotonic()
            self.store.prune()

    def close(self) -> None:
        """Write what was submitted, then stop."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join()
        self.store.prune()


class StreamEvents:
    """One stream's lifecycle and stamper."""

    def __init__(self, stream: str, settings: EventSettings, spec: ModelSpec, fps: float,
                 end_s: float) -> None:
        ids = class_ids(settings.objects.classes, spec, "events: objects")
        self.lifecycle = ObjectLifecycle(settings.objects, ids, fps, end_s)
        self.stamper = EventStamper(stream, secrets.token_hex(8), spec)
        self.last_frame: Frame | None = None


class EventSink(ClosingSink):
    """``fps_of(stream)``: its frame rate; ``end_s_of(stream)``: how long its tracker keeps a
    lost track; ``rings``: the streams' packet rings (for clips); ``media``: None writes no
    snapshots or clips."""

    def __init__(self, spec: ModelSpec, settings: EventSettings, outputs: list[EventOutput],
                 *, fps_of: Callable[[str], float], end_s_of: Callable[[str], float],
                 rings: dict[str, PacketRing] | None = None,
                 media: MediaWriter | None = None,
                 metrics: PipelineMetrics | None = None) -> None:
        self.spec, self.settings, self.outputs = spec, settings, outputs
        self._fps_of, self._end_s_of = fps_of, end_s_of
        self.rings = rings if rings is not None else {}
        self.media = media
        self.wants_images = media is not None and settings.snapshots
        self.pictures_of_unseen = False  # an object's snapshot is of a frame the model saw
        self.streams: dict[str, StreamEvents] = {}
        self.metrics = metrics
        self._failing: set[int] = set()  # outputs whose failure was logged

    def write(self, result: Result) -> None:
        if result.analytics is None:
            return  # a stream without a tracker has no objects
        sid = result.frame.stream_id
        stream = self.streams.get(sid)
        if stream is None:
            stream = self.streams[sid] = StreamEvents(sid, self.settings, self.spec,
                                                      self._fps_of(sid), self._end_s_of(sid))
        stream.last_frame = result.frame  # what the stream's last ends are said on
        ends = []
        for change in stream.lifecycle.update(result):
            if change.kind == "end":
                ends.append(change)
            else:
                self._publish(stream.stamper.object_event(change))
        if result.events:
            boxes = boxes_by_track(result)
            for event in result.events:
                self._publish(stream.stamper.analytics_event(event, result.frame, boxes,
                                                             result.attributes))
            self._publish_state(sid, result.analytics)
        for change in ends:
            self._end(stream, sid, change)

    def _end(self, stream: StreamEvents, sid: str, event: ObjectEvent) -> None:
        record = stream.stamper.object_event(event)
        if self.media is None:
            self._publish(record)
            return
        obj = event.obj
        clip = None
        clips = self.settings.clips
        if clips is not None:  # the stream's timeline is the packet ring's clock
            clip = (obj.first_at - clips.pre_s, obj.seen_at + clips.post_s)
        best = obj.best if self.settings.snapshots else None
        obj.best = None
        self.media.submit(MediaJob(record, sid, self.spec, best, obj.class_id, clip,
                                   self.rings.get(sid), self._publish))

    def _publish(self, event: dict[str, Any]) -> None:
        for output in self.outputs:
            try:
                output.publish(event)
            except Exception as e:  # one output failing (a full disk) is not the others'
                self._failed(output, e, event)

    def _publish_state(self, stream: str, state: dict[str, Any]) -> None:
        for output in self.outputs:
            try:
                output.publish_state(stream, state)
            except Exception as e:
                self._failed(output, e, None)

    def _failed(self, output: EventOutput, error: Exception,
                event: dict[str, Any] | None) -> None:
        """An output that raised: counted as its event dropped, logged once per output."""
        if event is not None and self.metrics is not None:
            self.metrics.count_event(output.name, "dropped")
        if id(output) not in self._failing:
            self._failing.add(id(output))
            log.error("events: the %s output failed, and loses what it cannot take: %s",
                      output.name, error)

    def finish(self, stream: str) -> None:
        """``stream`` ended: its live objects end."""
        events = self.streams.pop(stream, None)
        if events is None:
            return
        for event in events.lifecycle.finish(events.last_frame):
            self._end(events, stream, event)

    def close(self, commit: bool = True) -> None:
        """Every stream's objects end; their media are written (the outputs are their
        owner's to close)."""
        for sid in list(self.streams):
            self.finish(sid)


def boxes_by_track(result: Result) -> dict[int, tuple[np.ndarray, float]]:
    """Each confirmed track's box and score on the result's frame."""
    d = result.detections
    return {int(t): (d.xyxy[i], float(d.score[i]))
            for i, t in enumerate(d.track_id.tolist()) if t >= 0}
