"""The one place where device counters become rates.

Real counters misbehave in well-known ways (measured in the public Zhejiang Lab
switch traces, ``github.com/zhejianglab/Zhejiang-Lab-Cluster-Traces``):
they wrap at 2^32 or 2^64, reset when a device reboots or a driver reloads,
arrive after collector gaps holding a long interval's worth of delta, and
refresh more slowly than we poll (a zero delta followed by a double one).
:class:`CounterTracker` handles all of these so everything downstream sees a
rate with its true interval, never a negative, NaN or infinite value.

Timestamps must come from a monotonic clock; wall-clock steps would otherwise
produce spikes or negative intervals.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import NamedTuple, cast


class Rate(NamedTuple):
    """A per-second rate and the interval it covers (a NamedTuple: made per sample).

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


_new_rate = tuple.__new__
"""``Rate(...)`` without the Python-level ``__new__`` of NamedTuple (same object)."""
_rate_of = functools.partial(tuple.__new__, Rate)
"""``Rate`` from one (per_second, interval, held, gap) tuple, called in C by ``map``."""
_NO_SHAPE = (0.0, False, False)
"""The shape of :class:`PolledRates` that hold ``rates`` (unused there)."""


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


class PolledRates(NamedTuple):
    """One poll's rates of a :class:`FamilyCounters` family (a NamedTuple: made per poll
    and family).

    Either ``rates`` (one per series, None where there is none), or, when every
    series' rate covers the same interval - the steady poll, the common case -
    only the per-second figures: series ``i``'s rate is then
    ``Rate(per_second[i], *shape)``. A reader that needs only the figures (the
    store's history) takes them without a ``Rate`` made per series.

    Attributes:
        per_second: each series' rate per second, or None (then ``rates``).
        rates: each series' rate, or None (then ``per_second`` and ``shape``).
        shape: ``(interval, held, gap)`` of every rate in ``per_second``.
    """

    per_second: list[float] | None
    rates: list[Rate | None] | None
    shape: tuple[float, bool, bool]

    def all(self) -> list[Rate | None]:
        """Each series' rate (None where there is none)."""
        rates = self.rates
        if rates is not None:
            return rates
        per_second = self.per_second
        assert per_second is not None
        n = len(per_second)
        interval, held, gap = self.shape
        return list(
            map(
                _rate_of,
                zip(per_second, repeat(interval, n), repeat(held, n), repeat(gap, n), strict=True),
            )
        )


_new_polled = tuple.__new__
"""``PolledRates(...)`` without the Python-level ``__new__`` of NamedTuple."""


def wrapped_delta(prev: float, value: float, bits: int) -> float | None:
    """The increase from ``prev`` to a lower ``value`` where the counter
    wrapped, else None (a reset).

    A wrap leaves the old value in the top half of the range and the new
    one low. A counter declared wider than 32 bits that still reads below
    2^32 may be a 32-bit one: legacy InfiniBand port data counters, read
    through node_exporter or sysfs without extended counters, wrap at 2^32
    every few seconds at 25-200 Gb/s, and read as resets each would drop
    every other sample. A reset of such a counter from the top half of the
    32-bit range to a low value reads as a wrap (one sample's rate of at
    most 2^31 too much) instead of losing that sample.
    """
    modulus = 1 << bits  # int: exact for 64-bit values beyond 2**53
    wrapped = value + modulus - prev
    if prev >= modulus / 2 and 0 <= wrapped < modulus / 2:
        return wrapped
    if bits > 32 and 2**31 <= prev < 2**32:
        wrapped = value + 2**32 - prev
        if 0 <= wrapped < 2**31:
            return wrapped
    return None


def _negative_zero(x: float) -> bool:
    return x == 0.0 and math.copysign(1.0, x) < 0


