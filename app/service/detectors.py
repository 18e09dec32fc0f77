"""The service's shared detectors: one per (model file, device), loaded with its first stream
and unloaded with its last, each run as a task; a detector that fails takes its streams with
it (they show ``failed`` and why), never the service or the other detectors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from models.spec import ModelSpec
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.shared.detector import SharedDetector
from pipelines.sources.url import redact_text

log = logging.getLogger(__name__)

Failed = Callable[[SharedDetector, str], Awaitable[None]]  # why a detector failed, on the loop
StateChange = Callable[[SharedDetector, str, str | None], None]  # restarting / up


class Detectors:
    def __init__(self, options: PipelineOptions, metrics: PipelineMetrics, *,
                 on_failure: Failed, on_state: StateChange) -> None:
        """``options``: the service's pipeline settings, as each detector runs them."""
        self.options = options
        self.metrics = metrics
        self.loaded: dict[tuple[str, str], SharedDetector] = {}  # (model file, device)
        self._tasks: dict[SharedDetector, asyncio.Task[None]] = {}
        self._on_failure = on_failure
        self._on_state = on_state
        self.lock = asyncio.Lock()  # held while a stream attaches: no unload meanwhile

    async def get(self, model: str, model_path: Path, spec: ModelSpec) -> SharedDetector:
        """The detector of ``model`` on the service's device, loaded on first use (a failed
        one is replaced: its streams failed with it). Call it holding ``lock``."""
        key = (str(model_path), self.options.device)
        detector = self.loaded.get(key)
        if detector is not None and self._tasks[detector].done():
            detector = None
        if detector is None:
            detector = await asyncio.to_thread(SharedDetector.open, f"{model}@{key[1]}",
                                               model_path, spec, self.metrics, self.options)
            detector.on_state = lambda state, error: self._on_state(detector, state, error)
            self.loaded[key] = detector
            self._tasks[detector] = asyncio.create_task(self._run(detector),
                                                        name=f"detector-{detector.name}")
        return detector

    def rekey(self, detector: SharedDetector, model_path: Path) -> None:
        """``detector`` now runs ``model_path`` (a promotion): streams naming it find it."""
        self.loaded = {(str(model_path), k[1]) if d is detector else k: d
                       for k, d in self.loaded.items()}

    async def _run(self, detector: SharedDetector) -> None:
        try:
            await detector.run()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # its streams fail; the service and the others go on
            error = redact_text(str(e))
            log.error("detector %s failed: %s", detector.name, error)
            await self._on_failure(detector, error)

    async def unload_if_idle(self, detector: SharedDetector) -> None:
        """Unload ``detector`` once no stream uses it."""
        async with self.lock:
            if detector.streams or detector not in self._tasks:
                return
            self.loaded = {k: d for k, d in self.loaded.items() if d is not detector}
            task = self._tasks.pop(detector)
            detector.close()
            try:
                await asyncio.wait_for(task, 5.0)
            except (TimeoutError, Exception):
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(detector.release)
            log.info("detector %s: no stream uses it; unloaded", detector.name)

    async def aclose(self) -> None:
        """Unload every detector whose streams are gone (after the service's have drained)."""
        for detector in list(self._tasks):
            await self.unload_if_idle(detector)
