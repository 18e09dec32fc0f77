"""A run as the user asked for it (``RunRequest``: sources, model, settings, analytics and
event flags), checked and started: ``run_request`` is what ``vidpipe run`` and ``vidpipe demo``
call."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.outputs.config import EventsConfig
from app.outputs.event_outputs import check_event_outputs
from app.run.outputs import RunOutputs
from app.run.runner import run_files
from app.run.sources import Location, stream_ids
from models.classifier_zoo import resolve_classifier
from models.zoo import resolve_model
from pipelines.analytics.config import DEFAULT_TRACKER, from_flags
from pipelines.errors import ConfigError
from pipelines.events.config import ClipSettings
from pipelines.options import PipelineOptions


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A run as the user asked for it: sources, the model (a zoo name, folder or ONNX file,
    with ``output_format`` and ``classes`` for one without a card), the pipeline's
    ``settings`` (``PipelineSettings`` keys), and the analytics and event flags."""

    sources: Sequence[str]
    out: Path = Path("out")
    model: str | None = None
    output_format: str | None = None
    classes: Path | None = None
    input_size: tuple[int, int] | None = None
    annotate: bool = False
    metrics_port: int | None = None
    live: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    ffmpeg_resize: bool = False
    track: str | None = None
    lines: Sequence[str] = ()
    zones: Sequence[str] = ()
    classify: Sequence[str] = ()  # --classify: classifiers on the tracks' crops
    detect_every: int = 1
    detect_fps: float | None = None
    motion: str = "off"
    motion_heartbeat_s: float = 10.0
    masks: Sequence[str] = ()
    records: Sequence[str] = ()  # --record: the i-th source's recorded input
    events_mqtt: str | None = None
    events_webhooks: Sequence[str] = ()
    snapshots: bool = False
    clips: bool = False
    heatmap: bool = False
    shadow: str | None = None  # --shadow: a candidate model compared on the same frames
    shadow_share: float = 1.0
    every_line: bool = False  # --every-line: a quiet stretch's skipped frames a line each


def run_request(request: RunRequest, *,
                on_progress: Callable[[int, int | None], None] | None = None) -> RunOutputs:
    """Check ``request`` (options, model, events: ConfigError, ModelError or SourceError
    naming what is wrong) and run it (``run_files``)."""
    options = PipelineOptions(**request.settings, ffmpeg_resize=request.ffmpeg_resize,
                              analytics=from_flags(request.track or _implied(request),
                                                   list(request.lines),
                                                   list(request.zones), request.detect_every,
                                                   request.detect_fps, motion=request.motion,
                                                   heartbeat_s=request.motion_heartbeat_s,
                                                   masks=list(request.masks),
                                                   classify=list(request.classify)))
    model_path, spec = resolve_model(request.model, output_format=request.output_format,
                                     classes=request.classes, input_size=request.input_size)
    for c in options.analytics.classifiers if options.analytics else []:  # before any input
        resolve_classifier(c.model, output_format=c.format,
                           classes=Path(c.classes) if c.classes else None)
    logging.getLogger("app.run").info("model %s (%s, %d classes) from %s", spec.name,
                                      spec.output.format, spec.num_classes, model_path)
    events = EventsConfig(mqtt=request.events_mqtt, webhooks=list(request.events_webhooks),
                          snapshots=request.snapshots,
                          clips=ClipSettings() if request.clips else None)
    if (events.mqtt or events.webhooks or events.snapshots or events.clips) \
            and options.analytics is None:
        raise ConfigError("--events-mqtt, --events-webhook, --snapshots and --clips are "
                          "about tracked objects: add --track (or --line, --zone)")
    check_event_outputs(events, None, allow_idn=False)
    shadow = None
    if request.shadow is not None:
        shadow_path, shadow_spec = resolve_model(request.shadow)
        shadow = (shadow_path, shadow_spec, request.shadow_share)
    _, _, outputs = run_files(request.sources, model_path, spec, request.out, options,
                              annotate=request.annotate, metrics_port=request.metrics_port,
                              live=request.live, on_progress=on_progress, events=events,
                              records=_records(request, events), heatmap=request.heatmap,
                              shadow=shadow, every_line=request.every_line)
    return outputs


def _implied(request: RunRequest) -> str | None:
    """The tracker --heatmap implies (it maps where tracked objects went)."""
    return DEFAULT_TRACKER if request.heatmap else None


def _records(request: RunRequest, events: EventsConfig) -> dict[str, Location]:
    """``--record``: the i-th source's recorded input, by its stream id; ConfigError for
    more than the sources, or without clips (nothing would read them)."""
    if not request.records:
        return {}
    if len(request.records) > len(request.sources):
        raise ConfigError(f"--record: {len(request.records)} recorded inputs for "
                          f"{len(request.sources)} source(s): one at most per source, in order")
    if events.clips is None:
        raise ConfigError("--record feeds the clips, never the detector: add --clips")
    ids = stream_ids(request.sources)
    return dict(zip(ids, request.records, strict=False))
