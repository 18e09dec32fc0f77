"""What a stream's analytics are made of, as checked data: the tracker, counting lines and
zones, all in source pixels. The CLI's ``--track``/``--line``/``--zone`` flags, the service's
per-stream keys and ``PUT /api/streams/{id}/analytics`` all build these.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self, TypeVar, get_args

from pydantic import Field, StrictBool, ValidationError, model_validator

from models.checked import JSON_NUMBER, Checked, Count, Number, describe_error
from pipelines.classify.config import ClassifierConfig, parse_classify
from pipelines.errors import ConfigError

TrackerKind = Literal["bytetrack", "botsort", "ocsort", "sort"]
# the tracker where none is named (implied by lines, zones, a detection interval, motion
# gating, heatmaps): BoT-SORT counted closer than ByteTrack on every held-out cell of the
# counting set and tracked better on the occluded clips (docs/BENCHMARKS.md)
DEFAULT_TRACKER: TrackerKind = "botsort"
# Motion-gated detection: off (every frame the picker takes goes to the model), or where the
# motion is read from: the codec's motion vectors, a small grey picture's change, or auto
# (vectors where the decoder gives them, pixels otherwise): pipelines/decode/motion.py
MotionMode = Literal["off", "auto", "vectors", "pixels"]
# The point of a box that counts on lines and in zones: bottom-centre (where a person or car
# touches the ground) by default.
Anchor = Literal["bottom_center", "center", "top_center", "left_center", "right_center"]
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


class TrackerSettings(Checked):
    """The tracker (Roboflow's ``trackers``). ``activation`` (the least score that starts a
    track) and ``high`` (ByteTrack's first-stage score) default to the model's score threshold:
    the library's 0.7/0.6, tuned for COCO detectors, start no track on a model whose scores
    run lower. In frames at 30 fps, whatever the rate and ``detect_every``: ``lost_frames`` (how
    long a lost track is kept), ``confirm_frames`` (how long a new one is seen before its id)."""

    kind: TrackerKind = DEFAULT_TRACKER
    activation: Annotated[float, Field(ge=0.0, le=1.0), JSON_NUMBER] | None = None
    high: Annotated[float, Field(ge=0.0, le=1.0), JSON_NUMBER] | None = None
    lost_frames: Count = Field(default=30, ge=0)
    confirm_frames: Count = Field(default=3, ge=1)
    min_iou: Number = Field(default=0.1, gt=0.0, le=1.0)
    # boxes of another class overlapping a higher-scoring box at least this much are one
    # object the model named twice: only that box is tracked, the other keeps no track id
    # (0: every box is tracked; 0.6 measured on the counting set, docs/BENCHMARKS.md)
    duplicate_iou: Number = Field(default=0.6, ge=0.0, le=1.0)
    # boxes no track took linked by constant motion: fast objects' tracks (analytics/fast.py)
    fast_objects: StrictBool = True
    # a new track takes the id of one lost at most this many frames (30 fps) before, near
    # where its motion has taken it (analytics/stitch.py; 60 measured); 0: off
    stitch_frames: Count = Field(default=60, ge=0, le=900)


class LineConfig(Checked):
    """A counting line from (x1, y1) to (x2, y2). ``in`` is a crossing from the right-hand side
    of the line walked from its first point to its second (as drawn, y down) to its left-hand
    side; ``out`` the other way. ``hysteresis``: how far past the line (a fraction of the box's
    height) the anchor must get before a crossing counts, so a box jittering on it counts
    nothing; ``jitter_band``: the band is at least this many times the track's own jitter,
    how far across the line its anchor lands from where its motion put it (a wobbling box
    must get past its wobble). Rules against the tracker's mistakes
    (pipelines/analytics/lines.py, measured in docs/BENCHMARKS.md): ``smoothing`` (the
    weight of a track's past anchor in the one the line judges; 0: the box's own),
    ``settle_frames`` (observations in a row beyond the band before a side counts as
    reached), ``relink_frames`` (a track born within a box height of where the motion of
    one lost at most this many frames before has taken it takes over its side; 0: off),
    ``once_per_track`` (a track counts each direction at most once), ``max_jump`` (a track
    whose anchor lands farther than this many box heights from where its motion put it is
    taken for another object, an identity switch, and starts afresh where it is; 0: off)."""

    name: str = Field(pattern=NAME_PATTERN)
    points: tuple[Number, Number, Number, Number]
    anchor: Anchor = "bottom_center"
    hysteresis: Number = Field(default=0.1, ge=0.0, le=2.0)
    # 2 and 30: measured on the counting set (docs/BENCHMARKS.md); 0 turns each off
    jitter_band: Number = Field(default=2.0, ge=0.0, le=10.0)
    relink_frames: Count = Field(default=30, ge=0, le=300)
    smoothing: Number = Field(default=0.0, ge=0.0, lt=1.0)
    settle_frames: Count = Field(default=1, ge=1, le=30)
    once_per_track: StrictBool = False
    max_jump: Number = Field(default=0.0, ge=0.0, le=10.0)
    classes: list[str] | None = None  # labels counted; None: all
    # counted only where the stream's classifiers answered, for each head, one of its labels
    attributes: dict[str, list[str]] | None = None

    def check(self) -> None:
        """ValueError for a line of no length (checked with the stream's analytics, so an
        API body with one is a 400 with this reason, not a schema error)."""
        x1, y1, x2, y2 = self.points
        if x1 == x2 and y1 == y2:
            raise ValueError(f"line {self.name}: its two points are the same")


class ZoneConfig(Checked):
    """A polygon zone. A track enters once its anchor has been inside for ``enter_frames``
    frames in a row and leaves once it has been outside (or unseen) for ``exit_frames``: a
    track lost for fewer frames keeps its visit and its dwell time. ``loiter_s``: a visit that
    long is a ``loiter`` event; ``crowd``/``crowd_s``: ``crowd`` tracks or more inside for
    ``crowd_s`` seconds begins an overcrowding, which ends when fewer are inside."""

    name: str = Field(pattern=NAME_PATTERN)
    polygon: list[tuple[Number, Number]] = Field(min_length=3, max_length=256)
    anchor: Anchor = "bottom_center"
    enter_frames: Count = Field(default=3, ge=1)
    exit_frames: Count = Field(default=15, ge=1)
    loiter_s: Annotated[float, Field(gt=0), JSON_NUMBER] | None = None
    crowd: Annotated[int, Field(ge=1), JSON_NUMBER] | None = None
    crowd_s: Number = Field(default=0.0, ge=0)
    classes: list[str] | None = None
    attributes: dict[str, list[str]] | None = None  # as a line's


class MaskConfig(Checked):
    """A motion mask: a polygon whose movement (a clock overlay, trees in the wind) is not to
    wake the detector (``motion``); drawn in the camera UI. It hides nothing from the model:
    a frame the detector sees, it sees whole."""

    name: str = Field(pattern=NAME_PATTERN)
    polygon: list[tuple[Number, Number]] = Field(min_length=3, max_length=256)


def check_points_inside(shapes: list[tuple[str, str, list[tuple[float, float]]]],
                        size: tuple[int, int], stream: str) -> None:
    """ConfigError naming the first shape (kind, name, points) with a point outside a
    ``size`` (width, height) picture."""
    width, height = size
    for kind, name, points in shapes:
        for x, y in points:
            if not (0 <= x <= width and 0 <= y <= height):
                raise ConfigError(f"stream {stream}: {kind} {name!r} has the point "
                                  f"({x:g}, {y:g}), outside its {width}x{height} picture")


def mask_shapes(masks: list[MaskConfig]) -> list[tuple[str, str, list[tuple[float, float]]]]:
    return [("mask", mask.name, list(mask.polygon)) for mask in masks]


class AnalyticsConfig(Checked):
    """A stream's analytics: lines and zones need a tracker (counting is per track)."""

    track: TrackerSettings | None = None
    lines: list[LineConfig] = Field(default_factory=list, max_length=64)
    zones: list[ZoneConfig] = Field(default_factory=list, max_length=64)
    # the model sees one frame in N, or about F a second; the tracker gives the others' boxes
    detect_every: Count = Field(default=1, ge=1, le=30)
    detect_fps: Annotated[float, Field(gt=0, le=240), JSON_NUMBER] | None = None
    # a frame with no motion outside ``masks`` and no object seen lately skips the model,
    # except one every ``motion_heartbeat_s`` (objects that appeared without moving)
    motion: MotionMode = "off"
    motion_heartbeat_s: Number = Field(default=10.0, gt=0, le=3600)
    masks: list[MaskConfig] = Field(default_factory=list, max_length=64)
    # second models on the tracks' crops (pipelines/classify)
    classifiers: list[ClassifierConfig] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.lines or self.zones or self.classifiers) and self.track is None:
            raise ValueError("lines, zones and classifiers work on tracks: they need a "
                             "tracker (track)")
        if self.thins and self.track is None:
            raise ValueError("detect_every > 1, detect_fps or motion leaves frames to the "
                             "tracker: it needs one (track)")
        if self.detect_every > 1 and self.detect_fps is not None:
            raise ValueError("detect_every or detect_fps: one of them, not both")
        for line in self.lines:
            line.check()
        names = [line.name for line in self.lines] + [zone.name for zone in self.zones]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"line and zone names must be unique: {', '.join(twice)}")
        return self

    @property
    def active(self) -> bool:
        return self.track is not None

    @property
    def thins(self) -> bool:
        """Whether the model skips some frames (``detect_every``, ``detect_fps``, ``motion``)."""
        return self.detect_every > 1 or self.detect_fps is not None or self.motion != "off"

    def check_inside(self, size: tuple[int, int], stream: str) -> None:
        """ConfigError naming the first line or zone with a point outside a ``size`` (width,
        height) picture: it would count nothing, and say nothing about it."""
        shapes: list[tuple[str, str, list[tuple[float, float]]]] = [
            ("line", line.name, [(line.points[0], line.points[1]),
                                 (line.points[2], line.points[3])])
            for line in self.lines]
        shapes += [("zone", zone.name, list(zone.polygon)) for zone in self.zones]
        check_points_inside(shapes + mask_shapes(self.masks), size, stream)


