"""The one place where device counters become rates.

Real counters misbehave in well-known ways (``../shared/reference/stalls-and-anchors.md`` §6):
they wrap at 2^32 or 2^64, reset when a device reboots or a driver reloads,
arrive after collector gaps holding a long interval's worth of delta, and
refresh more slowly than we poll (a zero delta followed by a double one).
:class:`CounterTracker` handles all of these so everything downstream sees a
rate with its true interval, never a negative, NaN or infinite value.

Timestamps must come from a monotonic clock; wall-clock steps would otherwise
produce spikes or negative intervals.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rate:
    """A per-second rate and the interval it covers.

    Attributes:
        per_second: the rate, always finite and >= 0.
        interval: seconds the rate covers (since the counter last changed).
        held: True when the counter did not change this poll and the
            previous rate is repeated because the counter refreshes slower
            than it is polled.
        gap: True when the interval was longer than the gap threshold: the
            delta is spread over the whole gap rather than reported as a spike.
    """

    per_second: float
    interval: float
    held: bool = False
    gap: bool = False


@dataclass(slots=True)
class _State:
    value: float
    ts: float
    epoch: int | None
    change_ts: float
    refresh: float | None  # shortest observed interval between changes
    last_rate: float
    total: float
    moved: bool


@dataclass(frozen=True, slots=True)
class TrackerSettings:
    """Tuning of :class:`CounterTracker`.

    Attributes:
        gap_after: an interval longer than this (seconds) is a gap.
        hold_factor: a non-moving counter repeats its last rate for up to
            ``hold_factor`` x its observed refresh period ...
        max_hold: ... but never for longer than this many seconds.
    """

    gap_after: float = 10.0
    hold_factor: float = 2.0
    max_hold: float = 5.0


class CounterTracker:
    """Turns successive counter samples into rates, per series key.

    One instance per consumer (the pipeline has one; a collector that derives
    signals from rates may own another). Not thread-safe: use from one task.
    """

    __slots__ = ("_settings", "_states")

    def __init__(self, settings: TrackerSettings | None = None) -> None:
        self._settings = settings or TrackerSettings()
        self._states: dict[Hashable, _State] = {}

    def __len__(self) -> int:
        return len(self._states)

    def update(
        self,
        key: Hashable,
        value: float,
        ts: float,
        *,
        bits: int = 64,
        epoch: int | None = None,
    ) -> Rate | None:
        """Record a counter sample; return its rate, or None when there is none yet.

        None is returned for the first sample, after a reset (the counter went
        back without a plausible wrap, or ``epoch`` changed), for samples that
        are not finite or negative (ignored entirely), and for samples whose
        timestamp does not advance.
        """
        if not math.isfinite(value) or value < 0:
            return None
        st = self._states.get(key)
        if st is None:
            self._states[key] = _State(value, ts, epoch, ts, None, 0.0, value, False)
            return None
        dt = ts - st.ts
        if dt <= 0:
            return None
        if epoch != st.epoch:
            self._reset(st, value, ts, epoch, counted=value)
            return None
        delta = value - st.value
        if delta < 0:
            modulus = 1 << bits  # int: exact for 64-bit values beyond 2**53
            wrapped = value + modulus - st.value
            # A wrap leaves the old value in the top half of the range and the
            # new one low; anything else going backwards is a reset.
            if st.value >= modulus / 2 and 0 <= wrapped < modulus / 2:
                delta = wrapped
            else:
                self._reset(st, value, ts, epoch, counted=value)
                return None
        st.value = value
        st.ts = ts
        st.total += delta
        s = self._settings
        if delta == 0:
            since_change = ts - st.change_ts
            period = st.refresh if st.refresh is not None else dt
            if st.moved and since_change <= min(s.hold_factor * period, s.max_hold):
                return Rate(st.last_rate, since_change, held=True)
            return Rate(0.0, dt, gap=dt > s.gap_after)
        # The value only moves at changes, so ``delta`` is the whole change
        # since ``change_ts``: spread it over that interval.
        interval = ts - st.change_ts
        per_second = delta / interval
        # Only an interval since a *recent* change tells the refresh period;
        # after a long quiet stretch it would overestimate it.
        if st.moved and interval <= s.max_hold:
            st.refresh = interval if st.refresh is None else min(st.refresh, interval)
        st.change_ts = ts
        st.last_rate = per_second
        st.moved = True
        return Rate(per_second, interval, gap=interval > s.gap_after)

    def total(self, key: Hashable) -> float | None:
        """The unwrapped running total of a series (monotonic except across resets)."""
        st = self._states.get(key)
        return None if st is None else st.total

    def forget(self, key: Hashable) -> None:
        """Drop a series (its device went away)."""
        self._states.pop(key, None)

    def prune(self, older_than: float) -> int:
        """Drop series not updated since ``older_than``; return how many went."""
        old = [k for k, st in self._states.items() if st.ts < older_than]
        for k in old:
            del self._states[k]
        return len(old)

    @staticmethod
    def _reset(st: _State, value: float, ts: float, epoch: int | None, *, counted: float) -> None:
        st.value = value
        st.ts = ts
        st.epoch = epoch
        st.change_ts = ts
        st.moved = False
        st.last_rate = 0.0
        # Prometheus semantics: after a reset the counter restarted from zero.
        st.total += counted
