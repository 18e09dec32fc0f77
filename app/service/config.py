"""Service configuration: YAML validated by pydantic, with environment overrides.

Every key is checked (``extra="forbid"``), and an error names the key and what it allows. An
environment variable ``VIDPIPE_<KEY>`` overrides a top-level key (``VIDPIPE_PORT=9000``; lists
and mappings as JSON: ``VIDPIPE_MEDIA_ROOTS='["/srv/media"]'``). The API token is read only
from ``VIDPIPE_API_TOKEN``, or from the file ``VIDPIPE_API_TOKEN_FILE`` names (a mounted secret,
as the compose file does), never from the config, which might be committed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import yaml
from pydantic import Field, IPvAnyNetwork, ValidationError, model_validator

from app.outputs.config import EventsConfig
from models.checked import JSON_NUMBER, CheckedBody, Count, describe_error
from pipelines.analytics.config import (
    DEFAULT_TRACKER,
    AnalyticsConfig,
    LineConfig,
    MaskConfig,
    MotionMode,
    TrackerKind,
    TrackerSettings,
    ZoneConfig,
)
from pipelines.classify.config import ClassifierConfig
from pipelines.errors import ConfigError
from pipelines.settings import PipelineSettings

STREAM_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def check_masks(masks: list[MaskConfig]) -> None:
    """ConfigError (400) for two masks of one name: the schema cannot say it."""
    names = [mask.name for mask in masks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"mask names must be unique: {', '.join(twice)}")


Role = Literal["detect", "record"]
ROLES_RULE = "inputs: one input has the role detect, at most one the role record"


class InputConfig(CheckedBody):
    """One of a camera's inputs (Frigate's form): ``detect`` is decoded and detected (its
    sub-stream, typically), ``record`` feeds the clips without being decoded (its main
    stream)."""

    url: str = Field(min_length=1, max_length=2048)
    roles: list[Role] = Field(min_length=1, max_length=2)


class StreamConfig(CheckedBody):
    """One stream: an RTSP camera, or a file under a media root played as a camera would;
    ``url`` is its detected input, or ``inputs`` names them by role (``url`` is then the
    detect input's)."""

    url: str = Field(min_length=1, max_length=2048)
    inputs: list[InputConfig] | None = Field(default=None, min_length=1, max_length=2)
    id: str | None = Field(default=None, pattern=STREAM_ID_PATTERN)
    model: str | None = None  # default: the service's model
    policy: Literal["block", "drop_oldest"] | None = None  # default: drop_oldest (live)
    # analytics, as `vidpipe run`'s flags: a tracker (implied, botsort, by lines, zones
    # and detect_every or detect_fps), counting lines and zones in source pixels, the
    # detection interval (one frame in N) or rate (about F frames a second)
    track: TrackerKind | TrackerSettings | None = None
    lines: list[LineConfig] = Field(default_factory=list, max_length=64)
    zones: list[ZoneConfig] = Field(default_factory=list, max_length=64)
    masks: list[MaskConfig] = Field(default_factory=list, max_length=64)  # source pixels
    detect_every: Count = Field(default=1, ge=1, le=30)
    detect_fps: Annotated[float, Field(gt=0, le=240), JSON_NUMBER] | None = None
    # motion-gated detection (off: every frame to the model), outside ``masks``
    motion: MotionMode = "off"
    motion_heartbeat_s: Annotated[float, Field(gt=0, le=3600), JSON_NUMBER] = 10.0
    # second models on the crops of tracked objects (implies a tracker), as --classify
    classifiers: list[ClassifierConfig] = Field(default_factory=list, max_length=8)

    @model_validator(mode="before")
    @classmethod
    def _url_of_inputs(cls, data: Any) -> Any:
        """With ``inputs`` and no ``url``: the detect input's (the first input's where none
        is, for ``check_inputs`` to refuse)."""
        inputs = data.get("inputs") if isinstance(data, dict) else None
        if isinstance(inputs, list) and inputs and "url" not in data:
            inputs = [i for i in inputs if isinstance(i, dict)]
            detect = [i for i in inputs if "detect" in (i.get("roles") or [])]
            data = {**data, "url": (detect or inputs or [{}])[0].get("url")}
        return data

    def check_inputs(self) -> None:
        """ConfigError (400) for inputs whose roles do not fit: the schema cannot say it."""
        if self.inputs is None:
            return
        roles = [r for i in self.inputs for r in i.roles]
        if roles.count("detect") != 1 or roles.count("record") > 1 or \
                any(len(set(i.roles)) != len(i.roles) for i in self.inputs):
            raise ConfigError(ROLES_RULE)
        if self.url != self.detect_input.url:
            raise ConfigError("url and inputs: url is the detect input's (give one of them)")

    @property
    def detect_input(self) -> InputConfig:
        return next((i for i in self.inputs or [] if "detect" in i.roles),
                    InputConfig(url=self.url, roles=["detect", "record"]))

    @property
    def record_url(self) -> str | None:
        """The input recorded for clips, where it is not the detected one."""
        record = next((i for i in self.inputs or [] if "record" in i.roles), None)
        return None if record is None or "detect" in record.roles else record.url

    def analytics(self) -> AnalyticsConfig | None:
        """The stream's analytics (None: detections only); ConfigError when they, or its
        masks, do not fit together (a name used twice): the schema cannot say it, the
        service answers 400."""
        check_masks(self.masks)
        self.check_inputs()
        return analytics_config(self.track, self.lines, self.zones, self.detect_every,
                                self.detect_fps, self.gating(), self.classifiers)

    def gating(self) -> Gating:
        """Its motion gating, as analytics_config takes it."""
        return Gating(self.motion, self.motion_heartbeat_s, self.masks)


class AnalyticsUpdate(CheckedBody):
    """``PUT /api/streams/{id}/analytics``: the stream's lines, zones and masks from now on
    (a line or zone kept as it was keeps its counts), and a tracker for a stream without
    one."""

    track: TrackerKind | TrackerSettings | None = None
    lines: list[LineConfig] = Field(default_factory=list, max_length=64)
    zones: list[ZoneConfig] = Field(default_factory=list, max_length=64)
    masks: list[MaskConfig] = Field(default_factory=list, max_length=64)  # source pixels

    def applied_to(self, cfg: StreamConfig) -> StreamConfig:
        """``cfg`` as the stream runs after this update: its lines, zones and masks replaced,
        its tracker its own (or this update's, or DEFAULT_TRACKER, once it has lines or zones)."""
        track = cfg.track or self.track
        if track is None and (self.lines or self.zones):
            track = DEFAULT_TRACKER
        return cfg.model_copy(update={"track": track, "lines": self.lines,
                                      "zones": self.zones, "masks": self.masks})


class Gating(NamedTuple):
    """A stream's motion gating: its mode, heartbeat and masks."""

    motion: MotionMode = "off"
    heartbeat_s: float = 10.0
    masks: list[MaskConfig] = []  # noqa: RUF012  (a NamedTuple's default is never mutated)


def analytics_config(track: TrackerKind | TrackerSettings | None, lines: list[LineConfig],
                     zones: list[ZoneConfig], detect_every: int = 1,
                     detect_fps: float | None = None, gating: Gating | None = None,
                     classifiers: list[ClassifierConfig] | None = None
                     ) -> AnalyticsConfig | None:
    gating, classifiers = gating or Gating(), classifiers or []
    if (track is None and not lines and not zones and not classifiers and detect_every == 1
            and detect_fps is None and gating.motion == "off"):
        return None
    settings = track if isinstance(track, TrackerSettings) else \
        TrackerSettings(kind=track or DEFAULT_TRACKER)
    try:
        return AnalyticsConfig(track=settings, lines=lines, zones=zones,
                               detect_every=detect_every, detect_fps=detect_fps,
                               motion=gating.motion, motion_heartbeat_s=gating.heartbeat_s,
                               masks=gating.masks, classifiers=classifiers)
    except ValidationError as e:
        raise ConfigError(describe_error(e)) from None


class ServiceConfig(PipelineSettings):
    """The service's keys, and at the same level every PipelineSettings key (device,
    batch_size, decode, runtime, ...): the one pipeline configuration the CLI also builds."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    model: str = "ssdlite-person"
    batch_timeout_ms: float = Field(default=5.0, ge=0)
    max_streams: int = Field(default=16, ge=1, le=1024)
    max_body_kb: float = Field(default=64.0, gt=0)  # API request bodies, refused (413) unread
    # Host headers the API answers (DNS rebinding: a web page must not reach it by a name of
    # its own); None: localhost and 127.0.0.1, and ``host`` when it names one address
    allowed_hosts: list[str] | None = None
    media_roots: list[Path] = Field(default_factory=list)
    # the networks camera addresses may be in, checked after DNS resolution (None: any)
    allowed_networks: list[IPvAnyNetwork] | None = None
    allow_idn_hosts: bool = False  # camera host names outside ASCII (IDN, bidi controls)
    # the RTSP redirects a camera may send vidpipe through per connection, each target held
    # to allowed_networks (0: none is followed)
    rtsp_redirects: int = Field(default=3, ge=0, le=10)
    # where a stream added over the API may name a model by path (zoo names always work)
    model_roots: list[Path] = Field(default_factory=list)
    stall_timeout_s: float = Field(default=5.0, gt=0)
    # a camera not up for this long shows unreachable or error, with the reason
    camera_down_after_s: float = Field(default=5.0, gt=0)
    snapshot_interval_s: float = Field(default=0.5, gt=0)
    results_dir: Path | None = Path("results")  # <results_dir>/<stream>/detections.jsonl
    results_rotate_mb: float = Field(default=64.0, gt=0)
    # a line in the results (files and feed) for every frame motion gating skipped; false:
    # a quiet stretch of them (up to a second) is one line with "skipped_run"
    every_line: bool = False
    # rotated results and events files are removed past these (the current ones never)
    results_retain_hours: float = Field(default=168.0, gt=0)
    results_retain_mb: float = Field(default=4096.0, gt=0)
    # what the service remembers across restarts (streams added or changed over the API, the
    # events index): <state_dir>/vidpipe.db; null: nothing, the process's life only
    state_dir: Path | None = Field(default_factory=lambda: Path(
        os.environ.get("VIDPIPE_STATE_DIR") or "state"))
    streams: list[StreamConfig] = Field(default_factory=list)
    # where the tracked streams' events go (each stream's events.jsonl always; MQTT and
    # webhooks where set), the objects' snapshots and clips
    events: EventsConfig = Field(default_factory=EventsConfig)
    # scale-out on Ray (pip install vidpipe[ray]): ``workers`` processes on this machine, or
    # the workers of the cluster at ``ray_address`` (one per GPU, else per
    # ``cores_per_worker`` CPUs); neither: this process runs every stream
    workers: int | None = Field(default=None, ge=1, le=256)
    ray_address: str | None = None
    cores_per_worker: int = Field(default=2, ge=1)
    heartbeat_s: float = Field(default=1.0, gt=0)  # a worker missing 3 in a row is hung
    api_token: str | None = Field(default=None, exclude=True, repr=False)


def answered_hosts(config: ServiceConfig) -> list[str]:
    """The Host header values the API answers: ``allowed_hosts``, else the loopback names and
    the address the service listens on when it is one (not 0.0.0.0 or ::)."""
    if config.allowed_hosts is not None:
        return list(config.allowed_hosts)
    hosts = ["localhost", "127.0.0.1"]
    if config.host not in ("0.0.0.0", "::", "", *hosts):
        hosts.append(config.host)
    return hosts


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for key in ServiceConfig.model_fields:
        value = environ.get(f"VIDPIPE_{key.upper()}")
        if value is None or key == "api_token":
            continue
        try:
            overrides[key] = json.loads(value) if value[:1] in "[{" else value
        except json.JSONDecodeError as e:
            raise ConfigError(f"VIDPIPE_{key.upper()}: not valid JSON ({e.msg})") from e
    return overrides


def _api_token(environ: dict[str, str]) -> str | None:
    """``VIDPIPE_API_TOKEN``, or the content of the file ``VIDPIPE_API_TOKEN_FILE`` names
    (surrounding whitespace removed). A secret file keeps the token out of the environment,
    which ``docker inspect`` shows; setting both is refused rather than one silently winning."""
    token = environ.get("VIDPIPE_API_TOKEN") or None
    path = environ.get("VIDPIPE_API_TOKEN_FILE") or None
    if path is None:
        return token
    if token is not None:
        raise ConfigError("VIDPIPE_API_TOKEN and VIDPIPE_API_TOKEN_FILE are both set: set one")
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise ConfigError(f"VIDPIPE_API_TOKEN_FILE: cannot read {path} ({e.strerror})") from e
    if not text:
        raise ConfigError(f"VIDPIPE_API_TOKEN_FILE: {path} is empty")
    return text


def load_config(path: Path | None = None, environ: dict[str, str] | None = None) -> ServiceConfig:
    """The service config from ``path`` (optional) and the environment."""
    environ = dict(os.environ) if environ is None else environ
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text())
        except OSError as e:
            raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: must be a mapping of keys, got {type(loaded).__name__}")
        data = loaded or {}
        if "api_token" in data:
            raise ConfigError(f"{path}: api_token is read only from the environment "
                              "(VIDPIPE_API_TOKEN or VIDPIPE_API_TOKEN_FILE), so that it is "
                              "never in a config that might be committed")
    data |= _env_overrides(environ)
    data["api_token"] = _api_token(environ)
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe_error(e, str(path or "environment"))) from e
