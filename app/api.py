"""The HTTP face of the service (FastAPI): streams CRUD, stats, events, snapshots, metrics.

With ``VIDPIPE_API_TOKEN`` set, every route that returns data or changes state needs
``Authorization: Bearer <token>``: the streams, their snapshots and results, the stats, the
event feed and ``/metrics`` (one port, one credential: Prometheus scrapes with it). Only
``/healthz``, ``/readyz`` and the dashboard's static files are open.
Errors are JSON ``{"detail": ...}`` with the status a client can act on: 400 a source the
service will not open (or analytics that do not fit together), 401 no or a wrong token, 404
no such stream, 409 an id in use (or a running stream's tracker changed), 422 a malformed
body (the field is named, the submitted value is not echoed: it may hold a password), 413 a
body over ``max_body_kb`` (refused before it is read), 429 the stream limit; a Host header
outside ``allowed_hosts`` gets a plain 400 before any route runs.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi import Path as FastApiPath
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Match, Route

from app import __version__
from app.config import AnalyticsUpdate, ServiceConfig, StreamConfig, answered_hosts
from app.face import Engine, LocalEngine, ResultFeed
from app.limits import BodyLimit
from app.service import Service, StreamExists, StreamLimit, TrackerFixed
from app.service_events import RECENT
from app.streams import SourceRejected
from pipelines.errors import ConfigError, VidpipeError
from pipelines.events.media import EVENT_ID
from pipelines.metrics import PipelineMetrics

DASHBOARD = Path(__file__).resolve().parent / "dashboard"
KEEPALIVE_S = 15.0  # a comment on a quiet results feed, so proxies keep it open


def create_app(config: ServiceConfig, registry: CollectorRegistry | None = None) -> FastAPI:
    """The API over the service of this process, or, with ``workers`` or ``ray_address``
    set, over streams spread across Ray workers (``app/cluster``)."""
    engine: Engine
    if config.workers or config.ray_address:
        from app.cluster.controller import Cluster

        engine = Cluster(config, registry or CollectorRegistry())
    else:
        service = Service(config, PipelineMetrics(registry or CollectorRegistry()))
        engine = LocalEngine(service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()  # the streams of the config start, and drain at the end
        try:
            yield
        finally:
            await engine.aclose()

    app = FastAPI(title="vidpipe", version=__version__, lifespan=lifespan,
                  description="Streams, per-stage latency and detections of a vidpipe service.")
    app.state.engine = engine
    if isinstance(engine, LocalEngine):
        app.state.service = engine.service
    _routes(app, engine, _token_check(config.api_token))
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    if DASHBOARD.is_dir():
        app.mount("/", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    app.add_middleware(BodyLimit, max_bytes=int(config.max_body_kb * 1024))
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=answered_hosts(config),
                       www_redirect=False)  # added last: the first to see a request
    return app


def _token_check(token: str | None) -> Any:
    async def require_token(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "this route needs Authorization: Bearer <token>",
                                headers={"WWW-Authenticate": "Bearer"})

    return Depends(require_token)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI's answer, but a 405 names in ``Allow`` the methods the API's routes take for
    the path (a method none takes falls through to the dashboard's static files, whose 405
    says GET, HEAD)."""
    if exc.status_code == 405:
        methods = {m for route in request.app.router.routes if isinstance(route, Route)
                   and route.matches(request.scope)[0] is not Match.NONE
                   for m in route.methods or ()}
        if methods:  # else a dashboard file's: StaticFiles' own Allow stands
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(methods))}
    return await http_exception_handler(request, exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


# What each refusal means; every one is JSON {"detail": ...}. Declared on the routes, so that
# the OpenAPI document lists every status a client can get (Schemathesis checks it does).
_ERROR_WORDS = {
    400: "a source, camera host or model the service will not use", 401: "no or a wrong "
    "token (VIDPIPE_API_TOKEN is set)", 404: "no such stream (or no frame yet)",
    409: "the id is in use (or the service cannot do it as it runs)",
    413: "the body is over max_body_kb", 429: "the stream limit",
    503: "not ready: starting or shutting down (or no worker could start)",
}
_ERROR_BODY = {"type": "object", "properties": {"detail": {}}, "required": ["detail"]}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"description": _ERROR_WORDS[code],
                   "content": {"application/json": {"schema": _ERROR_BODY}}}
            for code in codes}


