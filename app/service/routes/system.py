"""The service as a whole: its figures (``/api/stats``), its worker processes
(``/api/workers``), Prometheus (``/metrics``), and liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from app.service.routes.common import AUTH, Host, MetricsText, errors
from app.service.schemas import Health, Readiness, Stats, Worker

router = APIRouter()


@router.get("/api/stats", dependencies=AUTH, responses=errors(401))
async def get_stats(host: Host, window_s: float = 60.0) -> Stats:
    """Per-stage p50/p95/p99, busy and queue depths, each stream's fps, latency and frame
    outcomes, the drops by cause, batch sizes, the loaded detectors (and GPUs)."""
    return await host.stats(window_s)


@router.get("/api/workers", dependencies=AUTH, responses=errors(401))
async def list_workers(host: Host) -> list[Worker]:
    """The processes that run the streams (one, ``local``, without Ray)."""
    return await host.workers()


@router.post("/api/workers", status_code=201, dependencies=AUTH,
             responses=errors(401, 409, 503))
async def add_worker(host: Host) -> Worker:
    """One more worker on this machine (a service started with ``--workers``); it
    takes its share of the streams (floor(streams / workers)) from the busiest."""
    return await host.add_worker()


@router.get("/metrics", dependencies=AUTH, response_class=MetricsText, responses=errors(401))
async def metrics(host: Host) -> Response:
    return MetricsText(await host.metrics_text())


@router.get("/healthz")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness,
            responses={503: {"model": Readiness, "description": "starting or shutting down"}})
async def readyz(host: Host) -> JSONResponse:
    ready = host.ready
    return JSONResponse(Readiness(ready=ready).model_dump(), status_code=200 if ready else 503)