class CounterState:
    """Rate state of one counter series; :class:`CounterTracker` keys these by series.

    Owners that already hold a per-series object (the snapshot store) keep a
    ``CounterState`` in it and skip the tracker's dict lookup.
    """

    __slots__ = ("change_ts", "epoch", "last_rate", "moved", "refresh", "total", "ts", "value")

    def __init__(self, value: float, ts: float, epoch: int | None) -> None:
        self.value = value
        self.ts = ts
        self.epoch = epoch
        self.change_ts = ts
        self.refresh: float | None = None  # shortest observed interval between changes
        self.last_rate = 0.0
        self.total = value
        self.moved = False

    def update(
        self,
        value: float,
        ts: float,
        settings: TrackerSettings,
        bits: int = 64,
        epoch: int | None = None,
    ) -> Rate | None:
        """See :meth:`CounterTracker.update`; ``value`` must already be finite and >= 0.

        ``bits`` and ``epoch`` may be passed by position (the store's hot loop does).
        """
        dt = ts - self.ts
        if dt <= 0:
            return None
        if epoch != self.epoch:
            self._reset(value, ts, epoch)
            return None
        delta = value - self.value
        if delta < 0:
            wrapped = wrapped_delta(self.value, value, bits)
            if wrapped is None:
                self._reset(value, ts, epoch)
                return None
            delta = wrapped
        self.value = value
        self.ts = ts
        self.total += delta
        since_change = ts - self.change_ts
        # Plain comparisons instead of min()/max() and tuple.__new__ instead of
        # Rate(...): this runs for every counter reading of every cycle.
        refresh = self.refresh
        max_hold = settings.max_hold
        if delta == 0:
            if self.moved:
                hold = settings.hold_factor * (dt if refresh is None else refresh)
                hold = max_hold if max_hold < hold else hold
                if since_change <= hold:
                    return _new_rate(Rate, (self.last_rate, since_change, True, False))
            return _new_rate(Rate, (0.0, dt, False, dt > settings.gap_after))
        hold = settings.hold_factor * (dt if refresh is None else refresh)
        hold = max_hold if max_hold < hold else hold
        # Within the hold window the zero polls were the counter not refreshing
        # yet, so the change covers the time since the last change. After a
        # genuinely quiet stretch (already reported as zeros) it covers only
        # this poll: a storm after an idle hour must read as a storm at once.
        interval = since_change if since_change <= (dt if hold < dt else hold) else dt
        per_second = delta / interval
        # Only an interval since a *recent* change tells the refresh period;
        # after a long quiet stretch it would overestimate it.
        if self.moved and interval <= max_hold:
            self.refresh = interval if refresh is None or interval < refresh else refresh
        self.change_ts = ts
        self.last_rate = per_second
        self.moved = True
        return _new_rate(Rate, (per_second, interval, False, interval > settings.gap_after))

    def _reset(self, value: float, ts: float, epoch: int | None) -> None:
        self.value = value
        self.ts = ts
        self.epoch = epoch
        self.change_ts = ts
        self.moved = False
        self.last_rate = 0.0
        # Prometheus semantics: after a reset the counter restarted from zero.
        self.total += value


def valid_sample(value: float) -> bool:
    """Counter samples must be finite and non-negative; anything else is ignored."""
    return value >= 0 and math.isfinite(value)


class CounterTracker:
    """Turns successive counter samples into rates, per series key.

    One instance per consumer (a collector that derives signals from rates
    owns one). Not thread-safe: use from one task.
    """

    __slots__ = ("_settings", "_states")

    def __init__(self, settings: TrackerSettings | None = None) -> None:
        self._settings = settings or TrackerSettings()
        self._states: dict[Hashable, CounterState] = {}

    @property
    def settings(self) -> TrackerSettings:
        """The tuning in force."""
        return self._settings

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
        if not valid_sample(value):
            return None
        st = self._states.get(key)
        if st is None:
            self._states[key] = CounterState(value, ts, epoch)
            return None
        return st.update(value, ts, self._settings, bits=bits, epoch=epoch)

    def state(self, key: Hashable) -> CounterState | None:
        """The live rate state of a series, None before its first sample: its
        ``update`` (with this tracker's settings) is :meth:`update` of the series,
        for a caller that feeds the same series every poll without a lookup each."""
        return self._states.get(key)

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


