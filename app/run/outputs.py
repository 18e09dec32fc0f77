"""A run's outputs in its folder (``--out``): the detections' JSON lines, the annotated videos
and the events, all written under temporary names and committed together with
``summary.json`` when the run ends, or discarded when it fails (and the folder removed if the
run made it): a failed run leaves nothing behind, a killed one's leftovers are removed by the
next."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.outputs.config import EventsConfig
from app.run.events import RunEvents
from app.run.heatmaps import write_heatmaps
from app.run.summary import summarise
from models.spec import ModelSpec
from pipelines.analytics.config import AnalyticsConfig
from pipelines.errors import ConfigError
from pipelines.events.ring import PacketRing
from pipelines.gpu_metrics import GpuSampler
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.shadow.compare import ShadowComparison
from pipelines.shadow.model import ShadowModel
from pipelines.shadow.sink import ShadowSink
from pipelines.sinks.atomic import AtomicPath
from pipelines.sinks.jsonl import JsonlSink
from pipelines.sinks.stage import Sink
from pipelines.sinks.video import AnnotatedVideoSink

log = logging.getLogger(__name__)

StreamInfo = dict[str, tuple[float, int | None]]  # stream -> (fps, frames declared)


@dataclass(slots=True)
class RunOutputs:
    detections: Path
    summary: Path
    annotated: list[Path]
    # files a signal stopped before their end: (stream, frames counted, frames declared)
    unfinished: list[tuple[str, int, int]] = field(default_factory=list)
    events: Path | None = None  # events.jsonl, where the streams have analytics
    heatmaps: list[Path] = field(default_factory=list)  # --heatmap: one per tracked stream
    shadow: dict[str, Any] | None = None  # --shadow: the candidate against the model


class OutputFolder:
    """``out`` made ready (created, a killed run's leftovers removed), its sinks opened, and
    at the end all committed or all discarded."""

    def __init__(self, out: Path, spec: ModelSpec, ids: list[str],
                 model: Path | None = None) -> None:
        """``model``: the model file, named in summary.json (what `vidpipe replay` reads)."""
        self.out, self.spec, self.ids, self.model = out, spec, ids, model
        self.created = not out.exists()
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out}: exists and is not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--out {out}: cannot create the folder ({e.strerror})") from e
        _remove_stale_partials(out)
        self.sinks: list[Sink] = []
        self.events: RunEvents | None = None
        # --heatmap: each stream's file (for the picture under it) and picture size
        self.heatmaps: tuple[dict[str, Path], dict[str, tuple[int, int] | None]] | None = None
        self.shadow: ShadowSink | None = None

    def open_sinks(self, info: StreamInfo, annotate: bool,
                   analytics: AnalyticsConfig | None = None, every_line: bool = False) -> None:
        """detections.jsonl (``every_line``: each skipped frame's line too), and with
        ``annotate`` an annotated video per stream (its lines and zones drawn with their
        counts, where ``analytics`` has any)."""
        out, ids = self.out, self.ids
        self.sinks.append(JsonlSink(out / "detections.jsonl", self.spec, every_line))
        if annotate:
            def path_for(sid: str) -> Path:
                return out / ("annotated.mp4" if len(ids) == 1 else f"annotated-{sid}.mp4")

            self.sinks.append(AnnotatedVideoSink(path_for, lambda sid: info[sid][0],
                                                 self.spec, analytics))

    def open_shadow(self, model: Path, spec: ModelSpec, share: float) -> None:
        """``--shadow``: ``model`` run beside the run's on ``share`` of its frames, compared
        (summary.json: ``shadow``)."""
        current = f"{self.spec.name} ({Path(self.model).name})" if self.model else \
            self.spec.name
        self.shadow = ShadowSink(ShadowComparison(ShadowModel(model, spec, self.spec),
                                                  current, share))
        self.sinks.append(self.shadow)

    def open_events(self, config: EventsConfig, metrics: PipelineMetrics,
                    options: PipelineOptions, info: StreamInfo) -> dict[str, PacketRing]:
        """The tracked streams' events (events.jsonl, and where ``config`` says, media and
        network outputs); the packet ring of each stream whose clips are kept."""
        assert options.analytics is not None and options.analytics.track is not None
        lost_s = options.analytics.track.lost_frames / 30.0  # the tracker's frames: 30 fps
        self.events = RunEvents(self.out, self.spec, config, metrics,
                                fps_of=lambda sid: info[sid][0] or 30.0,
                                end_s_of=lambda sid: lost_s)
        self.sinks.append(self.events.sink)
        return {sid: ring for sid in self.ids if (ring := self.events.ring(sid)) is not None}

    def commit(self, metrics: PipelineMetrics, pipeline: Pipeline, stopped_by: str | None,
               unfinished: list[tuple[str, int, int]],
               gpu: GpuSampler | None = None) -> RunOutputs:
        """Every output renamed into place, summary.json last."""
        events = self.events
        for sink in self.sinks:
            if events is None or sink is not events.sink:
                sink.close(commit=True)
        if events is not None:
            events.close(commit=True)
        annotated = [p for s in self.sinks if isinstance(s, AnnotatedVideoSink) for p in s.paths]
        heatmaps = [] if self.heatmaps is None else \
            write_heatmaps(self.out, pipeline, self.ids, *self.heatmaps)
        summary = self.out / "summary.json"
        atomic = AtomicPath(summary)
        report = summarise(metrics, pipeline, self.ids)
        if self.model is not None:
            report["model"] = str(Path(self.model).resolve())
        if gpu is not None:
            report["gpu"] = gpu.summary()  # NVML, sampled every 0.5 s while it ran
        shadow = None if self.shadow is None else self.shadow.comparison.report()
        if shadow is not None:
            report["shadow"] = shadow
        report["interrupted"] = {"by": stopped_by, "unfinished": {
            sid: {"frames": counted, "declared": declared}
            for sid, counted, declared in unfinished}} if unfinished else False
        atomic.partial.write_text(json.dumps(report, indent=2))
        atomic.commit()
        return RunOutputs(self.out / "detections.jsonl", summary, annotated, unfinished,
                          events.path if events is not None else None, heatmaps, shadow)

    def discard(self) -> None:
        """What was written goes, and the folder too if the run made it and it is empty."""
        for sink in self.sinks:
            sink.close(commit=False)
        if self.events is not None:
            self.events.close(commit=False)
        if self.created and self.out.is_dir() and not any(self.out.iterdir()):
            self.out.rmdir()


def _remove_stale_partials(out: Path) -> None:
    """Remove the hidden ``.NAME.partial`` files a killed run left in ``out``: beside an
    older run's finished files they would look like part of it."""
    if not out.is_dir():
        return
    for stale in out.glob(".*.partial"):
        log.warning("removed %s, left by a run that was killed before it finished", stale)
        stale.unlink(missing_ok=True)