def from_flags(track: str | None, lines: list[str], zones: list[str],
               detect_every: int = 1, detect_fps: float | None = None, *,
               motion: str = "off", heartbeat_s: float = 10.0,
               masks: list[str] | None = None,
               classify: list[str] | None = None) -> AnalyticsConfig | None:
    """The CLI's ``--track``, ``--line``, ``--zone``, ``--detect-every``, ``--detect-fps``,
    ``--motion``, ``--motion-heartbeat``, ``--mask``, ``--classify`` -> AnalyticsConfig (None:
    none given). Lines, zones, classifiers, a detection interval or rate, or motion gating
    without ``--track`` track with DEFAULT_TRACKER (BoT-SORT)."""
    masks, classify = masks or [], classify or []
    if motion not in get_args(MotionMode):
        raise ConfigError(f"--motion {motion!r}: expected one of "
                          f"{', '.join(get_args(MotionMode))}")
    if masks and motion == "off":
        raise ConfigError("--mask hides movement from motion gating: it needs --motion")
    if (track is None and not lines and not zones and not classify and detect_every == 1
            and detect_fps is None and motion == "off"):
        return None
    if track is not None and track not in get_args(TrackerKind):
        raise ConfigError(f"--track {track!r}: expected one of {', '.join(get_args(TrackerKind))}")
    try:
        return AnalyticsConfig(track=TrackerSettings(kind=track or DEFAULT_TRACKER),  # type: ignore[arg-type]
                               lines=[parse_line(t) for t in lines],
                               zones=[parse_zone(t) for t in zones], detect_every=detect_every,
                               detect_fps=detect_fps, motion=motion,  # type: ignore[arg-type]
                               motion_heartbeat_s=heartbeat_s,
                               masks=[parse_mask(t) for t in masks],
                               classifiers=[parse_classify(t) for t in classify])
    except ValueError as e:
        raise ConfigError(_first(e)) from None


