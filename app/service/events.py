"""The service's events: one set of outputs for every stream (each stream's
``<results_dir>/<id>/events.jsonl``, MQTT and webhooks from the ``events:`` block, the index
in the service's store that the API and the dashboard list), one media writer for the
objects' snapshots and clips (served as ``/api/events/{id}/snapshot.jpg`` and ``/clip.mp4``),
and an EventSink per stream.

Made when the service starts and closed after its streams have drained: the live objects
have ended by then, their media are written and their ``end`` published, and each network
sink delivers what it holds (or dead-letters it) before the service exits.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from app.outputs.event_outputs import EventOutputs, close_in_turn
from app.service.config import ServiceConfig
from app.service.store import ServiceStore
from app.service.streams import StreamState
from models.spec import ModelSpec
from pipelines.events.files import EventFiles
from pipelines.events.media import MediaStore
from pipelines.events.ring import PacketRing
from pipelines.events.sink import EventOutput, EventSink, MediaWriter
from pipelines.metrics import PipelineMetrics

MB = 1024 * 1024
RECENT = 200  # the most events one page of /api/events/recent lists


def api_path(kind: str, event_id: str, stream: str) -> str:
    """Where the service serves an event's media."""
    return {"clip": f"/api/events/{event_id}/clip.mp4",
            "snapshot": f"/api/events/{event_id}/snapshot.jpg",
            "clean": f"/api/events/{event_id}/snapshot.jpg?clean=true"}[kind]


class EventIndex:
    """Every event of the service's streams indexed in its store (the recent list, the
    review page), and handed to ``on_event`` (the API's event feed; called on the
    publishing thread)."""

    name = "index"

    def __init__(self, store: ServiceStore, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.store = store  # pruned by the service's Housekeeper (app.service.retention)
        self._on_event = on_event

    def publish(self, event: dict[str, Any]) -> None:
        self.store.add_event(event)
        self._on_event(event)

    def publish_state(self, stream: str, state: dict[str, Any]) -> None:
        """The API reads a stream's counts from its analytics."""


class ServiceEvents:
    def __init__(self, config: ServiceConfig, metrics: PipelineMetrics,
                 on_event: Callable[[dict[str, Any]], None], store: ServiceStore,
                 instance: str | None = None) -> None:
        self.settings = config.events
        self.metrics = metrics
        self.index = EventIndex(store, on_event)
        first: list[EventOutput] = [self.index]
        self.files: EventFiles | None = None
        if config.results_dir is not None:
            self.files = EventFiles(config.results_dir, int(config.results_rotate_mb * MB),
                                    metrics)
            first.insert(0, self.files)
        self.outputs = EventOutputs(config.events, metrics, first, instance,
                                    networks=config.allowed_networks)
        self.store = MediaStore(config.events.media_dir, config.events.retain_hours,
                                config.events.retain_mb)
        self.media = MediaWriter(self.store, config.events.clips, api_path) \
            if config.events.snapshots or config.events.clips is not None else None

    def ring(self) -> PacketRing | None:
        """A packet ring for a new stream's clips (None: clips are off)."""
        clips = self.settings.clips
        return None if clips is None else PacketRing(clips.buffer_s,
                                                     int(clips.buffer_mb * MB))

    def sink(self, stream: str, spec: ModelSpec, fps_of: Callable[[str], float],
             lost_s_of: Callable[[str], float], ring: PacketRing | None) -> EventSink:
        """A stream's EventSink: it makes events once the stream has a tracker (which may
        come later, over the API: ``lost_s_of`` is read then)."""
        return EventSink(spec, self.settings, self.outputs.outputs, fps_of=fps_of,
                         end_s_of=lost_s_of, rings={stream: ring} if ring is not None else {},
                         media=self.media, metrics=self.metrics)

    def attach(self, stream: StreamState, spec: ModelSpec, tracked: bool) -> PacketRing | None:
        """The stream's EventSink among its outputs; its packet ring where clips are on and
        the stream is tracked from the start (one given a tracker later has no clips)."""
        ring = self.ring() if tracked else None
        held = weakref.ref(stream)  # the stream holds its sink: a strong ref would be a cycle

        def fps(_: str) -> float:
            source = getattr(held(), "source", None)
            return float(getattr(source, "fps", 0) or 30.0)

        def lost_s(_: str) -> float:
            analytics = getattr(held(), "analytics", None)  # its tracker's, card included
            track = analytics.tracker.settings if analytics is not None else None
            return (track.lost_frames if track is not None else 30) / 30.0

        stream.outputs.events = self.sink(stream.id, spec, fps, lost_s, ring)
        return ring

    def close(self) -> None:
        """After the streams: their objects' media, then the sinks' deliveries."""
        close_in_turn(self.media.close if self.media is not None else None,
                      self.outputs.close, self.files.close if self.files is not None else None)
