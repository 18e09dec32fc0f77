"""What the service remembers across restarts, in one SQLite file (``<state_dir>/vidpipe.db``):
the streams added or changed over the API, the models promoted in another's place, and the
index of the events (the recent list, the review page's filters).

Streams: each row is a stream's ``StreamConfig`` as it now is (its URL with the password:
the file is the user's only, 0600, like the config file that may hold the same), and where it
came from: ``api`` (added over the API: restored at start) or ``config`` (declared in the
config file, changed over the API: the change is applied again at start). Events: every event
a tracked stream publishes, its body and the columns the API filters on; the media they name
stay in ``media_dir``, pruned by the same retention (``prune_events``).

Without a ``state_dir`` the same tables live in memory, for the life of the process: one code
path either way. Calls come from the event loop and the event sinks' threads: one connection,
one lock.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from app.service.config import StreamConfig

log = logging.getLogger(__name__)

Origin = Literal["api", "config"]
EventType = Literal["new", "update", "end", "line_cross", "zone_enter", "zone_exit", "loiter",
                    "crowd_begin", "crowd_end"]
INDEX_MAX = 200_000  # events indexed at most (each a row of about 1 kB)
INDEX_MAX_IN_MEMORY = 10_000  # without a state_dir
CURSOR = re.compile(r"^\d+(\.\d+)?:\d+$")  # a page's last event: "<time>:<seq>"
SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id TEXT PRIMARY KEY, origin TEXT NOT NULL, config TEXT NOT NULL,
    added_at REAL NOT NULL, changed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, stream TEXT NOT NULL,
    type TEXT NOT NULL, at REAL NOT NULL, class TEXT, line TEXT, zone TEXT,
    body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS promotions (
    model TEXT PRIMARY KEY, promoted TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS events_at ON events (at);
CREATE INDEX IF NOT EXISTS events_stream_at ON events (stream, at);
"""


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Which events to list: of a stream, class, line or zone, in [since, until) (Unix
    time), newest first, ``limit`` of them from after ``before`` (the previous page's last
    event's (time, seq): a page is the same whatever arrives meanwhile)."""

    limit: int = 50
    stream: str | None = None
    label: str | None = None
    line: str | None = None
    zone: str | None = None
    types: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    before: tuple[float, int] | None = None


def cursor(at: float, seq: int) -> str:
    return f"{at!r}:{seq}"


def parse_cursor(text: str) -> tuple[float, int]:
    at, seq = text.split(":")
    return float(at), int(seq)


class ServiceStore:
    def __init__(self, path: Path | None) -> None:
        """``path``: the database file (made 0600 with its folder); None: in memory."""
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.touch(mode=0o600)
            os.chmod(path, 0o600)
        self._db = sqlite3.connect(":memory:" if path is None else str(path),
                                   check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._locked() as db:
            if path is not None:
                db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    @property
    def index_max(self) -> int:
        """The most events the index keeps (the oldest beyond go: ``prune_events``)."""
        return INDEX_MAX if self.path is not None else INDEX_MAX_IN_MEMORY

    @classmethod
    def for_state_dir(cls, state_dir: Path | None) -> ServiceStore:
        return cls(None if state_dir is None else state_dir / "vidpipe.db")

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    # -- promotions: a model file replaced by another for every stream that names it -------
    def promote(self, model: str, promoted: str, now: float) -> None:
        """From now on, and after a restart, ``promoted`` runs where ``model`` is named (a
        model promoted in the place of one that was itself promoted replaces it too)."""
        with self._locked() as db:
            db.execute("UPDATE promotions SET promoted = ?, at = ? WHERE promoted = ?",
                       (promoted, now, model))
            db.execute("INSERT INTO promotions (model, promoted, at) VALUES (?, ?, ?) "
                       "ON CONFLICT (model) DO UPDATE SET promoted = excluded.promoted, "
                       "at = excluded.at", (model, promoted, now))

    def promoted(self, model: str) -> str | None:
        """The model file that runs where ``model`` is named, if one was promoted."""
        with self._locked() as db:
            row = db.execute("SELECT promoted FROM promotions WHERE model = ?",
                             (model,)).fetchone()
        return None if row is None else str(row[0])

    # -- streams ---------------------------------------------------------------------------
    def save_stream(self, cfg: StreamConfig, origin: Origin, now: float) -> None:
        """Remember ``cfg`` (its ``id`` set) as the stream now is."""
        assert cfg.id is not None, "a stream is saved under the id it runs with"
        body = json.dumps(cfg.model_dump(mode="json", exclude_unset=True))  # what was said
        with self._locked() as db:
            db.execute("INSERT INTO streams (id, origin, config, added_at, changed_at) "
                       "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                       "origin = excluded.origin, config = excluded.config, "
                       "changed_at = excluded.changed_at", (cfg.id, origin, body, now, now))

    def forget_stream(self, stream_id: str) -> None:
        with self._locked() as db:
            db.execute("DELETE FROM streams WHERE id = ?", (stream_id,))

    def stream(self, stream_id: str) -> tuple[StreamConfig, Origin] | None:
        with self._locked() as db:
            row = db.execute("SELECT config, origin FROM streams WHERE id = ?",
                             (stream_id,)).fetchone()
        return None if row is None else (StreamConfig.model_validate_json(row[0]), row[1])

    def streams(self) -> list[tuple[StreamConfig, Origin]]:
        """Every remembered stream, in the order it was first added. A row that no longer
        reads as a StreamConfig (an older version's) is skipped, and said."""
        with self._locked() as db:
            rows = db.execute("SELECT id, config, origin FROM streams ORDER BY added_at, id"
                              ).fetchall()
        found = []
        for stream_id, body, origin in rows:
            try:
                found.append((StreamConfig.model_validate_json(body), origin))
            except ValueError as e:
                log.error("stream %s remembered in %s does not read as a stream any more, "
                          "skipped: %s", stream_id, self.path, str(e).splitlines()[0])
        return found

    # -- events ----------------------------------------------------------------------------
    def add_event(self, event: dict[str, Any]) -> None:
        """Index an event (sent again: its newer body replaces the older)."""
        at = datetime.fromisoformat(event["time"]).timestamp()
        with self._locked() as db:
            db.execute("INSERT INTO events (id, stream, type, at, class, line, zone, body) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                       "stream = excluded.stream, type = excluded.type, at = excluded.at, "
                       "class = excluded.class, line = excluded.line, zone = excluded.zone, "
                       "body = excluded.body",
                       (event["id"], event["stream"], event["type"], at, event.get("class"),
                        event.get("line"), event.get("zone"), json.dumps(event)))

    def events(self, query: EventQuery) -> list[tuple[float, int, dict[str, Any]]]:
        """(time, seq, event) of the events ``query`` asks for, newest first."""
        where: list[str] = []
        args: list[str | float | int] = []
        for column, value in (("stream", query.stream), ("class", query.label),
                              ("line", query.line), ("zone", query.zone)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if query.types:
            where.append(f"type IN ({', '.join('?' * len(query.types))})")
            args.extend(query.types)
        for clause, bound in (("at >= ?", query.since), ("at < ?", query.until)):
            if bound is not None:
                where.append(clause)
                args.append(bound)
        if query.before is not None:
            where.append("(at < ? OR (at = ? AND seq < ?))")
            args.extend((query.before[0], query.before[0], query.before[1]))
        sql = "SELECT at, seq, body FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY at DESC, seq DESC LIMIT ?"
        with self._locked() as db:
            rows = db.execute(sql, (*args, query.limit)).fetchall()
        return [(at, seq, json.loads(body)) for at, seq, body in rows]

    def count_events(self) -> int:
        with self._locked() as db:
            return int(db.execute("SELECT count(*) FROM events").fetchone()[0])

    def prune_events(self, older_than: float, keep: int) -> int:
        """Forget events from before ``older_than`` (Unix time), then the oldest beyond the
        newest ``keep``; how many."""
        with self._locked() as db:
            removed = db.execute("DELETE FROM events WHERE at < ?", (older_than,)).rowcount
            removed += db.execute(
                "DELETE FROM events WHERE seq IN (SELECT seq FROM events ORDER BY at DESC, "
                "seq DESC LIMIT -1 OFFSET ?)", (keep,)).rowcount
        return removed

    def close(self) -> None:
        with self._locked() as db:
            db.close()