def _event_feed(description: str, *kinds: str) -> dict[int | str, dict[str, Any]]:
    """A server-sent-events answer: the schema is one event's (OpenAPI 3.1 has no
    ``itemSchema``; Schemathesis reads ``schema`` as it), whose data is JSON."""
    event = {"type": "object", "required": ["event", "data"],
             "properties": {"event": {"enum": list(kinds)},
                            "data": {"type": "string", "contentMediaType": "application/json"}}}
    return {200: {"description": description,
                  "content": {"text/event-stream": {"schema": event}}}}


class JpegResponse(Response):
    media_type = "image/jpeg"


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


class MetricsText(Response):
    media_type = CONTENT_TYPE_LATEST


class Mp4Response(Response):
    media_type = "video/mp4"


EventId = Annotated[str, FastApiPath(pattern=EVENT_ID.pattern)]


def _routes(app: FastAPI, engine: Engine, auth: Any) -> None:
    @app.post("/api/streams", status_code=201, dependencies=[auth],
              responses=_errors(400, 401, 409, 413, 429))
    async def add_stream(body: StreamConfig) -> dict[str, Any]:
        try:
            return await engine.add(body)
        except StreamLimit as e:
            raise HTTPException(429, str(e)) from e
        except StreamExists as e:
            raise HTTPException(409, str(e)) from e
        except (SourceRejected, VidpipeError) as e:
            raise HTTPException(400, str(e)) from e

    @app.get("/api/streams", dependencies=[auth], responses=_errors(401))
    async def list_streams() -> list[dict[str, Any]]:
        return [engine.public(sid) for sid in engine.stream_ids()]

    @app.get("/api/streams/{stream_id}", dependencies=[auth], responses=_errors(401, 404))
    async def get_stream(stream_id: str) -> dict[str, Any]:
        with _known(stream_id):
            return engine.public(stream_id)

    @app.delete("/api/streams/{stream_id}", status_code=204, dependencies=[auth],
                responses=_errors(401, 404))
    async def delete_stream(stream_id: str) -> Response:
        with _known(stream_id):
            await engine.remove(stream_id)
        return Response(status_code=204)

    @app.put("/api/streams/{stream_id}/analytics", dependencies=[auth],
             responses=_errors(400, 401, 404, 409, 413))
    async def set_analytics(stream_id: str, body: AnalyticsUpdate) -> dict[str, Any]:
        """Replace the stream's lines and zones (source pixels); one kept unchanged keeps
        its counts. A stream without a tracker gets one (bytetrack unless ``track``)."""
        with _known(stream_id):
            try:
                return await engine.set_analytics(stream_id, body)
            except TrackerFixed as e:
                raise HTTPException(409, str(e)) from e
            except (VidpipeError, ValueError) as e:
                raise HTTPException(400, str(e)) from e

    @app.get("/api/streams/{stream_id}/snapshot.jpg", dependencies=[auth],
             response_class=JpegResponse, responses=_errors(401, 404))
    async def snapshot(stream_id: str) -> Response:
        with _known(stream_id):
            jpeg = await engine.snapshot(stream_id)
        if jpeg is None:
            raise HTTPException(404, f"stream {stream_id!r} has no frame yet")
        return JpegResponse(jpeg, headers={"Cache-Control": "no-store"})

    @app.get("/api/streams/{stream_id}/results", dependencies=[auth],
             response_class=EventStream, responses=_errors(401, 404) | _event_feed(
                 "result per frame, lost before one when this reader lost some, end",
                 "result", "lost", "end"))
    async def results(stream_id: str, request: Request) -> StreamingResponse:
        """Server-sent events: ``result`` per processed frame (``vidpipe run``'s line
        format); ``lost`` before one when this reader fell behind and lost that many;
        ``end`` when the stream has ended."""
        with _known(stream_id):
            feed = await engine.results(stream_id)
        return EventStream(_results(feed, request), headers={"Cache-Control": "no-store"})

    @app.get("/api/stats", dependencies=[auth], responses=_errors(401))
    async def get_stats(window_s: float = 60.0) -> dict[str, Any]:
        return await engine.stats(window_s)

    @app.get("/api/workers", dependencies=[auth], responses=_errors(401))
    async def list_workers() -> list[dict[str, Any]]:
        """The processes that run the streams: ``id``, ``pid``, ``node``, ``streams``,
        ``fps``, ``alive`` (one, ``local``, without Ray)."""
        return await engine.workers()

    @app.post("/api/workers", status_code=201, dependencies=[auth],
              responses=_errors(401, 409, 503))
    async def add_worker() -> dict[str, Any]:
        """One more worker on this machine (a service started with ``--workers``); it
        takes its share of the streams (floor(streams / workers)) from the busiest."""
        try:
            return await engine.add_worker()
        except ConfigError as e:  # one process, or a cluster that adds its own
            raise HTTPException(409, str(e)) from e
        except RuntimeError as e:  # the cluster could not start one
            raise HTTPException(503, str(e)) from e

    @app.get("/api/events", dependencies=[auth], response_class=EventStream,
             responses=_errors(401) | _event_feed(
                 "stats every second; stream and removed when a stream changes; event for "
                 "each event of a tracked stream (vidpipe.event/1)",
                 "stats", "stream", "removed", "event"))
    async def events(request: Request) -> StreamingResponse:
        return EventStream(_events(engine, request), headers={"Cache-Control": "no-store"})

    @app.get("/api/events/recent", dependencies=[auth], responses=_errors(401))
    async def recent_events(limit: Annotated[int, Query(ge=1, le=RECENT)] = 50,
                            stream: str | None = None) -> dict[str, Any]:
        """The latest events (``vidpipe.event/1``), newest first, of every stream or of
        ``stream``; ``/api/events`` sends each as it happens."""
        return {"events": await engine.recent_events(limit, stream)}

    @app.get("/api/events/{event_id}/snapshot.jpg", dependencies=[auth],
             response_class=JpegResponse, responses=_errors(401, 404))
    async def event_snapshot(event_id: EventId, clean: bool = False) -> Response:
        """An ``end`` event's object at its best: with its box drawn, or ``clean``."""
        return await _media(engine, event_id, "clean" if clean else "snapshot", "image/jpeg")

    @app.get("/api/events/{event_id}/clip.mp4", dependencies=[auth],
             response_class=Mp4Response, responses=_errors(401, 404))
    async def event_clip(event_id: EventId) -> Response:
        """An ``end`` event's clip (MP4, the stream's packets copied)."""
        return await _media(engine, event_id, "clip", "video/mp4")

    @app.get("/metrics", dependencies=[auth], response_class=MetricsText,
             responses=_errors(401))
    async def metrics() -> Response:
        return MetricsText(await engine.metrics_text())

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses=_errors(503))
    async def readyz() -> JSONResponse:
        ready = engine.ready
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


