"""Counter rates the switch collector derives gauges from (utilization, pause ratios).

A 512-port switch polled in switch mode has ~9 000 such counters. One
:class:`~fabricwatch.counters.FamilyCounters` per target and counter width takes
them all in one call per poll (its steady path works in C), instead of a
:class:`~fabricwatch.counters.CounterTracker` lookup and a
:class:`~fabricwatch.counters.CounterState` call per counter; the results are
the tracker's, counter by counter (``tests/switch/test_columns.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from fabricwatch.counters import CounterState, FamilyCounters, Rate, TrackerSettings


class KeyedRates:
    """Rates of counters identified by key, polled together in one order that may change.

    While a poll's keys equal the last poll's (the same key tuples: an identity
    check each), every counter goes through one :meth:`FamilyCounters.update`.
    When they differ the rows are laid out again: a known key keeps its state, a
    new one starts (no rate yet), and one that left keeps its state for when it
    comes back, as :meth:`CounterTracker.update` would.
    """

    __slots__ = ("_bits", "_fc", "_keys", "_parked", "_settings")

    def __init__(self, settings: TrackerSettings, bits: int = 64) -> None:
        self._settings = settings
        self._bits = bits
        self._fc = FamilyCounters(settings, bits)
        self._keys: tuple[Hashable, ...] = ()
        self._parked: dict[Hashable, CounterState] = {}

    def update(
        self,
        keys: tuple[Hashable, ...],
        values: Sequence[float],
        ts: float,
        epochs: Sequence[int | None],
    ) -> list[Rate | None]:
        """One poll: ``values[i]`` (finite, >= 0) of counter ``keys[i]`` with its epoch;
        each counter's rate, None where there is none yet (see ``CounterTracker.update``)."""
        if keys == self._keys:
            return self._fc.update(values, ts, None, (), epochs)
        old = self._fc
        rows = {k: i for i, k in enumerate(self._keys)}
        fc = FamilyCounters(self._settings, self._bits)
        for key, value, epoch in zip(keys, values, epochs, strict=True):
            row = rows.pop(key, None)
            if row is not None:
                fc.take(old, row)
                continue
            parked = self._parked.pop(key, None)
            if parked is not None:
                fc.adopt(parked)
            else:
                # The first sample: update() at the same ts gives no rate, as the
                # tracker gives none for a key it has not seen.
                fc.add(value, ts, epoch)
        for key, row in rows.items():
            self._parked[key] = old.state(row)
        self._fc, self._keys = fc, keys
        return fc.update(values, ts, None, (), epochs)
