"""What the API answers, as pydantic models: the OpenAPI document describes every answer,
and an answer that drifts from its model fails in the service's tests, not in a client.

Names and keys are the API's contract (the dashboard, the cluster's controller and users'
scripts read them); ``extra="forbid"`` keeps a field the model does not declare from being
served unseen.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipelines.analytics.config import LineConfig, MaskConfig, ZoneConfig
from pipelines.classify.config import ClassifierConfig


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Quantiles(_Answer):
    """Milliseconds; null where there were no samples."""

    p50: float | None
    p95: float | None
    p99: float | None


class ZoneCounts(_Answer):
    occupancy: int
    entered: int
    exited: int
    loitering: int
    crowds: int
    max_occupancy: int
    crowded: bool
    dwell_s: dict[str, float] = Field(default_factory=dict,
                                      description="each track inside: its dwell so far")


class Counts(_Answer):
    lines: dict[str, dict[str, int]] = Field(description="per line: its in and out counts")
    zones: dict[str, ZoneCounts]


class StreamAnalytics(_Answer):
    track: str
    detect_every: int
    detect_fps: float | None = Field(default=None, description="the detector's frames a "
                                     "second, when set; the tracker gives the others' boxes")
    motion: str = Field(default="off", description="motion-gated detection: off, auto, "
                        "vectors or pixels")
    motion_heartbeat_s: float = Field(default=10.0, description="with motion: the detector "
                                      "sees a frame at least this often")
    lines: list[LineConfig]
    zones: list[ZoneConfig]
    classifiers: list[ClassifierConfig] = Field(
        default_factory=list, description="second models on its tracked objects' crops")
    counts: Counts


class Stream(_Answer):
    """A stream as the API shows it: never its credentials."""

    id: str
    url: str = Field(description="the URL without its password (its detected input)")
    record_url: str | None = Field(default=None, description="its recorded input (role "
                                   "record: clips, never decoded), without its password; null: "
                                   "the clips come from the detected input")
    kind: Literal["rtsp", "file"] | None = None
    model: str | None = None
    policy: str | None = None
    state: str = Field(description="connecting, up, reconnecting, unreachable (nothing answers "
                                   "as a camera), error (the camera refuses or sends no video), "
                                   "restarting, stopped, failed (moving: between two workers)")
    reconnects: int = 0
    error: str | None = Field(default=None, description="why the stream failed")
    reason: str | None = Field(default=None, description="why a camera is not up, in words: "
                               "its last failure")
    attempts: int = Field(default=0, description="failed connection attempts in a row")
    next_retry_at: float | None = Field(default=None, description="Unix time of the next "
                                        "connection attempt")
    state_since: float | None = Field(default=None, description="Unix time the camera's state "
                                      "began")
    created_at: float | None = Field(default=None, description="Unix time")
    analytics: StreamAnalytics | None = None
    masks: list[MaskConfig] = Field(default_factory=list, description="motion masks, in "
                                    "source pixels (kept and drawn; not read by anything yet)")
    worker: str | None = Field(default=None, description="the process that runs it")


class StreamFigures(Stream):
    fps: float
    latency_ms: Quantiles
    outcomes: dict[str, int]
    received: int
    gaps: int = Field(default=0, description="times the camera came back after being away")
    gap_s: float = Field(default=0.0, description="seconds its timeline had no frames, over "
                         "its gaps")


class StageFigures(_Answer):
    stage: str
    threads: int
    items: int
    busy: float = Field(description="work time / wall time per thread, 0..1")
    work_ms: Quantiles
    wait_ms: Quantiles


class ChannelFigures(_Answer):
    name: str
    depth: int
    capacity: int
    worker: str | None = None


class DetectorFigures(_Answer):
    id: str = Field(description="what /api/detectors/{id}/candidate names it by")
    model: str
    device: str
    streams: list[str]
    batches: dict[str, int] = Field(description="batches inferred, by size")
    fps: float
    state: str
    restarts: int
    candidate: dict[str, Any] | None = Field(default=None, description="a candidate model "
                                             "compared beside it: file, frames, "
                                             "frame_agreement, boxes_per_frame (the model's, "
                                             "the candidate's), cpu_share, cpu_budget, error")
    worker: str | None = None


class GpuFigures(_Answer):
    gpu: int
    utilization: float
    decoder_utilization: float
    memory_used_bytes: int
    worker: str | None = None


class Usage(_Answer):
    """One kind of stored data, and the retention that bounds it."""

    mb: float
    files: int
    oldest: float | None = Field(description="Unix time of the oldest file's last write")
    retain_mb: float
    retain_hours: float


class Storage(_Answer):
    results: Usage | None = Field(description="results_dir: each stream's results and events "
                                  "files (null: none written)")
    media: Usage | None = Field(description="the events' snapshots and clips")
    events_indexed: int = Field(description="events the service remembers (the recent list)")
    measured_at: float | None = Field(default=None, description="Unix time these were "
                                      "measured (every minute, and at start)")


class Headroom(_Answer):
    """How many more cameras like the running ones the machine holds (app/service/headroom.py)."""

    cores: int
    used_cores: float = Field(description="the service's CPU over the window, in cores")
    cameras: int = Field(description="cameras running now")
    camera_cores: float = Field(description="what one camera costs, on average, in cores")
    holds: int = Field(description="cameras like these the machine holds (85 % of its cores)")
    more: int = Field(description="how many more it holds; a camera added past that is "
                      "refused (409) unless forced")
    overloaded: bool = Field(description="more cameras run than it holds (added with force)")
    window_s: float


class Stats(_Answer):
    window_s: float
    stages: list[StageFigures]
    channels: list[ChannelFigures]
    streams: list[StreamFigures]
    drops: dict[str, int]
    batch_sizes: dict[str, int]
    detectors: list[DetectorFigures]
    gpus: list[GpuFigures] | None = None
    storage: Storage | None = None
    headroom: Headroom | None = Field(default=None, description="null until a camera has run "
                                      "for a few seconds")


class Worker(_Answer):
    id: str
    pid: int | None
    node: str | None
    streams: list[str]
    fps: float
    alive: bool
    joining: bool = False


class RecentEvents(_Answer):
    events: list[dict[str, Any]] = Field(description="vidpipe.event/1 events, newest first "
                                                     "(docs/events.schema.json)")
    next: str | None = Field(default=None, description="the next page: pass it as ``before``; "
                             "null: this was the last")


class Health(_Answer):
    status: Literal["ok"]


class Readiness(_Answer):
    ready: bool


class Problem(_Answer):
    """Every refusal: what was wrong (a string, or the fields of a malformed body)."""

    detail: Any


class CandidateReport(_Answer):
    """A candidate model beside a shared detector, on the same frames: the frames it saw,
    how far its boxes agree with the detector's (the measure of `vidpipe model check`),
    both sides' boxes and scores, and what it costs."""

    detector: str
    current: str
    candidate: str
    candidate_file: str
    share: float = Field(description="of the frames the model saw, those offered to it")
    cpu_budget: float = Field(description="cores it may use, at most")
    cpu_share: float = Field(description="cores it has used, on average since it started")
    running_s: float
    frames_offered: int
    passed_over: dict[str, int] = Field(description="offered frames it did not take: its "
                                        "thread was busy, or it was over its budget")
    agreement: dict[str, Any] = Field(description="frames compared, the share agreeing, "
                                      "boxes on each side, paired boxes' IoU and scores")
    detections: dict[str, Any] = Field(description="boxes per frame and scores by tenths, "
                                       "the current model's and the candidate's")
    candidate_ms_per_frame: dict[str, float] | None
    candidate_cpu_ms_per_frame: float | None
    streams: dict[str, Any] = Field(description="the same per stream")
    error: str | None = Field(default=None, description="why it stopped, if it failed")

