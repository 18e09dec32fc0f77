"""Event outputs that are files: ``vidpipe run``'s ``events.jsonl`` (written whole or not at
all), the service's per-stream ``events.jsonl`` (appended, rotated), and the dead-letter file
where every event a sink could not deliver is kept, with its sink and why.

Each is called from the sink stage and from the media thread (an object's ``end``), so each
write holds a lock.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from pipelines.metrics import PipelineMetrics
from pipelines.sinks.jsonl import AtomicLines
from pipelines.sinks.rotating import RotatingLines


def event_line(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


class EventLog(AtomicLines):
    """``events.jsonl`` of a run: every event, one line each, in the order published."""

    name = "file"

    def __init__(self, path: Path, metrics: PipelineMetrics | None = None) -> None:
        super().__init__(path)
        self._lock = threading.Lock()
        self._metrics = metrics

    def publish(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._line(event_line(event))
        if self._metrics is not None:
            self._metrics.count_event(self.name, "sent")

    def publish_state(self, stream: str, state: dict[str, Any]) -> None:
        """A run's counts are in summary.json and each frame's line."""

    def close(self, commit: bool = True) -> None:
        with self._lock:
            super().close(commit)


class EventFiles:
    """The service's ``<root>/<stream>/events.jsonl``, rotated at ``rotate_bytes``; at most
    ``max_open`` kept open (the least recently written closed first), so streams added and
    removed for months hold no file each."""

    name = "file"

    def __init__(self, root: Path, rotate_bytes: int, metrics: PipelineMetrics,
                 max_open: int = 32) -> None:
        self.root, self.rotate_bytes, self._metrics = root, rotate_bytes, metrics
        self.max_open = max_open
        self._files: OrderedDict[str, RotatingLines] = OrderedDict()
        self._lock = threading.Lock()

    def publish(self, event: dict[str, Any]) -> None:
        stream = event["stream"]
        with self._lock:
            file = self._files.pop(stream, None)
            if file is None:
                file = RotatingLines(self.root / stream, self.rotate_bytes, "events")
            self._files[stream] = file  # the most recently written last
            while len(self._files) > self.max_open:
                self._files.popitem(last=False)[1].close()
            file.write_line(event_line(event))
        self._metrics.count_event(self.name, "sent")

    def publish_state(self, stream: str, state: dict[str, Any]) -> None:
        """The counts are in each result line and the API."""

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), OrderedDict()
        for file in files:
            file.close()


class DeadLetters:
    """The events a sink gave up on, one JSON line each: ``{"sink", "reason", "event"}``;
    each also counted as ``dropped`` for its sink."""

    def __init__(self, path: Path, metrics: PipelineMetrics) -> None:
        self.path = path
        self._metrics = metrics
        self._lock = threading.Lock()
        self.count = 0

    def add(self, sink: str, reason: str, event: dict[str, Any]) -> None:
        line = event_line({"sink": sink, "reason": reason, "event": event}) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line)
            self.count += 1
        self._metrics.count_event(sink, "dropped")
