"""A request body limit, enforced before the application reads a byte of the body.

FastAPI parses a route's body before its dependencies run, so without this a 200 MB POST is
read whole, into memory, before the token check refuses it. A body
that declares more than the limit (``Content-Length``) is refused with 413 unread; one sent
without a length (chunked) is read up to the limit and refused as soon as it passes it. A
body within the limit is handed to the application as it came.
"""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyLimit:
    """ASGI middleware: HTTP request bodies of at most ``max_bytes``, else 413."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"body limit must be >= 0 bytes, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        if declared is not None:  # the server stops at the declared length
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        size = 0
        while True:  # chunked: read up to the limit before the application sees any of it
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"detail": f"request body over {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
