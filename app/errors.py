"""The service's refusals, in the one error tree (``models.errors.VidpipeError``), each also
the builtin a caller would catch. ``app.service.api`` answers each with one HTTP status
(``ERROR_STATUS``), so a route never needs its own ``try``."""

from __future__ import annotations

from pipelines.errors import VidpipeError


class SourceRejected(VidpipeError, ValueError):
    """A URL, camera host or model the service will not open; the message says why (400)."""


class UnknownStream(VidpipeError, KeyError):
    """No stream has this id (404)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else "no such stream"


class StreamExists(VidpipeError, ValueError):
    """A stream with this id runs already (409)."""


class TrackerFixed(VidpipeError, ValueError):
    """A running stream's tracker cannot change (409)."""


class OverCapacity(VidpipeError, RuntimeError):
    """One more camera would not fit the machine's measured headroom (409); ``force`` adds
    it anyway."""


class StreamLimit(VidpipeError, RuntimeError):
    """The service already runs ``max_streams`` streams (429)."""


class WorkerUnavailable(VidpipeError, RuntimeError):
    """No worker has room for a stream, or none could be started (503)."""


class WorkersFixed(VidpipeError, RuntimeError):
    """The service cannot add workers as it runs: one process, or a Ray cluster that grows by
    its own means (409)."""


class NothingToReplay(VidpipeError, RuntimeError):
    """A stream has no results kept to replay a candidate's lines and zones on (409)."""


class UnknownDetector(VidpipeError, KeyError):
    """No loaded detector has this id (404): the ids are those ``/api/stats`` lists."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such detector"


class CandidateConflict(VidpipeError, RuntimeError):
    """A candidate runs already beside this detector, none does, or the host runs none
    (409)."""
