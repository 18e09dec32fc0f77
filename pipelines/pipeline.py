"""Pipeline: runs a set of stages concurrently and accounts for every frame at the end.

It names no concrete stage: ``build.py`` wires stages and channels, this class only runs them in
one asyncio TaskGroup (one failing stage cancels the rest — no thread is left waiting on a queue
nobody drains), stops them, and closes them in reverse order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage, run_stage

if TYPE_CHECKING:
    from pipelines.plan import RunPlan

log = logging.getLogger(__name__)


class Queue(Protocol):
    """What a pipeline ends with its run: a Channel, or a run's FairChannel."""

    name: str

    def fill(self) -> float: ...

    def abort(self) -> list[Any]: ...


class Pipeline:
    """Stages linked by channels, serving the named streams."""

    def __init__(self, stages: Sequence[Stage[Any, Any]], channels: Sequence[Queue],
                 metrics: PipelineMetrics, streams: Sequence[str], *,
                 plan: RunPlan | None = None, account_stopped: bool = True) -> None:
        self.stages = list(stages)
        self.channels = list(channels)
        self.metrics = metrics
        self.streams = list(streams)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._forgotten = False  # its stages' and channels' metrics unregistered
        self.started_at: float | None = None
        self.wall_s: float | None = None
        self.plan = plan  # what it was built with: threads, runtime, batch size
        # False for a stream's intake into a shared detector: its frames may still be in the
        # detector when the intake ends, and the detector does the books (SharedDetector.detach)
        self.account_stopped = account_stopped

    async def run(self) -> None:
        """Run until every stage has finished, or one fails (its error propagates)."""
        if self._closed:
            raise RuntimeError("a pipeline runs once; build a new one")
        self._task = asyncio.current_task()
        self.started_at = time.monotonic()
        completed = False
        try:
            async with asyncio.TaskGroup() as group:
                for stage in self.stages:
                    group.create_task(run_stage(stage), name=f"stage-{stage.worker.name}")
            completed = True
        finally:
            self.wall_s = time.monotonic() - self.started_at
            for channel in self.channels:
                channel.abort()
            try:  # the stages' threads end first: a call under way still counts what it read
                await asyncio.shield(asyncio.to_thread(self.close))
            finally:
                if not completed and self.account_stopped:
                    self._account_stopped()

    async def stop(self, drain: bool = True) -> None:
        """Stop the sources. With ``drain`` every frame already read still becomes a result;
        without it the run is cancelled and queued frames are counted as ``dropped_stopped``."""
        for stage in self.stages:
            stage.request_stop()
        if not drain and self._task is not None:
            self._task.cancel()

    def _account_stopped(self) -> None:
        """After a cancelled or failed run, frames read but never finished — queued or held by
        a stage — are counted as ``dropped_stopped``. After a completed run nothing is patched
        up here: there, a frame missing from the books is a bug the invariant test must see."""
        for stream in self.streams:
            missing = self.metrics.unaccounted(stream)
            if missing > 0:
                self.metrics.frame_outcome(stream, "dropped_stopped", missing)

    def forget_metrics(self) -> None:
        """Take this pipeline's stages and channels out of the shared metrics, for a service
        that removes it while others go on. Idempotent."""
        if self._forgotten:
            return
        self._forgotten = True
        for stage in self.stages:
            for name, threads in stage.registered():
                self.metrics.unregister_stage(name, threads)
        for channel in self.channels:
            self.metrics.unregister_channel(channel.name)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every stage (threads, sources, backends), last stage first. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for stage in reversed(self.stages):
            try:
                stage.close()
            except Exception:  # one failing close must not keep the others open
                log.exception("closing stage %s failed", stage.worker.name)
