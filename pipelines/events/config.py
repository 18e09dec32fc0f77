"""What a stream's events are made of, as checked data: which objects get a lifecycle, how
often an object's update is said, when it is stationary or gone, and its media (the best
snapshot, a clip of the encoded packets). The CLI's ``--clips``/``--snapshots`` flags and the
service's ``events:`` block build these.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from models.checked import Checked


class ObjectSettings(Checked):
    """An object's lifecycle: ``new`` once its track is confirmed, ``update`` at most every
    ``update_s`` and only when it changed (moved by ``move`` of its size, another class, or
    became stationary or moved again), ``end`` once it has not been seen for ``end_s``
    (None: the tracker's ``lost_frames`` at the stream's rate). An object whose box stays
    within ``move`` of where it was for ``stationary_s`` is stationary: said once, then
    silent until it moves."""

    classes: list[str] | None = None  # labels with a lifecycle; None: every class
    update_s: float = Field(default=1.0, ge=0.0)
    move: float = Field(default=0.1, gt=0.0, le=10.0)
    stationary_s: float = Field(default=30.0, gt=0.0)
    end_s: float | None = Field(default=None, gt=0.0)


class ClipSettings(Checked):
    """Clips of an object, from ``pre_s`` before it appeared to ``post_s`` after it was last
    seen, remuxed from the stream's last ``buffer_s`` (at most ``buffer_mb``) of encoded
    packets."""

    pre_s: float = Field(default=5.0, ge=0.0, le=600.0)
    post_s: float = Field(default=5.0, ge=0.0, le=600.0)
    buffer_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    buffer_mb: float = Field(default=64.0, gt=0.0)

    @model_validator(mode="after")
    def _fits(self) -> ClipSettings:
        if self.pre_s > self.buffer_s:
            raise ValueError(f"clips: pre_s {self.pre_s} is longer than the buffer "
                             f"(buffer_s {self.buffer_s})")
        return self


class EventSettings(Checked):
    """A stream's events: the objects' lifecycles, the best snapshot of each (at its end),
    and clips (None: none). Snapshots and clips are kept ``retain_hours`` and ``retain_mb``
    in all, the oldest removed first."""

    objects: ObjectSettings = Field(default_factory=ObjectSettings)
    snapshots: bool = True
    clips: ClipSettings | None = None
    retain_hours: float = Field(default=168.0, gt=0.0)
    retain_mb: float = Field(default=2048.0, gt=0.0)