class FamilyCounters:
    """Rate state of a whole family of counters polled together, in one fixed order.

    The columnar twin of :class:`CounterState` for many-series families
    (NVLink per-link bytes and errors, per-priority PFC): one call per poll
    updates every series, with state in parallel lists instead of one object
    per series. Its results equal ``CounterState.update`` series by series
    (a property test compares them over wraps, resets, gaps and slow refresh).
    """

    __slots__ = (
        "_change_ts",
        "_common",
        "_epoch",
        "_last_rate",
        "_moved",
        "_negative_zero",
        "_refresh",
        "_total",
        "_ts",
        "_value",
        "bits",
        "settings",
    )

    def __init__(self, settings: TrackerSettings, bits: int = 64) -> None:
        self.settings = settings
        self.bits = bits
        self._value: list[float] = []
        self._ts: list[float] = []
        self._epoch: list[int | None] = []
        self._change_ts: list[float] = []
        self._refresh: list[float | None] = []
        self._last_rate: list[float] = []
        self._total: list[float] = []
        self._moved: list[bool] = []
        # Whether a total may be -0.0 (from a -0.0 sample: absurd, but finite and
        # not negative): a zero delta would turn it into 0.0, so the idle poll's
        # short cut (totals left as they are) is off then.
        self._negative_zero = False
        # (ts, epoch) when every series was last polled at ts with that epoch: the
        # next poll may take the steady path (see _steady).
        self._common: tuple[float, int | None] | None = None

    def __len__(self) -> int:
        return len(self._value)

    @property
    def totals(self) -> list[float]:
        """Each series' unwrapped running total (read-only)."""
        return self._total

    def add(self, value: float, ts: float, epoch: int | None = None) -> int:
        """Append a series seen for the first time; return its index."""
        return self._append((value, ts, epoch, ts, None, 0.0, value, False))

    def adopt(self, state: CounterState) -> int:
        """Append a series whose rate state so far is ``state``; return its index.

        The series goes on exactly as ``state.update`` would have gone on.
        """
        return self._append(
            (
                state.value,
                state.ts,
                state.epoch,
                state.change_ts,
                state.refresh,
                state.last_rate,
                state.total,
                state.moved,
            )
        )

    def take(self, other: FamilyCounters, index: int) -> int:
        """Append series ``index`` of ``other`` with its state; return its new index here."""
        return self._append(
            (
                other._value[index],
                other._ts[index],
                other._epoch[index],
                other._change_ts[index],
                other._refresh[index],
                other._last_rate[index],
                other._total[index],
                other._moved[index],
            )
        )

    def state(self, index: int) -> CounterState:
        """Series ``index``'s state as a :class:`CounterState` (it goes on the same way)."""
        st = CounterState(self._value[index], self._ts[index], self._epoch[index])
        st.change_ts = self._change_ts[index]
        st.refresh = self._refresh[index]
        st.last_rate = self._last_rate[index]
        st.total = self._total[index]
        st.moved = self._moved[index]
        return st

    def _append(
        self, row: tuple[float, float, int | None, float, float | None, float, float, bool]
    ) -> int:
        """Append one series' state: (value, ts, epoch, change_ts, refresh, last_rate,
        total, moved)."""
        value, ts, epoch, change_ts, refresh, last_rate, total, moved = row
        self._common = None
        self._value.append(value)
        self._ts.append(ts)
        self._epoch.append(epoch)
        self._change_ts.append(change_ts)
        self._refresh.append(refresh)
        self._last_rate.append(last_rate)
        self._total.append(total)
        self._moved.append(moved)
        if _negative_zero(total):
            self._negative_zero = True
        return len(self._value) - 1

    def update(
        self,
        values: Sequence[float],
        ts: float,
        epoch: int | None = None,
        skip: Collection[int] = (),
        epochs: Sequence[int | None] | None = None,
    ) -> list[Rate | None]:
        """One poll of every series (``values`` in index order, finite and >= 0).

        ``epochs``, when given, is each series' own epoch (instead of ``epoch``
        for all). Series whose index is in ``skip`` (their sample was invalid)
        get None and keep their state, as if they had not been polled.
        """
        return self.poll(values, ts, epoch, skip, epochs).all()

    def poll(
        self,
        values: Sequence[float],
        ts: float,
        epoch: int | None = None,
        skip: Collection[int] = (),
        epochs: Sequence[int | None] | None = None,
    ) -> PolledRates:
        """:meth:`update`, with the rates as :class:`PolledRates` (the steady poll
        makes no ``Rate`` per series)."""
        if epochs is not None and epochs and epochs.count(epochs[0]) == len(epochs):
            # Per-series epochs that are all one (every NIC port in its first life):
            # the same as that one epoch for all, and the steady path below applies.
            epoch, epochs = epochs[0], None
        common = self._common
        if common is not None and not skip and epochs is None and common[1] == epoch:
            # The steady poll: every series polled at one time with this epoch
            # last time. Deltas, totals and stored values in C (map), when none
            # went backwards (no reset, no wrap).
            prev = common[0]
            dt = ts - prev
            vals = self._value
            n = len(vals)
            if dt > 0 and len(values) == n:
                if values == vals and True not in self._moved and not self._negative_zero:
                    # An idle family (error counters): every rate is this
                    # interval's zero and no state but the poll time moves.
                    self._value = list(values)
                    self._ts = [ts] * n
                    self._common = (ts, epoch)
                    shape = (dt, False, dt > self.settings.gap_after)
                    return _new_polled(PolledRates, ([0.0] * n, None, shape))
                deltas = list(map(operator.sub, values, vals))
                lowest = min(deltas) if n else 0.0
                if lowest >= 0:
                    self._value = list(values)
                    self._total = list(map(operator.add, self._total, deltas))
                    self._ts = [ts] * n
                    self._common = (ts, epoch)
                    return self._steady_rates(deltas, lowest, ts, dt, prev)
        uniform = not skip and epochs is None and len(values) == len(self._value)
        self._common = (ts, epoch) if uniform else None
        steps, dts = self._advance(values, ts, epoch, skip, epochs)
        return _new_polled(PolledRates, (None, self._rates(steps, ts, dts), _NO_SHAPE))

    def _advance(
        self,
        values: Sequence[float],
        ts: float,
        epoch: int | None,
        skip: Collection[int],
        epochs: Sequence[int | None] | None,
    ) -> tuple[list[float | None], list[float]]:
        """Take this poll's values, series by series: (delta, interval) of each, delta
        None where there is no rate (clock not advancing, skipped, reset)."""
        bits = self.bits
        vals, tss, state_epochs = self._value, self._ts, self._epoch
        change, moved, last_rates = self._change_ts, self._moved, self._last_rate
        totals = self._total
        deltas: list[float | None] = []
        dts: list[float] = []
        for i, value in enumerate(values):
            dt = ts - tss[i]
            dts.append(dt)
            if dt <= 0 or (skip and i in skip):
                self._common = None  # this series keeps its older poll time
                deltas.append(None)
                continue
            prev = vals[i]
            delta = value - prev
            if epochs is not None:
                epoch = epochs[i]
            wrapped = wrapped_delta(prev, value, bits) if delta < 0 else None
            if epoch != state_epochs[i] or (delta < 0 and wrapped is None):
                # A reset (see CounterState._reset).
                vals[i] = value
                tss[i] = ts
                state_epochs[i] = epoch
                change[i] = ts
                moved[i] = False
                last_rates[i] = 0.0
                totals[i] += value
                if _negative_zero(totals[i]):  # -0.0 + -0.0 (the only way to a new -0.0)
                    self._negative_zero = True
                deltas.append(None)
                continue
            if wrapped is not None:
                delta = wrapped
            vals[i] = value
            tss[i] = ts
            totals[i] += delta
            deltas.append(delta)
        return deltas, dts

    def _steady_rates(
        self, deltas: list[float], lowest: float, ts: float, dt: float, prev: float
    ) -> PolledRates:
        """:meth:`_rates` of the steady poll (every series has a delta over ``dt``,
        since the previous poll at ``prev``; ``lowest`` is the smallest delta).

        A series that did not move this poll and had not moved before reads the one
        zero rate of this interval and has no state to update (``_rates`` takes the
        same branch for it); the others go through :meth:`_regular`, or through
        ``_rates`` one by one when that does not apply. Every rate but ``_rates``'
        covers ``dt``: the result is per-second figures of one shape then.
        """
        n = len(deltas)
        shape = (dt, False, dt > self.settings.gap_after)
        moved = self._moved
        n_moved = moved.count(True)
        if n_moved == n:
            # Every series moved before: regular when each moves again and each
            # moved at the previous poll (its last change is ``prev``).
            if lowest > 0 and self._change_ts.count(prev) == n and None not in self._refresh:
                per_second = self._regular(deltas, ts, dt, None)
                return _new_polled(PolledRates, (per_second, None, shape))
            return _new_polled(PolledRates, (None, self._rates(deltas, ts, [dt] * n), _NO_SHAPE))
        if n_moved == 0:
            if lowest > 0:  # all move for the first time
                return _new_polled(
                    PolledRates, (None, self._rates(deltas, ts, [dt] * n), _NO_SHAPE)
                )
            if not any(deltas):
                return _new_polled(PolledRates, ([0.0] * n, None, shape))
        busy = list(compress(range(n), map(operator.or_, map(bool, deltas), moved)))
        moving = [deltas[i] for i in busy]
        if len(busy) > 1 and min(moving) > 0:
            pick = operator.itemgetter(*busy)  # >= 2 rows: tuples
            k = len(busy)
            if (
                pick(moved).count(True) == k
                and pick(self._change_ts).count(prev) == k
                and None not in pick(self._refresh)
            ):
                out = [0.0] * n
                for i, rate in zip(busy, self._regular(moving, ts, dt, busy), strict=True):
                    out[i] = rate
                return _new_polled(PolledRates, (out, None, shape))
        rates: list[Rate | None] = [_new_rate(Rate, (0.0, *shape))] * n
        for i, r in zip(busy, self._rates(moving, ts, [dt] * n, busy), strict=True):
            rates[i] = r
        return _new_polled(PolledRates, (None, rates, _NO_SHAPE))

    def _regular(
        self, deltas: list[float], ts: float, dt: float, rows: list[int] | None
    ) -> list[float]:
        """The per-second rates (each over ``dt``) of series that each moved at the
        previous poll and move again now (every delta > 0, every refresh period
        known: the caller checks), in C (``map``).

        For such a series :meth:`_rates` takes one branch: the interval since its
        last change is ``dt`` (within any hold window), the rate is ``delta / dt``,
        and its refresh period becomes ``min(refresh, dt)`` when ``dt`` is within
        ``max_hold``; computed here the same way, the results are the same floats.
        ``rows``: the series ``deltas`` are of (default: all, in order).
        """
        n = len(deltas)
        per_second = list(map(operator.truediv, deltas, repeat(dt, n)))
        lower = dt <= self.settings.max_hold
        if rows is None:
            self._change_ts = [ts] * n
            self._last_rate = per_second[:]
            refresh = cast("list[float]", self._refresh)  # no None (checked by the caller)
            # min(r, dt) is dt only where dt < r: mostly none is (the refresh
            # period is the shortest interval seen), and the list stays as it is.
            if lower and max(refresh) > dt:
                self._refresh = [dt if dt < r else r for r in refresh]
            return per_second
        changes, last_rates, refreshes = self._change_ts, self._last_rate, self._refresh
        for i, rate in zip(rows, per_second, strict=True):
            changes[i] = ts
            last_rates[i] = rate
            r = refreshes[i]
            if lower and r is not None and dt < r:
                refreshes[i] = dt
        return per_second

    def _rates(
        self,
        deltas: Sequence[float | None],
        ts: float,
        dts: list[float],
        rows: Sequence[int] | None = None,
    ) -> list[Rate | None]:
        """Each series' rate from its delta over ``dts[i]`` (None: no rate), with
        :meth:`CounterState.update`'s hold and refresh logic. ``rows``: the series
        ``deltas`` are of, in order (default: all, ``deltas[i]`` is series ``i``'s)."""
        settings = self.settings
        gap_after = settings.gap_after
        hold_factor = settings.hold_factor
        max_hold = settings.max_hold
        change, refreshes, last_rates = self._change_ts, self._refresh, self._last_rate
        moved = self._moved
        out: list[Rate | None] = []
        push = out.append
        zero_dt = math.nan
        zero = _new_rate(Rate, (0.0, 0.0, False, False))
        for i, delta in zip(range(len(deltas)) if rows is None else rows, deltas, strict=True):
            if delta is None:
                push(None)
                continue
            dt = dts[i]
            refresh = refreshes[i]
            hold = hold_factor * (dt if refresh is None else refresh)
            hold = max_hold if max_hold < hold else hold
            since_change = ts - change[i]
            if delta == 0:
                if moved[i] and since_change <= hold:
                    push(_new_rate(Rate, (last_rates[i], since_change, True, False)))
                    continue
                if dt != zero_dt:  # one zero-rate object per interval, shared
                    zero_dt = dt
                    zero = _new_rate(Rate, (0.0, dt, False, dt > gap_after))
                push(zero)
                continue
            interval = since_change if since_change <= (dt if hold < dt else hold) else dt
            per_second = delta / interval
            if moved[i] and interval <= max_hold:
                refreshes[i] = interval if refresh is None or interval < refresh else refresh
            change[i] = ts
            last_rates[i] = per_second
            moved[i] = True
            push(_new_rate(Rate, (per_second, interval, False, interval > gap_after)))
        return out
