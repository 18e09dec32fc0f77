"""``/api/events``: the feed (server-sent events: stats, stream changes, tracked streams'
events), the latest events, and an ended object's best picture and clip."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi import Path as FastApiPath
from fastapi.responses import FileResponse, StreamingResponse

from app.service.events import RECENT
from app.service.host import StreamHost
from app.service.routes.common import (
    AUTH,
    EventStream,
    Host,
    JpegResponse,
    Mp4Response,
    errors,
    event_feed,
    sse,
)
from app.service.schemas import RecentEvents
from app.service.store import CURSOR, EventQuery, EventType, cursor, parse_cursor
from pipelines.events.media import EVENT_ID

EventId = Annotated[str, FastApiPath(pattern=EVENT_ID.pattern)]
STATS_EVERY_S = 1.0

router = APIRouter(prefix="/api/events", dependencies=AUTH)


@router.get("", response_class=EventStream, responses=errors(401) | event_feed(
    "stats every second; stream and removed when a stream changes; event for each event of "
    "a tracked stream (vidpipe.event/1)", "stats", "stream", "removed", "event"))
async def events(request: Request, host: Host) -> StreamingResponse:
    return EventStream(_feed(host, request), headers={"Cache-Control": "no-store"})


@router.get("/recent", responses=errors(400, 401))
async def recent_events(
        host: Host, limit: Annotated[int, Query(ge=1, le=RECENT)] = 50,
        stream: str | None = None,
        label: Annotated[str | None, Query(description="the object's class")] = None,
        line: str | None = None, zone: str | None = None,
        type: Annotated[list[EventType], Query()] = [],  # noqa: A002, B006 (FastAPI's way)
        since: Annotated[float | datetime | None,
                         Query(description="from (Unix time, or ISO 8601)")] = None,
        until: Annotated[float | datetime | None,
                         Query(description="before (Unix time, or ISO 8601)")] = None,
        before: Annotated[str | None, Query(pattern=CURSOR.pattern,
                                            description="the ``next`` of the page before")]
        = None) -> RecentEvents:
    """Events (``vidpipe.event/1``), newest first, remembered across restarts: of every
    stream or of ``stream``, filtered by class, line, zone, type and time, a page at a time
    (``next``); ``/api/events`` sends each as it happens."""
    query = EventQuery(limit=limit, stream=stream, label=label, line=line, zone=zone,
                       types=tuple(type), since=_unix(since), until=_unix(until),
                       before=parse_cursor(before) if before else None)
    rows = await host.recent_events(query)
    after = cursor(*rows[-1][:2]) if len(rows) == limit else None
    return RecentEvents(events=[event for _, _, event in rows], next=after)


def _unix(moment: float | datetime | None) -> float | None:
    return moment.timestamp() if isinstance(moment, datetime) else moment


@router.get("/{event_id}/snapshot.jpg", response_class=JpegResponse,
            responses=errors(401, 404))
async def event_snapshot(event_id: EventId, host: Host, clean: bool = False) -> Response:
    """An ``end`` event's object at its best: with its box drawn, or ``clean``."""
    return await _media(host, event_id, "clean" if clean else "snapshot", "image/jpeg")


@router.get("/{event_id}/clip.mp4", response_class=Mp4Response, responses=errors(401, 404))
async def event_clip(event_id: EventId, host: Host) -> Response:
    """An ``end`` event's clip (MP4, the stream's packets copied)."""
    return await _media(host, event_id, "clip", "video/mp4")


async def _media(host: StreamHost, event_id: str, kind: str, media_type: str) -> Response:
    found = await host.event_media(event_id, kind)
    if found is None:
        raise HTTPException(404, f"event {event_id} has no {kind} (none kept, or removed "
                                 "past the retention)")
    headers = {"Cache-Control": "private"}
    if isinstance(found, bytes):
        return Response(found, media_type=media_type, headers=headers)
    return FileResponse(found, media_type=media_type, headers=headers)


async def _feed(host: StreamHost, request: Request) -> AsyncIterator[str]:
    """``stats`` every second, ``stream``/``removed`` on state changes, ``event`` for each
    event of a tracked stream."""
    queue = host.feed.subscribe()
    next_stats = time.monotonic()
    try:
        while not await request.is_disconnected():
            timeout = next_stats - time.monotonic()
            if timeout <= 0:
                yield sse("stats", (await host.stats(60.0)).model_dump(mode="json"))
                next_stats = time.monotonic() + STATS_EVERY_S
                continue
            try:
                message = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                continue
            yield sse(message["type"], message)
    finally:
        host.feed.unsubscribe(queue)
