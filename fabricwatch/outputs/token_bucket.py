"""Flood control of one sink: a token bucket."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """Flood control: at most ``rate`` requests per second, bursts of ``burst``."""

    def __init__(
        self, rate: float, burst: int, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._mono = monotonic
        self._tokens = float(self.burst)
        self._at = monotonic()

    def _refill(self) -> None:
        now = self._mono()
        if self.rate > 0:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def delay(self) -> float:
        """Seconds until a request may go (0 = now)."""
        if self.rate <= 0:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        """Spend one token (call after :meth:`delay` returned 0)."""
        if self.rate <= 0:
            return
        self._refill()
        self._tokens -= 1.0
