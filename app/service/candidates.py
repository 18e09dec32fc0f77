"""A candidate model beside one of the service's shared detectors, compared on live traffic
(``POST /api/detectors/{id}/candidate``): loaded (a zoo model, or under a model root, as a
stream's model), offered the detector's results after its streams' sinks, and run on a
thread of its own within its CPU budget (``pipelines.shadow.live``); ``GET`` reports,
``DELETE`` discards it; ``POST .../promote`` runs it in the detector's place from the next
inference call on (``pipelines.shared.promotion``), for every stream of the detector and,
remembered in the store, after a restart."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import Field

from app.errors import CandidateConflict, UnknownDetector
from app.service.service import Service
from app.service.streams import check_stream_model
from models.checked import CheckedBody
from models.zoo import resolve_model
from pipelines.errors import ConfigError
from pipelines.shadow.compare import ShadowComparison
from pipelines.shadow.live import LiveShadow
from pipelines.shadow.model import ShadowModel
from pipelines.shared.detector import SharedDetector
from pipelines.shared.promotion import check_promotable, prepare
from pipelines.shared.promotion import promote as promote_model

log = logging.getLogger(__name__)


class CandidateRequest(CheckedBody):
    """The candidate: a model as a stream names one; ``share``: of the frames the detector's
    model saw, those offered to it (every Nth of each stream); ``cpu_budget``: the cores it
    may use, at most, on average."""

    model: str = Field(min_length=1, max_length=1024)
    share: float = Field(default=0.25, gt=0.0, le=1.0)
    cpu_budget: float = Field(default=0.25, gt=0.0, le=8.0)


def detector(service: Service, detector_id: str) -> SharedDetector:
    """The loaded detector ``detector_id`` names (UnknownDetector: 404)."""
    found = next((d for d in service.detectors.loaded.values() if d.name == detector_id),
                 None)
    if found is None:
        loaded = ", ".join(d.name for d in service.detectors.loaded.values()) or "none"
        raise UnknownDetector(f"no detector {detector_id!r} is loaded (loaded: {loaded})")
    return found


async def start(service: Service, detector_id: str, body: CandidateRequest) -> dict[str, Any]:
    """Load ``body``'s model beside the detector and start comparing."""
    shared = detector(service, detector_id)
    if shared.candidate is not None:
        raise CandidateConflict(f"detector {detector_id} has a candidate already "
                                f"({shared.candidate.comparison.model.path.name}): "
                                "discard it first")
    model = check_stream_model(body.model, service.config.model_roots)
    path, spec = resolve_model(model)
    shadow = await asyncio.to_thread(ShadowModel, path, spec, shared.spec)
    standby = None
    try:  # loaded as the detector's runtime too, ahead, where it could take its place
        standby = await asyncio.to_thread(prepare, shared, path, spec)
    except ConfigError as e:
        log.info("detector %s: candidate %s can be compared, not promoted: %s", detector_id,
                 path.name, e)
    except BaseException:
        shadow.close()
        raise
    if shared.candidate is not None:  # another request's, started while this one loaded
        shadow.close()
        if standby is not None:
            standby.runtime.close()
        raise CandidateConflict(f"detector {detector_id} has a candidate already")
    shared.standby = standby
    live = LiveShadow(ShadowComparison(shadow, shared.spec.name, body.share), body.cpu_budget)
    shared.candidate = live
    shared.router.observer = live.offer
    log.info("detector %s: candidate %s compared on %g of its frames, within %g cores",
             detector_id, path.name, body.share, body.cpu_budget)
    return report(service, detector_id)


def report(service: Service, detector_id: str) -> dict[str, Any]:
    shared = detector(service, detector_id)
    if shared.candidate is None:
        raise CandidateConflict(f"detector {detector_id} has no candidate")
    return {"detector": detector_id} | shared.candidate.report()


async def discard(service: Service, detector_id: str) -> None:
    shared = detector(service, detector_id)
    live = shared.candidate
    if live is None:
        raise CandidateConflict(f"detector {detector_id} has no candidate")
    shared.router.observer, shared.candidate = None, None
    await asyncio.to_thread(live.close)
    standby, shared.standby = shared.standby, None
    if standby is not None:
        standby.runtime.close()
    log.info("detector %s: candidate %s discarded", detector_id,
             live.comparison.model.path.name)


async def promote(service: Service, detector_id: str) -> dict[str, Any]:
    """The candidate in the detector's place: swapped between two inference calls, the
    choice remembered (the detector's model file -> the candidate's); the candidate is
    discarded (it is the model now). ConfigError (400) for one of another card."""
    shared = detector(service, detector_id)
    live = shared.candidate
    if live is None:
        raise CandidateConflict(f"detector {detector_id} has no candidate to promote")
    model = live.comparison.model
    check_promotable(shared, model.path, model.spec)
    standby = shared.standby
    if standby is None:
        raise CandidateConflict(f"{model.path.name} could not be loaded as the detector's "
                                "runtime when it started: see the service's log")
    before = shared.model_path
    shared.standby = None  # the detector's runtime now, not the candidate's to close
    await discard(service, detector_id)
    promote_model(shared, standby, model.path, model.spec)
    if before is not None:
        service.store.promote(str(before), str(model.path), time.time())
        service.detectors.rekey(shared, model.path)
    return shared.describe()
