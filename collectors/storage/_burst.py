"""Write-burst detection: a short-window write rate against its own baseline.

A synchronous checkpoint is a large, periodic burst of writes while the GPUs
idle (``stalls-and-anchors.md`` §3: storage leaves at 1.1-1.4 Tbit/s against a
0.07 median). The baseline is the median of per-window rates over a longer
window, so periodic bursts that take less than half of it do not raise it.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BurstSettings:
    """Tuning shared by every detector of a collector.

    Attributes:
        window: seconds of the short window the rate is measured over.
        baseline_window: seconds of history the baseline median covers.
        factor: a rate this many times the baseline is a burst ...
        min_rate: ... but only if it is also at least this many bytes/s.
    """

    window: float = 10.0
    baseline_window: float = 600.0
    factor: float = 4.0
    min_rate: float = 50e6


@dataclass(frozen=True, slots=True)
class BurstState:
    """What one update concluded.

    Attributes:
        window_bytes: bytes written during the last ``window`` seconds
            (less if history is shorter).
        rate: ``window_bytes`` over the time it covers, bytes/s.
        baseline: median per-window rate over the baseline window (None
            until one full window has been seen).
        burst: True while writes exceed the baseline by the factor.
    """

    window_bytes: float
    rate: float
    baseline: float | None
    burst: bool


class BurstDetector:
    """Tracks one series of cumulative written bytes (already unwrapped)."""

    __slots__ = ("_bucket", "_burst", "_rates", "_recent", "_s")

    def __init__(self, settings: BurstSettings) -> None:
        self._s = settings
        self._recent: deque[tuple[float, float]] = deque()
        self._bucket: tuple[float, float] | None = None
        slots = max(3, int(settings.baseline_window / settings.window))
        self._rates: deque[float] = deque(maxlen=slots)
        self._burst = False

    def update(self, ts: float, total: float) -> BurstState:
        """Add a sample of the cumulative byte count taken at monotonic ``ts``."""
        s = self._s
        recent = self._recent
        if recent and (ts <= recent[-1][0] or total < recent[-1][1]):
            # Time did not advance or the total went back (device replaced):
            # start over rather than invent a rate.
            recent.clear()
            self._bucket = None
        recent.append((ts, total))
        # Keep one sample at or before the window start so the window is covered.
        while len(recent) > 2 and recent[1][0] <= ts - s.window:
            recent.popleft()
        t0, b0 = recent[0]
        span = ts - t0
        window_bytes = total - b0
        rate = window_bytes / span if span > 0 else 0.0
        if self._bucket is None:
            self._bucket = (ts, total)
        elif ts - self._bucket[0] >= s.window:
            bt, bb = self._bucket
            self._rates.append((total - bb) / (ts - bt))
            self._bucket = (ts, total)
        baseline = statistics.median(self._rates) if self._rates else None
        threshold = max(s.factor * (baseline or 0.0), s.min_rate)
        if baseline is None:
            self._burst = False
        elif self._burst:
            # Hysteresis: a burst ends when the rate falls well below the bar,
            # so one slow second inside a checkpoint does not split it.
            self._burst = rate >= threshold / 2
        else:
            self._burst = rate >= threshold
        return BurstState(window_bytes, rate, baseline, self._burst)