_NAMED = re.compile(r"^\s*([^=\s]+)\s*=\s*(.+)$")


def parse_line(text: str) -> LineConfig:
    """``NAME=x1,y1,x2,y2[;HEAD=LABEL,...]`` (the ``--line`` flag; after ``;``, what a
    classifier must have said of a track for it to count) -> LineConfig, or ConfigError."""
    text, attributes = _said(text, "--line")
    name, values = _named_numbers(text, "--line", "NAME=x1,y1,x2,y2")
    if len(values) != 4:
        raise ConfigError(f"--line {text!r}: needs 4 numbers (NAME=x1,y1,x2,y2), got "
                          f"{len(values)}")
    try:
        line = LineConfig(name=name, points=(values[0], values[1], values[2], values[3]),
                          attributes=attributes)
        line.check()
        return line
    except ValueError as e:
        raise ConfigError(f"--line {text!r}: {_first(e)}") from None


def parse_zone(text: str) -> ZoneConfig:
    """``NAME=x1,y1,x2,y2,x3,y3[,...][;HEAD=LABEL,...]`` (the ``--zone`` flag) -> ZoneConfig."""
    text, attributes = _said(text, "--zone")
    zone = _polygon(ZoneConfig, text, "--zone")
    return zone.model_copy(update={"attributes": attributes}) if attributes else zone


