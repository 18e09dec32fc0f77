"""The wait between a lost camera's connection attempts: exponential, capped and jittered."""

from __future__ import annotations

import random

from pipelines.errors import ConfigError


class Backoff:
    """Delays between connection attempts: ``initial * 2**n``, capped at ``cap``, each shortened
    by a random fraction up to ``jitter`` so that many cameras behind one failed switch do not
    reconnect in lockstep. Jitter only ever shortens a delay, so ``cap`` is a true upper bound:
    the time to come back after the server returns is at most ``cap`` plus one connection."""

    def __init__(self, initial: float, cap: float, jitter: float, *,
                 rng: random.Random | None = None) -> None:
        if initial <= 0 or cap < initial:
            raise ConfigError(f"backoff needs 0 < initial <= cap, got initial {initial} s, "
                              f"cap {cap} s")
        if not 0 <= jitter < 1:
            raise ConfigError(f"backoff jitter must be in [0, 1), got {jitter}")
        self.initial, self.cap, self.jitter = initial, cap, jitter
        self._rng = rng or random.Random()
        self._attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call doubles the base up to the cap."""
        base = min(self.cap, self.initial * 2.0 ** min(self._attempt, 60))
        self._attempt += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """After a connection that delivered video: the next outage starts from ``initial``."""
        self._attempt = 0
