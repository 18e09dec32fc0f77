"""The config file read again while the service runs (SIGHUP): what can change live does,
the rest is said to need a restart, with its reason, and keeps its running value.

Live: the file's streams — one added to the file starts, one removed from it stops, and one
changed has its lines, zones and masks replaced as ``PUT /api/streams/{id}/analytics``
would (a line kept as it was keeps its counts), or, where anything else of it changed
(url, model, tracker, ...), is restarted on its new settings; a stream's remembered API
changes give way to the file, which was said last — and ``max_streams``. Every other key
needs a restart: ``RESTART`` says why. Each change is logged with what it changed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.service.config import AnalyticsUpdate, ServiceConfig, StreamConfig, load_config
from app.service.host import LocalHost
from pipelines.errors import VidpipeError

log = logging.getLogger(__name__)

LIVE = {"streams", "max_streams"}
_ANALYTICS = {"lines", "zones", "masks"}  # a stream's keys applied without restarting it
_WHY = {
    "the server listens and checks requests with it": (
        "host", "port", "allowed_hosts", "max_body_kb"),
    "the running streams were admitted and connect under it (a stricter policy must not "
    "leave them running)": (
        "media_roots", "model_roots", "allowed_networks", "allow_idn_hosts", "rtsp_redirects"),
    "the shared detectors are built with it": (
        "model", "device", "batch_size", "batch_timeout_ms", "latency_budget_ms",
        "infer_threads", "decode_threads", "decode", "preprocess", "runtime", "engine",
        "precision", "cuda_graphs", "allow_cpu_fallback", "max_lag_ms", "plan_cache"),
    "each camera's reader took it when it started": (
        "stall_timeout_s", "camera_down_after_s", "snapshot_interval_s"),
    "files, folders and connections opened at start use it": (
        "results_dir", "results_rotate_mb", "results_retain_hours", "results_retain_mb",
        "every_line", "state_dir", "events"),
    "the workers were started with it": (
        "workers", "ray_address", "cores_per_worker", "heartbeat_s"),
}
RESTART = {key: why for why, keys in _WHY.items() for key in keys}


@dataclass
class Reloaded:
    applied: list[str] = field(default_factory=list)  # what changed live, in words
    restart: dict[str, str] = field(default_factory=dict)  # key -> why it needs a restart
    failed: list[str] = field(default_factory=list)  # a stream's change that was refused


async def reload(host: LocalHost, path: Path,
                 overrides: dict[str, Any] | None = None) -> Reloaded:
    """Read ``path`` again and apply what can change live (see the module's doc);
    ``overrides``: the keys the command line set, which the file does not change."""
    done = Reloaded()
    running = host.service.config
    config = load_config(path).model_copy(update=overrides or {})
    for key in ServiceConfig.model_fields:
        if key in LIVE or key == "api_token" or getattr(config, key) == getattr(running, key):
            continue
        done.restart[key] = RESTART.get(key, "read once at start")
        log.warning("config %s: %s changed; it needs a restart (%s): the running value stays",
                    path, key, done.restart[key])
    if config.max_streams != running.max_streams:
        done.applied.append(f"max_streams {running.max_streams} -> {config.max_streams}")
    await _streams(host, running.streams, config.streams, done)
    host.service.config = running.model_copy(update={"streams": config.streams,
                                                     "max_streams": config.max_streams})
    for change in done.applied:
        log.info("config %s: %s", path, change)
    return done


async def _streams(host: LocalHost, before: list[StreamConfig], after: list[StreamConfig],
                   done: Reloaded) -> None:
    if [s for s in before if s.id is None] != [s for s in after if s.id is None]:
        done.restart["streams"] = "a stream without an id cannot be told from another: " \
            "give each stream of the file an id to change it live"
        log.warning("config: %s", done.restart["streams"])
    old = {s.id: s for s in before if s.id is not None}
    new = {s.id: s for s in after if s.id is not None}
    declared = host.remembered.declared
    for sid in old.keys() - new.keys():
        if sid in host.service.streams:
            await _refused(done, sid, host.service.remove_stream(sid))
            done.applied.append(f"stream {sid} removed (gone from the file)")
        declared.discard(sid)
        host.remembered.removed(sid)
    for sid, cfg in new.items():
        previous = old.get(sid)
        if previous == cfg and sid in host.service.streams:
            continue
        changed = _changed(previous, cfg)
        host.remembered.removed(sid)  # the file was said last: its version holds
        if previous is not None and sid in host.service.streams and changed <= _ANALYTICS:
            update = AnalyticsUpdate(lines=cfg.lines, zones=cfg.zones, masks=cfg.masks)
            await _refused(done, sid, _set(host, sid, update))
            done.applied.append(f"stream {sid}: {', '.join(sorted(changed))} applied")
            continue
        if sid in host.service.streams:
            await _refused(done, sid, host.service.remove_stream(sid))
        declared.add(sid)
        if await _refused(done, sid, host.service.add_stream(cfg)):
            done.applied.append(f"stream {sid} " + ("started" if previous is None else
                                "restarted for " + ", ".join(sorted(changed))))


def _changed(previous: StreamConfig | None, cfg: StreamConfig) -> set[str]:
    if previous is None:
        return set(StreamConfig.model_fields)
    return {k for k in StreamConfig.model_fields if getattr(previous, k) != getattr(cfg, k)}


async def _set(host: LocalHost, sid: str, update: AnalyticsUpdate) -> None:
    host.service.set_analytics(sid, update)


async def _refused(done: Reloaded, sid: str, step: Any) -> bool:
    """Await ``step``; a refusal (a stream the service will not run) is said, not raised."""
    try:
        await step
        return True
    except (VidpipeError, ValueError) as e:
        done.failed.append(f"stream {sid}: {e}")
        log.error("config: stream %s: %s", sid, e)
        return False


def on_hangup(host: Any, path: Path, overrides: dict[str, Any] | None = None) -> None:
    """SIGHUP reads ``path`` again (one reload at a time); a file that does not load is said
    and changes nothing. A service on Ray workers says it cannot."""
    loop = asyncio.get_running_loop()
    busy = asyncio.Lock()

    async def reread() -> None:
        if not isinstance(host, LocalHost):
            log.error("SIGHUP: reading the config again is not built for a service on Ray "
                      "workers: restart it")
            return
        async with busy:
            try:
                done = await reload(host, path, overrides)
            except VidpipeError as e:
                log.error("SIGHUP: config %s not applied: %s", path, e)
                return
            log.info("SIGHUP: config %s read again: %d change(s) applied, %d need a restart"
                     "%s", path, len(done.applied), len(done.restart),
                     f", {len(done.failed)} refused" if done.failed else "")

    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(reread()))