def _said(text: str, flag: str) -> tuple[str, dict[str, list[str]] | None]:
    """A shape flag's text before ``;``, and the ``HEAD=LABEL,...`` filters after it."""
    shape, *filters = text.split(";")
    said: dict[str, list[str]] = {}
    for item in filters:
        head, sep, labels = item.partition("=")
        if not sep or not head.strip() or not labels.strip():
            raise ConfigError(f"{flag} {text!r}: after ';' expected HEAD=LABEL[,LABEL...], "
                              f"got {item!r}")
        said[head.strip()] = [x.strip() for x in labels.split(",") if x.strip()]
    return shape, said or None


def parse_mask(text: str) -> MaskConfig:
    """``NAME=x1,y1,x2,y2,x3,y3[,...]`` (the ``--mask`` flag) -> MaskConfig."""
    return _polygon(MaskConfig, text, "--mask")


Shape = TypeVar("Shape", ZoneConfig, MaskConfig)


def _polygon(kind: type[Shape], text: str, flag: str) -> Shape:
    """A named polygon flag as ``kind``, or ConfigError saying why not."""
    name, values = _named_numbers(text, flag, "NAME=x1,y1,x2,y2,x3,y3[,...]")
    if len(values) < 6 or len(values) % 2:
        raise ConfigError(f"{flag} {text!r}: needs an even count of at least 6 numbers "
                          f"(3 or more x,y points), got {len(values)}")
    try:
        return kind(name=name, polygon=[(values[i], values[i + 1])
                                        for i in range(0, len(values), 2)])
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: {_first(e)}") from None


def _named_numbers(text: str, flag: str, form: str) -> tuple[str, list[float]]:
    match = _NAMED.match(text)
    if match is None:
        raise ConfigError(f"{flag} {text!r}: expected {form}")
    try:
        values = [float(v) for v in match.group(2).split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: the coordinates must be numbers ({form})") from None
    return match.group(1), values


def _first(error: ValueError) -> str:
    return describe_error(error) if isinstance(error, ValidationError) else str(error)
