"""``/api/streams``: add, list, show and remove streams, replace a stream's lines and zones,
read its latest annotated picture and follow its results as server-sent events."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from app.service.analytics_try import RECENT_FRAMES
from app.service.config import AnalyticsUpdate, StreamConfig
from app.service.host import ResultSubscription
from app.service.routes.common import (
    AUTH,
    EventStream,
    Host,
    JpegResponse,
    PngResponse,
    errors,
    event_feed,
    sse,
)
from app.service.schemas import Stream

KEEPALIVE_S = 15.0  # a comment on a quiet results feed, so proxies keep it open

router = APIRouter(prefix="/api/streams", dependencies=AUTH)


@router.post("", status_code=201, responses=errors(400, 401, 409, 413, 429, 503))
async def add_stream(body: StreamConfig, host: Host, force: bool = False) -> Stream:
    """Start a stream: an RTSP camera, or a file under a media root played as one. A camera
    past the machine's measured headroom is refused (409, with the figure) unless ``force``
    (then the service shows itself overloaded)."""
    return await host.add(body, force=force)


@router.get("", responses=errors(401))
async def list_streams(host: Host) -> list[Stream]:
    return [host.stream(sid) for sid in host.stream_ids()]


@router.get("/{stream_id}", responses=errors(401, 404))
async def get_stream(stream_id: str, host: Host) -> Stream:
    return host.stream(stream_id)


@router.delete("/{stream_id}", status_code=204, responses=errors(401, 404))
async def delete_stream(stream_id: str, host: Host) -> Response:
    """Drain the stream (every frame read still becomes a result) and remove it."""
    await host.remove(stream_id)
    return Response(status_code=204)


@router.put("/{stream_id}/analytics", responses=errors(400, 401, 404, 409, 413))
async def set_analytics(stream_id: str, body: AnalyticsUpdate, host: Host) -> Stream:
    """Replace the stream's lines and zones (source pixels); one kept unchanged keeps
    its counts. A stream without a tracker gets one (BoT-SORT unless ``track``)."""
    return await host.set_analytics(stream_id, body)


@router.post("/{stream_id}/analytics/try", responses=errors(400, 401, 404, 409, 413))
async def try_analytics(stream_id: str, body: AnalyticsUpdate, host: Host,
                        frames: Annotated[int, Query(ge=1, le=108_000)] = RECENT_FRAMES,
                        ) -> dict[str, Any]:
    """What these lines and zones would have counted over the stream's last ``frames``
    results, beside what its own lines and zones of the same names counted then: its
    tracker run again on the boxes its model gave (no model runs, nothing is saved).
    409 where the stream keeps no results (results_dir off) or has none yet."""
    return await host.try_analytics(stream_id, body, frames)


@router.get("/{stream_id}/snapshot.jpg", response_class=JpegResponse,
            responses=errors(401, 404) | {204: {"description": "no frame yet"}})
async def snapshot(stream_id: str, host: Host) -> Response:
    """The stream's latest picture with its boxes drawn; no content (204) while the stream
    has none yet."""
    jpeg = await host.snapshot(stream_id)
    if jpeg is None:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return JpegResponse(jpeg, headers={"Cache-Control": "no-store"})


@router.get("/{stream_id}/heatmap.png", response_class=PngResponse,
            responses=errors(401, 404) | {204: {"description": "no tracked object yet"}})
async def heatmap(stream_id: str, host: Host) -> Response:
    """Where the stream's tracked objects were since it started (their bottom-centres, frames
    spent per 8-pixel cell, blue few to red many) over its latest picture; no content (204)
    while it has tracked nothing (a stream without a tracker tracks nothing)."""
    png = await host.heatmap(stream_id)
    if png is None:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return PngResponse(png, headers={"Cache-Control": "no-store"})


@router.get("/{stream_id}/results", response_class=EventStream, responses=errors(401, 404)
            | event_feed("result per frame, lost before one when this reader lost some, end",
                         "result", "lost", "end"))
async def results(stream_id: str, request: Request, host: Host) -> StreamingResponse:
    """Server-sent events: ``result`` per processed frame (``vidpipe run``'s line
    format); ``lost`` before one when this reader fell behind and lost that many;
    ``end`` when the stream has ended."""
    subscription = await host.results(stream_id)
    return EventStream(_results(subscription, request), headers={"Cache-Control": "no-store"})


async def _results(subscription: ResultSubscription, request: Request) -> AsyncIterator[str]:
    quiet_since = time.monotonic()
    try:
        while True:
            item = await subscription.next(timeout_s=1.0)
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
                yield sse("lost", {"lost": lost})
            yield f"event: result\ndata: {line}\n\n"
    finally:
        await subscription.close()
