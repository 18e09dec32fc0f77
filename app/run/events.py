"""A ``vidpipe run``'s events: the EventSink on the sink stage, ``events.jsonl``, MQTT and
webhooks where asked, and the objects' snapshots and clips under ``OUT/events/``.

Closed in that order when the run ends: the live objects end, their media are written and
their ``end`` published, the network sinks deliver what they hold (or dead-letter it), and
``events.jsonl`` is committed — or, for a failed run, discarded with the media folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from app.outputs.config import EventsConfig
from app.outputs.event_outputs import EventOutputs, close_in_turn
from models.spec import ModelSpec
from pipelines.events.files import EventLog
from pipelines.events.media import MediaStore
from pipelines.events.ring import PacketRing
from pipelines.events.sink import EventSink, MediaWriter
from pipelines.metrics import PipelineMetrics

MB = 1024 * 1024


def media_path(kind: str, event_id: str, stream: str) -> str:
    """Where a run's event says its media are: relative to the run's folder."""
    suffix = {"clip": ".mp4", "snapshot": ".jpg", "clean": ".clean.jpg"}[kind]
    return f"events/{stream}/{event_id}{suffix}"


class RunEvents:
    def __init__(self, out: Path, spec: ModelSpec, config: EventsConfig,
                 metrics: PipelineMetrics, fps_of: Callable[[str], float],
                 end_s_of: Callable[[str], float]) -> None:
        self.path = out / "events.jsonl"
        self.media_dir = out / config.media_dir
        # the dead-letter file beside the media, under OUT (not where the command was run)
        config = config.model_copy(update={"dead_letter": out / config.dead_letter_path})
        self._made_media_dir = not self.media_dir.exists()
        self.log = EventLog(self.path, metrics)
        self.rings: dict[str, PacketRing] = {}
        self.media: MediaWriter | None = None
        try:
            self.outputs = EventOutputs(config, metrics, [self.log])
        except BaseException:
            self.log.close(commit=False)
            raise
        if config.snapshots or config.clips is not None:
            store = MediaStore(self.media_dir, config.retain_hours, config.retain_mb)
            self.media = MediaWriter(store, config.clips, media_path)
        self.config = config
        self.sink = EventSink(spec, config, self.outputs.outputs, fps_of=fps_of,
                              end_s_of=end_s_of, rings=self.rings, media=self.media,
                              metrics=metrics)

    def ring(self, stream: str) -> PacketRing | None:
        """A packet ring for ``stream``'s clips (None: no clips)."""
        clips = self.config.clips
        if clips is None:
            return None
        ring = self.rings[stream] = PacketRing(clips.buffer_s, int(clips.buffer_mb * MB))
        return ring

    def close(self, commit: bool = True) -> None:
        close_in_turn(lambda: self.sink.close(commit),
                      self.media.close if self.media is not None else None,
                      self.outputs.close,
                      lambda: self.log.close(commit),
                      None if commit else self._discard_media)

    def _discard_media(self) -> None:
        if self._made_media_dir and self.media_dir.is_dir():
            shutil.rmtree(self.media_dir, ignore_errors=True)
