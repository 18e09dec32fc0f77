"""Headroom: how many more cameras like the running ones this machine holds, from what they
cost as they run.

Every ``SAMPLE_S`` the service's own CPU time (all its threads: decoding, the detector,
everything a camera brings) and its running cameras are sampled; over the last ``WINDOW_S``
a camera costs the CPU spent divided by the camera-seconds run. The machine holds
``TARGET`` of its cores' worth of such cameras: past that, frames start to be dropped and
every camera slows down. A camera added beyond it is refused (409) with the figure, unless
the request says ``force``; then the service is ``overloaded`` until it holds its cameras
again, and ``/api/stats`` and the dashboard say so. Until a camera has run for a sample,
nothing is known and nothing is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from app.errors import OverCapacity

SAMPLE_S = 2.0
WINDOW_S = 30.0
TARGET = 0.85  # the share of the cores cameras may take: the rest is the margin


@dataclass(frozen=True, slots=True)
class HeadroomFigures:
    cores: int
    used_cores: float  # over the window
    cameras: int  # running now
    camera_cores: float  # what one costs, on average
    holds: int  # cameras like these the machine holds
    more: int  # how many more it holds (0 when full or overloaded)
    overloaded: bool  # more cameras run than it holds (added with force)
    window_s: float


class Headroom:
    """``cameras()`` counts the running cameras; ``cores``: the machine's usable cores."""

    def __init__(self, cameras: Callable[[], int], cores: int | None = None) -> None:
        self.cameras = cameras
        self.cores = cores or len(os.sched_getaffinity(0))
        self._samples: deque[tuple[float, float, int]] = deque()  # (wall, cpu, cameras)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.sample()
        self._task = asyncio.create_task(self._sampling(), name="headroom")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sampling(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            self.sample()

    def sample(self, now: float | None = None, cpu: float | None = None) -> None:
        """The CPU time and the running cameras now (``now``, ``cpu``: given by tests)."""
        now = time.monotonic() if now is None else now
        cpu = time.process_time() if cpu is None else cpu
        self._samples.append((now, cpu, self.cameras()))
        while len(self._samples) > 2 and now - self._samples[1][0] >= WINDOW_S:
            self._samples.popleft()

    def figures(self) -> HeadroomFigures | None:
        """The figures of the window; None before a camera ran through a sample."""
        samples = list(self._samples)
        spent = camera_s = 0.0
        for (t0, c0, n0), (t1, c1, _) in zip(samples, samples[1:], strict=False):
            if n0 > 0:
                spent += c1 - c0
                camera_s += n0 * (t1 - t0)
        if camera_s <= 0:
            return None
        span = samples[-1][0] - samples[0][0]
        used = (samples[-1][1] - samples[0][1]) / span
        per_camera = max(spent / camera_s, 1e-3)
        holds = math.floor(self.cores * TARGET / per_camera)
        cameras = self.cameras()
        return HeadroomFigures(self.cores, round(used, 3), cameras, round(per_camera, 4),
                               holds, max(0, holds - cameras), cameras > holds,
                               round(span, 1))

    def check(self, force: bool) -> None:
        """OverCapacity (409) when one more camera would not fit, unless ``force``."""
        figures = self.figures()
        if force or figures is None or figures.more >= 1:
            return
        raise OverCapacity(
            f"this machine holds about {figures.holds} cameras like the {figures.cameras} "
            f"running ({figures.camera_cores:.2f} of a core each, {figures.used_cores:.2f} of "
            f"{figures.cores} cores used over the last {figures.window_s:.0f} s): one more "
            f"would slow every camera down; add it with force to run it anyway")
