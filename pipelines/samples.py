"""Recent observations kept in memory beside the Prometheus histograms, for the exact
quantiles the CLI's tables, ``summary.json`` and ``/api/stats`` show (histograms give bucketed
ones), and the one form those quantiles take: p50/p95/p99 in milliseconds."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence

import numpy as np

QUANTILES = (0.5, 0.95, 0.99)
# {"p50": ms, "p95": ms, "p99": ms}; None (JSON null) where there were no samples
Quantiles = dict[str, float | None]


def quantiles_ms(seconds: Sequence[float]) -> Quantiles:
    """Quantiles in seconds (of ``QUANTILES``) as milliseconds, to the microsecond."""
    return {f"p{round(q * 100)}": None if math.isnan(v) else round(v * 1e3, 3)
            for q, v in zip(QUANTILES, seconds, strict=True)}


class Samples:
    """The most recent observations of one quantity with their times, for quantiles and rates
    over a recent window; thread-safe, bounded. A ring of two float64 arrays, grown by
    doubling up to ``maxlen``: 16 bytes a sample (deques of Python floats took 64, and grew
    for as long as they filled: 20,000 samples of a 15 fps stream take 22 minutes)."""

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError(f"samples must keep at least 1, got {maxlen}")
        self._maxlen = maxlen
        self._times = np.zeros(min(maxlen, 256), np.float64)
        self._values = np.zeros(min(maxlen, 256), np.float64)
        self._next = 0  # where the next sample goes, once the ring is full
        self._lock = threading.Lock()
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        with self._lock:
            self._add(value, time.monotonic())

    def add_many(self, values: Sequence[float]) -> None:
        """Several observations made at once (a call's items): one lock, one clock read."""
        now = time.monotonic()
        with self._lock:
            for value in values:
                self._add(value, now)

    def _add(self, value: float, now: float) -> None:
        kept = min(self.count, self._maxlen)
        if kept == self._times.size and kept < self._maxlen:
            size = min(self._maxlen, 2 * kept)
            self._times = np.resize(self._times, size)
            self._values = np.resize(self._values, size)
        at = kept if kept < self._maxlen else self._next
        self._times[at] = now
        self._values[at] = value
        self._next = (at + 1) % self._maxlen
        self.count += 1
        self.total += value

    def values(self, window_s: float | None = None) -> np.ndarray:
        """The kept values, oldest first, or those observed in the last ``window_s`` s."""
        with self._lock:
            kept = min(self.count, self._maxlen)
            order = np.arange(kept) if kept < self._maxlen else \
                (np.arange(kept) + self._next) % kept
            values = self._values[order]
            if window_s is None:
                return values
            times = self._times[order]
        return values[times >= time.monotonic() - window_s]

    def quantiles(self, qs: Iterable[float], window_s: float | None = None) -> list[float]:
        """Quantiles (0..1) of the kept (or recent) samples; NaN when there are none."""
        values = self.values(window_s)
        qs = list(qs)
        if values.size == 0:
            return [float("nan")] * len(qs)
        return [float(v) for v in np.quantile(values, qs)]

    def quantiles_ms(self, window_s: float | None = None) -> Quantiles:
        """p50/p95/p99 of the kept (or recent) samples, which are seconds, in ms."""
        return quantiles_ms(self.quantiles(QUANTILES, window_s))
