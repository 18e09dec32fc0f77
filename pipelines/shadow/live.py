"""LiveShadow: a candidate compared on live traffic, on a thread of its own, held to a CPU
budget — the service's candidate beside a shared detector.

The detector's sink stage offers it every result (``offer``: never waits). Of the frames
the model saw, ``share`` are wanted (every Nth of each stream); a wanted frame is taken when
the candidate's thread is free and its CPU time so far is within ``cpu_budget`` (a fraction
of one core) of the time it has been running, and is otherwise counted as passed over
(``busy``, ``over_budget``): the candidate costs at most its budget, whatever the traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pipelines.frame import Result
from pipelines.shadow.compare import ShadowComparison

log = logging.getLogger(__name__)


class LiveShadow:
    def __init__(self, comparison: ShadowComparison, cpu_budget: float = 0.25) -> None:
        if not 0.0 < cpu_budget <= 8.0:
            raise ValueError(f"cpu_budget must be in (0, 8] cores, got {cpu_budget}")
        self.comparison, self.cpu_budget = comparison, cpu_budget
        self.started_at = time.monotonic()
        self.busy = self.over_budget = 0
        self._lock = threading.Lock()  # the comparison: the worker, the sink, the API
        self._waiting: Result | None = None
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self.error: str | None = None  # why the candidate stopped, if it failed
        self._thread = threading.Thread(target=self._work, name="candidate", daemon=True)
        self._thread.start()

    def offer(self, result: Result) -> None:
        """From the sink stage: take ``result`` if it is wanted and there is room."""
        with self._lock:
            if self._closed or not self.comparison.wanted(result):
                return
            if self._waiting is not None:
                self.busy += 1
                return
            spent = self.comparison.cpu_s
            if spent > self.cpu_budget * (time.monotonic() - self.started_at):
                self.over_budget += 1
                return
            self._waiting = result
            self._wake.notify()

    def _work(self) -> None:
        while True:
            with self._lock:
                while self._waiting is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                result = self._waiting
            assert result is not None
            try:
                found = self.comparison.detect([result])  # its model runs outside the lock
            except Exception as e:  # the candidate fails, never the detector: it says why
                log.error("candidate %s failed: %s", self.comparison.model.path.name, e)
                with self._lock:
                    self.error, self._closed, self._waiting = str(e), True, None
                return
            with self._lock:
                self.comparison.record([result], *found)
                self._waiting = None

    def report(self) -> dict[str, Any]:
        with self._lock:
            report = self.comparison.report()
            wall = time.monotonic() - self.started_at
            report |= {"passed_over": {"busy": self.busy, "over_budget": self.over_budget},
                       "cpu_budget": self.cpu_budget, "running_s": round(wall, 1),
                       "error": self.error,
                       "cpu_share": round(self.comparison.cpu_s / wall, 4) if wall else 0.0}
        return report

    def summary(self) -> dict[str, Any]:
        """The few figures a dashboard shows: the candidate, the frames compared, the share
        agreeing, boxes per frame on each side, the CPU it used and may use."""
        with self._lock:
            streams = self.comparison.streams.values()
            frames = sum(s.agreement.frames for s in streams)
            agreed = sum(s.agreement.agreed for s in streams)
            boxes = [sum(getattr(s, side).boxes for s in streams)
                     for side in ("current", "candidate")]
            wall = time.monotonic() - self.started_at
            return {"file": self.comparison.model.path.name, "frames": frames,
                    "frame_agreement": round(agreed / frames, 4) if frames else None,
                    "boxes_per_frame": [round(b / frames, 2) if frames else None
                                        for b in boxes],
                    "cpu_share": round(self.comparison.cpu_s / wall, 4) if wall else 0.0,
                    "cpu_budget": self.cpu_budget, "error": self.error}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)
        self.comparison.close()
