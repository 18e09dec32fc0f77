"""A shared detector's candidate model (``/api/detectors/{id}/candidate``): started beside
it, reported, discarded or promoted in its place (``app.service.candidates``). The ids are
those ``/api/stats`` lists under ``detectors``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.service.candidates import CandidateRequest
from app.service.routes.common import AUTH, Host, errors
from app.service.schemas import CandidateReport, DetectorFigures

router = APIRouter()


@router.post("/api/detectors/{detector_id}/candidate", status_code=201, dependencies=AUTH,
             responses=errors(400, 401, 404, 409))
async def start_candidate(detector_id: str, body: CandidateRequest,
                          host: Host) -> CandidateReport:
    """Load a candidate model beside the detector and compare it on a share of the same
    frames, within a CPU budget (409 if one runs already)."""
    return CandidateReport(**await host.start_candidate(detector_id, body))


@router.get("/api/detectors/{detector_id}/candidate", dependencies=AUTH,
            responses=errors(401, 404, 409))
async def get_candidate(detector_id: str, host: Host) -> CandidateReport:
    """The candidate against the detector so far: agreement, boxes and scores side by side
    (overall and per stream), its time and CPU per frame, the frames it passed over."""
    return CandidateReport(**await host.candidate(detector_id))


@router.delete("/api/detectors/{detector_id}/candidate", status_code=204, dependencies=AUTH,
               responses=errors(401, 404, 409))
async def discard_candidate(detector_id: str, host: Host) -> Response:
    """Stop comparing and unload the candidate."""
    await host.discard_candidate(detector_id)
    return Response(status_code=204)


@router.post("/api/detectors/{detector_id}/candidate/promote", dependencies=AUTH,
             responses=errors(400, 401, 404, 409))
async def promote_candidate(detector_id: str, host: Host) -> DetectorFigures:
    """Run the candidate in the detector's place: the frames already taken finish on the
    current model, every later one is inferred with the candidate (each result line names
    its model), for every stream of the detector and after a restart (400: a candidate of
    another card; 409: none)."""
    return DetectorFigures(**await host.promote_candidate(detector_id))