async def _media(engine: Engine, event_id: str, kind: str, media_type: str) -> Response:
    found = await engine.event_media(event_id, kind)
    if found is None:
        raise HTTPException(404, f"event {event_id} has no {kind} (none kept, or removed "
                                 "past the retention)")
    headers = {"Cache-Control": "private"}
    if isinstance(found, bytes):
        return Response(found, media_type=media_type, headers=headers)
    return FileResponse(found, media_type=media_type, headers=headers)


@contextmanager
def _known(stream_id: str) -> Iterator[None]:
    """A KeyError for the stream inside is a 404."""
    try:
        yield
    except KeyError:
        raise HTTPException(404, f"no stream {stream_id!r}") from None


async def _events(engine: Engine, request: Request) -> AsyncIterator[str]:
    """Server-sent events: ``stats`` every second, ``stream``/``removed`` on state changes,
    ``event`` for each event of a tracked stream."""
    queue = engine.readers.subscribe()
    next_stats = time.monotonic()
    try:
        while not await request.is_disconnected():
            timeout = next_stats - time.monotonic()
            if timeout <= 0:
                yield _sse("stats", await engine.stats(60.0))
                next_stats = time.monotonic() + 1.0
                continue
            try:
                event = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                continue
            yield _sse(event["type"], event)
    finally:
        engine.readers.unsubscribe(queue)


async def _results(feed: ResultFeed, request: Request) -> AsyncIterator[str]:
    quiet_since = time.monotonic()
    try:
        while True:
            item = await feed.next(timeout_s=1.0)
            if item is None:
                yield "event: end\ndata: {}\n\n"
                return
            line, lost = item
            if not line:
                if await request.is_disconnected():
                    return
                if time.monotonic() - quiet_since >= KEEPALIVE_S:
                    quiet_since = time.monotonic()
                    yield ": keepalive\n\n"
                continue
            quiet_since = time.monotonic()
            if lost:
                yield _sse("lost", {"lost": lost})
            yield f"event: result\ndata: {line}\n\n"
    finally:
        await feed.close()


def _sse(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"
