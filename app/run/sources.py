"""A run's sources: each opened once, for the whole run (a file, played as a camera with
``live``; a camera, connected once before the first frame), and each given an id from its
file name or camera path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pipelines.decode.stage import DecodeStage
from pipelines.errors import ConfigError
from pipelines.events.record import RecordInput
from pipelines.events.ring import PacketRing
from pipelines.metrics import PipelineMetrics
from pipelines.pipeline import Pipeline
from pipelines.sources.file import FileSource
from pipelines.sources.paced import PacedFileSource
from pipelines.sources.rtsp import RtspSource

log = logging.getLogger(__name__)

Location = str | Path  # a video file, or a camera's rtsp:// URL


def is_url(location: Location) -> bool:
    return "://" in str(location)


def _base_id(location: Location) -> str:
    """A file's stem; a camera URL's last path segment, else its host (never its password)."""
    if not is_url(location):
        return Path(location).stem
    rest = str(location).split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    host, _, path = rest.rpartition("@")[2].partition("/")
    name = path.rstrip("/").rpartition("/")[2] or host.partition(":")[0]
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)


def stream_ids(locations: Sequence[Location]) -> list[str]:
    """One id per source from its file name or camera path, made unique (clip, clip-2, ...)."""
    ids: list[str] = []
    for location in locations:
        base = _base_id(location) or "stream"
        candidate, n = base, 1
        while candidate in ids:
            n += 1
            candidate = f"{base}-{n}"
        ids.append(candidate)
    return ids


def open_sources(locations: Sequence[Location], ids: Sequence[str], stack: ExitStack,
                 metrics: PipelineMetrics, *, live: bool = False) -> dict[str, Any]:
    """Each source opened once, for the whole run (closed by ``stack``, if the pipeline has
    not closed it already): a file (played as a camera with ``live``), or a camera, connected
    once now. SourceError for a bad file or a camera that cannot be reached."""
    sources: dict[str, Any] = {}
    for location, sid in zip(locations, ids, strict=True):
        if is_url(location):
            on_state, on_reconnect = _camera_callbacks(metrics, sid)
            camera = stack.enter_context(RtspSource(str(location), sid, on_state=on_state,
                                                    on_reconnect=on_reconnect))
            camera.connect()
            sources[sid] = camera
        else:
            kind = PacedFileSource if live else FileSource
            sources[sid] = stack.enter_context(kind(Path(location), sid))
        log.info("%s", sources[sid].describe())
    return sources


def open_record(location: Location, sid: str, stack: ExitStack, *, live: bool) -> Any:
    """A stream's recorded input (``--record``): a camera, or a file played as one. Only
    beside live sources, whose timelines run at the camera's pace: a file read as fast as it
    decodes would leave the recording behind (ConfigError)."""
    if not live and not is_url(location):
        raise ConfigError(f"--record {location}: a recorded input goes with a camera or a "
                          "file played as one (--live)")
    if is_url(location):
        return stack.enter_context(RtspSource(str(location), f"{sid}-record"))
    return stack.enter_context(PacedFileSource(Path(location), f"{sid}-record", loop=False))


def start_records(pipeline: Pipeline, recorded: dict[str, Any], rings: dict[str, PacketRing],
                  stack: ExitStack) -> None:
    """Each recorded input read into its stream's ring, on the timeline of its stream's
    decode stage (stopped with ``stack``)."""
    stages = {s.stream_id: s for s in pipeline.stages if isinstance(s, DecodeStage)}
    for sid, source in recorded.items():
        recorder = RecordInput(source, rings[sid], stages[sid].timeline.now)
        stack.callback(recorder.close)
        recorder.start()


def _camera_callbacks(metrics: PipelineMetrics, sid: str,
                      ) -> tuple[Callable[[str], None], Callable[[], None]]:
    """What a camera reports, into ``vidpipe_stream_state``, ``vidpipe_stream_up`` and the
    reconnect counter."""
    def on_state(state: str) -> None:
        metrics.set_stream_state(sid, state)

    def on_reconnect() -> None:
        metrics.count_reconnect(sid)

    return on_state, on_reconnect
