"""``/docs`` (Swagger UI) and ``/redoc``: the API's OpenAPI document rendered from assets
served by the service itself (``/docs-assets``, from the ``fastapi-offline`` package), so
that they render where the service has no internet; FastAPI's own pages load theirs from a
CDN. Neither page holds data: they read ``/openapi.json``, which needs no token. Their
Content-Security-Policy keeps them from reaching anything but the service (Redoc's footer
would fetch its logo from a CDN)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
# the pages' own inline start-up scripts and styles; Redoc's search runs in a blob worker
SELF_ONLY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
             "'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; font-src 'self' "
             "data:; connect-src 'self'")
router = APIRouter(include_in_schema=False)


def mount_assets(app: FastAPI) -> None:
    import fastapi_offline

    folder = Path(fastapi_offline.__file__).parent / "static"
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    page = get_swagger_ui_html(openapi_url="/openapi.json", title="vidpipe API",
                               swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                               swagger_css_url=f"{ASSETS}/swagger-ui.css",
                               swagger_favicon_url=f"{ASSETS}/favicon.png")
    page.headers["Content-Security-Policy"] = SELF_ONLY
    return page


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    page = get_redoc_html(openapi_url="/openapi.json", title="vidpipe API",
                          redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                          redoc_favicon_url=f"{ASSETS}/favicon.png", with_google_fonts=False)
    page.headers["Content-Security-Policy"] = SELF_ONLY
    return page
