"""``vidpipe serve``: the service (REST API, dashboard, Prometheus) on one process or a Ray
cluster. The config is read and checked here; the service itself is imported when it starts."""

from __future__ import annotations

import faulthandler
import importlib.util
import logging
from pathlib import Path
from typing import Annotated

import typer

from app.cli.console import configure_logging, fail, failing_cleanly
from app.cli.options import LogLevelOpt

log = logging.getLogger("vidpipe")


def serve(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="service.yaml (streams, model, media_roots, limits); every key "
        "can also come from VIDPIPE_<KEY>.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on "
                                             "(default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default 8080).")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, max=256, help="Run the streams on N worker processes of a local "
        "Ray cluster (pip install 'vidpipe[ray]'); a worker that dies has its streams moved "
        "to the others, and is replaced.")] = None,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", metavar="ADDR", help="Join the Ray cluster at ADDR (ray start "
        "--head ...) and run the streams on its machines: one worker per GPU, or per "
        "cores_per_worker CPUs.")] = None,
    log_level: LogLevelOpt = "info",
) -> None:
    """Run the service: REST API for streams, live dashboard at /, Prometheus at /metrics.

    Streams are added and removed at runtime (POST/DELETE /api/streams); those in the config
    start at boot. Set VIDPIPE_API_TOKEN (or VIDPIPE_API_TOKEN_FILE, a file holding it) to
    require a bearer token on every data route. SIGTERM drains the streams and exits;
    SIGHUP reads the config file again: its streams (added, removed, lines, zones, masks,
    or restarted on new settings) and max_streams change live, every other key is logged as
    needing a restart (docs/OPERATIONS.md, "Change settings while it runs")."""
    from app.malloc import limit_malloc_arenas

    limit_malloc_arenas()  # before any stream's threads: see app/malloc.py
    faulthandler.enable()  # a native crash (FFmpeg, a runtime) logs each thread's stack
    configure_logging(log_level)
    with failing_cleanly():
        from app.service.config import load_config

        cfg = load_config(config)
        flags = {k: v for k, v in (("host", host), ("port", port), ("workers", workers),
                                   ("ray_address", ray_address)) if v is not None}
        cfg = cfg.model_copy(update=flags)
        from app.outputs.event_outputs import check_event_outputs

        # before the server starts: a refusal in its start-up would be a traceback and exit 3
        check_event_outputs(cfg.events, cfg.allowed_networks, cfg.allow_idn_hosts)
    if (cfg.workers or cfg.ray_address) and importlib.util.find_spec("ray") is None:
        fail("--workers and --ray-address run the streams on Ray, which is not installed: "
             "pip install 'vidpipe[ray]'")
    import uvicorn

    from app.service.api import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(cfg, config_path=config, overrides=flags),
                                           host=cfg.host, port=cfg.port,
                                           log_config=None, timeout_graceful_shutdown=8))
    log.info("dashboard on http://%s:%d/  (API docs at /docs)", cfg.host, cfg.port)
    server.run()
