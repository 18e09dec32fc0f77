"""Where a run's or the service's events go (the service's ``events:`` block; ``vidpipe
run``'s ``--events-*`` flags), and what they are made of (``EventSettings``: objects,
snapshots, clips)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field

from pipelines.events.config import EventSettings


class EventsConfig(EventSettings):
    """``mqtt``: ``mqtt[s]://[user:password@]host[:port][/prefix]``; ``webhooks``: http(s)
    URLs, signed with ``VIDPIPE_WEBHOOK_SECRET`` (read from the environment only);
    ``media_dir``: the objects' snapshots and clips; ``dead_letter``: the events a sink gave
    up on (default ``<media_dir>/dead-letter.jsonl``); ``queue``: events each network sink
    holds while its peer is slow or away."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mqtt: str | None = Field(default=None, max_length=2048)
    webhooks: list[str] = Field(default_factory=list, max_length=16)
    media_dir: Path = Path("events")
    dead_letter: Path | None = None
    queue: int = Field(default=10_000, ge=1, le=1_000_000)
    retries: int = Field(default=5, ge=0, le=20)

    @property
    def dead_letter_path(self) -> Path:
        return self.dead_letter or self.media_dir / "dead-letter.jsonl"
