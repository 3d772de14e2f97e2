"""Gauges derived from counter rates: pause-time fraction and transmit-wait fraction.

The pipeline turns exported counters into rates; these two signals need a
rate *inside* the collector (a ratio is exported, not a counter), so the
collector owns one :class:`~fabricwatch.counters.CounterTracker` and feeds it
here. No delta or wrap logic lives in this module.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable

from fabricwatch.counters import CounterState, CounterTracker, TrackerSettings

PAUSE_QUANTA_PER_FRAME = 65535
"""The largest pause time a PFC/802.3x frame can request, in quanta."""
BIT_TIMES_PER_QUANTUM = 512


def clamp_ratio(value: float) -> float:
    """Clamp to [0, 1]; NaN becomes 0."""
    if not value > 0.0:
        return 0.0
    return min(value, 1.0)


def pause_ratio_from_duration(us_per_second: float) -> float:
    """Fraction of time paused from a pause-duration counter's rate (µs per second)."""
    return clamp_ratio(us_per_second / 1e6)


def pause_ratio_from_frames(frames_per_second: float, link_bps: float) -> float:
    """Upper-bound estimate of the paused fraction from pause frames alone.

    Each frame is assumed to request the maximum 65535 quanta of 512 bit
    times; an XON (or a shorter quanta value) ends a pause earlier, so this
    overestimates a light pause and saturates at 1 under a storm.
    """
    if link_bps <= 0:
        return 0.0
    return clamp_ratio(
        frames_per_second * PAUSE_QUANTA_PER_FRAME * BIT_TIMES_PER_QUANTUM / link_bps
    )


def xmit_wait_ratio(ticks_per_second: float, link_bps: float, tick_bytes: float) -> float:
    """Share of time a port waited to transmit, from ``port_xmit_wait``'s rate.

    One tick is the time to send ``tick_bytes`` bytes at the link rate
    (NVIDIA documents 8 bytes for Quantum-generation ports; configurable).
    """
    if link_bps <= 0:
        return 0.0
    return clamp_ratio(ticks_per_second * tick_bytes * 8.0 / link_bps)


class RateSignals:
    """Rates of the few counters the collector turns into gauges.

    Args:
        tracker: the collector's own counter tracker.
    """

    __slots__ = ("_keys", "_seen", "_tracker")

    def __init__(self, tracker: CounterTracker | None = None) -> None:
        self._tracker = tracker or CounterTracker()
        self._keys: set[Hashable] = set()
        self._seen: set[Hashable] = set()

    def rate(
        self, key: Hashable, value: float, ts: float, *, bits: int = 64, epoch: int = 0
    ) -> float | None:
        """Per-second rate of counter ``key``, or None before two samples / after a reset."""
        self._seen.add(key)
        r = self._tracker.update(key, value, ts, bits=bits, epoch=epoch)
        return None if r is None else r.per_second

    @property
    def settings(self) -> TrackerSettings:
        """The tracker's tuning (what :meth:`state` objects update with)."""
        return self._tracker.settings

    def state(self, key: Hashable) -> CounterState | None:
        """The live rate state of ``key`` (see :meth:`CounterTracker.state`); a caller
        that updates it directly says so with :meth:`fed` each cycle."""
        return self._tracker.state(key)

    def fed(self, keys: Collection[Hashable]) -> None:
        """Mark ``keys`` fed this cycle through their :meth:`state` (kept by :meth:`sweep`)."""
        self._seen.update(keys)

    def sweep(self) -> int:
        """Forget series not fed since the previous sweep (hot-unplugged); return how many."""
        stale = 0
        for key in list(self._keys - self._seen):
            self._tracker.forget(key)
            self._keys.discard(key)
            stale += 1
        self._keys |= self._seen
        self._seen = set()
        return stale
