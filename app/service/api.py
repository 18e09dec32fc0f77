"""The HTTP face of the service (FastAPI) around a ``StreamHost``: the routes
(``app.service.routes``), the dashboard's files, and what every request meets first.

With ``VIDPIPE_API_TOKEN`` set, every route that returns data or changes state needs
``Authorization: Bearer <token>``: the streams, their snapshots and results, the stats, the
event feed and ``/metrics`` (one port, one credential: Prometheus scrapes with it). Only
``/healthz``, ``/readyz`` and the dashboard's static files are open.
Errors are JSON ``{"detail": ...}`` with the status a client can act on, one per error class
(``ERROR_STATUS``): 400 a source the service will not open (or analytics that do not fit
together), 401 no or a wrong token, 404 no such stream, 409 an id in use (or what a running
service cannot change), 422 a malformed body (the field is named, the submitted value is not
echoed: it may hold a password), 413 a body over ``max_body_kb`` (refused before it is read),
429 the stream limit, 503 no worker to run a stream; a Host header outside ``allowed_hosts``
gets a plain 400 before any route runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import BaseRoute, Match, Route

from app import __version__
from app.errors import (
    CandidateConflict,
    NothingToReplay,
    OverCapacity,
    SourceRejected,
    StreamExists,
    StreamLimit,
    TrackerFixed,
    UnknownDetector,
    UnknownStream,
    WorkersFixed,
    WorkerUnavailable,
)
from app.service.body_limit import BodyLimit
from app.service.config import ServiceConfig, answered_hosts
from app.service.host import LocalHost, open_host
from app.service.reload import on_hangup
from app.service.routes import detectors, docs, events, streams, system
from pipelines.errors import VidpipeError

DASHBOARD = Path(__file__).resolve().parent / "dashboard"

# Each of vidpipe's errors as the status a client can act on: the most specific class of an
# error that is here decides; any other of vidpipe's errors is bad input (400).
ERROR_STATUS: dict[type[VidpipeError], int] = {
    UnknownStream: 404, UnknownDetector: 404, CandidateConflict: 409,
    SourceRejected: 400, StreamExists: 409, TrackerFixed: 409,
    WorkersFixed: 409, OverCapacity: 409, NothingToReplay: 409, StreamLimit: 429,
    WorkerUnavailable: 503,
    VidpipeError: 400,
}


def create_app(config: ServiceConfig, registry: CollectorRegistry | None = None,
               config_path: Path | None = None,
               overrides: dict[str, Any] | None = None) -> FastAPI:
    """The API over the service of this process, or, with ``workers`` or ``ray_address``
    set, over streams spread across Ray workers (``app.service.cluster``); with
    ``config_path``, SIGHUP reads that file again (``app.service.reload``; ``overrides``:
    the keys the command line set over it)."""
    host = open_host(config, registry or CollectorRegistry())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await host.start()  # the streams of the config start, and drain at the end
        if config_path is not None:
            on_hangup(host, config_path, overrides)
        try:
            yield
        finally:
            await host.aclose()

    app = FastAPI(title="vidpipe", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None,  # app.service.routes.docs: the same, from local assets
                  description="Streams, per-stage latency and detections of a vidpipe service.")
    app.state.host = host
    app.state.token = config.api_token
    if isinstance(host, LocalHost):
        app.state.service = host.service
    for router in (streams.router, events.router, system.router, detectors.router,
                   docs.router):
        app.include_router(router)
    docs.mount_assets(app)
    app.add_exception_handler(VidpipeError, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    if DASHBOARD.is_dir():
        app.mount("/", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    app.add_middleware(BodyLimit, max_bytes=int(config.max_body_kb * 1024))
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=answered_hosts(config),
                       www_redirect=False)  # added last: the first to see a request
    return app


def status_of(error: VidpipeError) -> int:
    """The status ``ERROR_STATUS`` gives ``error``'s most specific class."""
    return next(ERROR_STATUS[cls] for cls in type(error).__mro__ if cls in ERROR_STATUS)


async def _refused(request: Request, error: VidpipeError) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=status_of(error))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI's answer, but a 405 names in ``Allow`` the methods the API's routes take for
    the path (a method none takes falls through to the dashboard's static files, whose 405
    says GET, HEAD)."""
    if exc.status_code == 405:
        methods = {m for route in _routes(request.app.router.routes)
                   if route.matches(request.scope)[0] is not Match.NONE
                   for m in route.methods or ()}
        if methods:  # else a dashboard file's: StaticFiles' own Allow stands
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(methods))}
    return await http_exception_handler(request, exc)


def _routes(routes: Iterable[BaseRoute]) -> Iterator[Route]:
    """The API's routes, those of the routers it includes among them (FastAPI keeps an
    included router as one route of its own, its ``original_router``)."""
    for route in routes:
        if isinstance(route, Route):
            yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)
