"""What the routes share: the host (``app.state.host``) and the token check as dependencies,
the refusals each route declares (so the OpenAPI document lists every status a client can
get: Schemathesis checks it), the media types, and server-sent events."""

from __future__ import annotations

import hmac
import json
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.service.host import StreamHost
from app.service.schemas import Problem


def _host(request: Request) -> StreamHost:
    host: StreamHost = request.app.state.host
    return host


Host = Annotated[StreamHost, Depends(_host)]


async def require_token(request: Request) -> None:
    token: str | None = request.app.state.token
    if token is None:
        return
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise HTTPException(401, "this route needs Authorization: Bearer <token>",
                            headers={"WWW-Authenticate": "Bearer"})


# every route that returns data or changes state: the token, when one is set
AUTH = [Depends(require_token)]

# What each refusal means; every one is JSON {"detail": ...} (``Problem``).
_ERROR_WORDS = {
    400: "a source, camera host or model the service will not use", 401: "no or a wrong "
    "token (VIDPIPE_API_TOKEN is set)", 404: "no such stream or detector (or no frame yet)",
    409: "the id is in use (or the service cannot do it as it runs)",
    413: "the body is over max_body_kb", 429: "the stream limit",
    503: "not ready: starting or shutting down (or no worker could start)",
}


_PROBLEM = {"application/json": {"schema": Problem.model_json_schema()}}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The refusals a route declares, each with its meaning and the ``Problem`` body (as
    JSON whatever the route's own media type: a JPEG route's 404 is JSON too)."""
    return {code: {"description": _ERROR_WORDS[code], "content": _PROBLEM} for code in codes}


def event_feed(description: str, *kinds: str) -> dict[int | str, dict[str, Any]]:
    """A server-sent-events answer: the schema is one event's (OpenAPI 3.1 has no
    ``itemSchema``; Schemathesis reads ``schema`` as it), whose data is JSON."""
    event = {"type": "object", "required": ["event", "data"],
             "properties": {"event": {"enum": list(kinds)},
                            "data": {"type": "string", "contentMediaType": "application/json"}}}
    return {200: {"description": description,
                  "content": {"text/event-stream": {"schema": event}}}}


class JpegResponse(Response):
    media_type = "image/jpeg"


class Mp4Response(Response):
    media_type = "video/mp4"


class PngResponse(Response):
    media_type = "image/png"


class MetricsText(Response):
    media_type = CONTENT_TYPE_LATEST


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


def sse(kind: str, data: Any) -> str:
    """One server-sent event of ``kind`` with ``data`` as JSON."""
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"
