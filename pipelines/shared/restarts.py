"""RestartBudget: how often, and after how long, something that failed is started again.

A shared detector that fails is rebuilt after a delay that doubles with each failure (from
``first_delay_s`` up to ``max_delay_s``), at most ``max_restarts`` times within any
``window_s``: a model that fails now and then recovers; one that fails on every start stops
being retried, and fails its streams, within about a minute.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartBudget:
    max_restarts: int = 5
    window_s: float = 600.0
    first_delay_s: float = 0.5
    max_delay_s: float = 30.0
    _restarts: deque[float] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if not 0 <= self.first_delay_s <= self.max_delay_s:
            raise ValueError("delays must satisfy 0 <= first_delay_s <= max_delay_s")

    def next_delay(self, now: float | None = None) -> float | None:
        """The wait before the next restart, which this call counts; None: none is left."""
        now = time.monotonic() if now is None else now
        while self._restarts and now - self._restarts[0] > self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return None
        delay = min(self.max_delay_s, self.first_delay_s * 2 ** len(self._restarts))
        self._restarts.append(now)
        return delay

    @property
    def used(self) -> int:
        return len(self._restarts)
