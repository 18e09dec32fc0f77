"""The streams a service remembers across restarts, and the rule of precedence (the same for
one process and for a cluster's controller).

A stream added over the API is remembered as it runs (``api``), its later changes with it,
and started again at the next start. A stream the config file declares starts from the file;
a change made to it over the API (its lines, zones, tracker) is remembered (``config``) and
applied again after it starts: what a user last configured wins over the file for that
stream. The file decides which of its streams exist: one removed over the API comes back at
the next start unless it is removed from the file too. A remembered stream whose id the file
now declares gives way to the file's, and is forgotten, said in the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from app.service.config import AnalyticsUpdate, StreamConfig
from app.service.store import ServiceStore
from pipelines.sources.url import redact

log = logging.getLogger(__name__)


@dataclass
class Restore:
    """What a host does at start, after the config's streams: ``changes`` to apply to those
    that run, then ``additions`` to add."""

    changes: list[tuple[str, AnalyticsUpdate]] = field(default_factory=list)
    additions: list[StreamConfig] = field(default_factory=list)


class RememberedStreams:
    def __init__(self, store: ServiceStore) -> None:
        self.store = store
        self.declared: set[str] = set()  # the config's streams, as they started

    def restore(self, running: Collection[str]) -> Restore:
        """What to restore, the config's streams running under ``running``."""
        self.declared = set(running)
        plan = Restore()
        for cfg, origin in self.store.streams():
            assert cfg.id is not None
            if origin == "config":
                if cfg.id in running:
                    plan.changes.append((cfg.id, AnalyticsUpdate(
                        track=cfg.track, lines=cfg.lines, zones=cfg.zones, masks=cfg.masks)))
            elif cfg.id in running:
                log.warning("stream %s (%s), added over the API before, is not restored: the "
                            "config declares a stream with that id now", cfg.id,
                            redact(cfg.url))
                self.store.forget_stream(cfg.id)
            else:
                plan.additions.append(cfg)
        return plan

    def added(self, cfg: StreamConfig) -> None:
        self.store.save_stream(cfg, "api", time.time())

    def changed(self, cfg: StreamConfig) -> None:
        """A stream's analytics changed over the API: remembered as it now runs."""
        assert cfg.id is not None
        known = self.store.stream(cfg.id)
        origin = known[1] if known is not None else \
            ("config" if cfg.id in self.declared else "api")
        self.store.save_stream(cfg, origin, time.time())

    def removed(self, stream_id: str) -> None:
        self.store.forget_stream(stream_id)

    def not_restored(self, cfg: StreamConfig, why: str) -> None:
        """A remembered stream that cannot start again (its file gone, its media root
        no longer configured): forgotten, and said, once."""
        assert cfg.id is not None
        log.error("stream %s (%s), remembered from before, not restored and forgotten: %s",
                  cfg.id, redact(cfg.url), why)
        self.store.forget_stream(cfg.id)
