"""Where a service stream's results go: its snapshot for the dashboard, its JSON lines file
under ``results_dir``, its live results feed (``GET /api/streams/{id}/results``) and its
events.

Each stream gets its own set when it is added and closes it when it ends, so a stream's
files are never written by two streams, and a results file left by an earlier run of the
same stream id is appended to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.service.config import ServiceConfig
from models.spec import ModelSpec
from pipelines.errors import ConfigError
from pipelines.events.sink import EventSink
from pipelines.sinks.broadcast import ResultBroadcast
from pipelines.sinks.rotating import RotatingJsonlSink
from pipelines.sinks.snapshot import LatestFrameSink
from pipelines.sinks.stage import Sink

MB = 1024 * 1024


@dataclass(eq=False)
class StreamOutputs:
    snapshot: LatestFrameSink
    live: ResultBroadcast
    file: RotatingJsonlSink | None  # None: results_dir is off
    events: EventSink | None = None  # the stream's events (app/service_events.py)

    @classmethod
    def open(cls, stream_id: str, spec: ModelSpec, config: ServiceConfig) -> StreamOutputs:
        """Made on the event loop (the live feed's readers read there)."""
        file = None
        if config.results_dir is not None:
            directory = config.results_dir / stream_id
            try:
                file = RotatingJsonlSink(directory, spec,
                                         int(config.results_rotate_mb * MB),
                                         every_line=config.every_line)
            except OSError as e:
                raise ConfigError(f"results_dir {config.results_dir}: cannot write "
                                  f"{Path(stream_id) / 'detections.jsonl'} "
                                  f"({e.strerror})") from e
        return cls(LatestFrameSink(spec, interval_s=config.snapshot_interval_s),
                   ResultBroadcast(spec, every_line=config.every_line), file)

    @property
    def sinks(self) -> list[Sink]:
        sinks: list[Sink] = [self.snapshot, self.live]
        if self.file is not None:
            sinks.append(self.file)
        if self.events is not None:
            sinks.append(self.events)
        return sinks

    def close(self) -> None:
        """The stream has ended: its file is closed, its live readers told, its objects
        ended (the last snapshot stays readable)."""
        for sink in self.sinks:
            sink.close()

    def discard(self) -> None:
        """The stream was refused before it ran: closed, and its results file (empty) gone."""
        self.close()
        if self.file is not None:
            self.file.file.discard()
