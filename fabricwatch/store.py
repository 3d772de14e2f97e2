"""The snapshot store: latest value and a bounded history per series.

Collectors' readings land here (counters through the one
:class:`~fabricwatch.counters.CounterTracker`); ``/metrics``, MQTT and the
engine only read. Memory is bounded by configuration: each series keeps at
most ``history`` points, and series not refreshed for ``stale_after`` seconds
are dropped (a NIC unplugged, a GPU lost).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from fabricwatch.counters import CounterState, Rate, TrackerSettings
from fabricwatch.readings import HistogramValue, MetricKind, MetricSpec, Reading

SeriesKey = tuple[str, tuple[str, ...]]
_Route = tuple[MetricSpec, dict[tuple[str, ...], "Series"], bool]
"""(spec, the family's series by labels, whether it is a counter), per family a collector feeds."""


class Point(NamedTuple):
    """One point of a series' history: a gauge value or a counter's rate."""

    ts: float
    value: float


@dataclass(slots=True)
class Series:
    """State of one series. Read-only outside the store.

    Attributes:
        value: latest gauge value, or a counter's unwrapped running total.
        rate: a counter's latest rate (None for gauges or before two samples).
        history: recent points; for counters, rates.
        updated: monotonic time of the latest reading.
    """

    spec: MetricSpec
    labels: tuple[str, ...]
    collector: str
    value: float
    updated: float
    history: deque[Point]
    rate: Rate | None = None
    histogram: HistogramValue | None = None
    counter: CounterState | None = None

    def label_map(self) -> dict[str, str]:
        """Labels as a name -> value mapping (allocates; not for hot paths)."""
        return dict(zip(self.spec.labels, self.labels, strict=True))


@dataclass(slots=True)
class IngestResult:
    """What one :meth:`SnapshotStore.ingest` call did."""

    accepted: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


class SnapshotStore:
    """Per-series latest values and bounded history.

    Single-threaded by design: everything runs on the daemon's event loop.
    """

    def __init__(
        self,
        *,
        history: int = 600,
        stale_after: float = 300.0,
        tracker: TrackerSettings | None = None,
    ) -> None:
        if history < 1:
            msg = "history must be >= 1"
            raise ValueError(msg)
        self._history = history
        self._stale_after = stale_after
        self._tracker = tracker or TrackerSettings()
        self._specs: dict[str, MetricSpec] = {}
        self._owners: dict[str, set[str]] = {}
        self._series: dict[SeriesKey, Series] = {}
        self._by_name: dict[str, dict[tuple[str, ...], Series]] = {}
        # Per collector: family name -> _Route, for the families that
        # collector may feed; one dict lookup per reading instead of three.
        # Rebuilt lazily after every register().
        self._routes: dict[str, dict[str, _Route]] = {}

    def register(self, collector: str, specs: Iterable[MetricSpec]) -> None:
        """Declare the families a collector produces. Names are unique across collectors."""
        for spec in specs:
            known = self._specs.get(spec.name)
            if known is not None and known != spec:
                owners = ", ".join(sorted(self._owners[spec.name]))
                msg = f"metric {spec.name} is declared differently by {owners} and {collector}"
                raise ValueError(msg)
            # Two sources may feed one family (SNMP and gNMI both report switch
            # ports) when they declare it identically.
            self._owners.setdefault(spec.name, set()).add(collector)
            self._specs[spec.name] = spec
            self._by_name.setdefault(spec.name, {})
        self._routes.clear()

    def _route(self, collector: str) -> dict[str, _Route]:
        routes = {
            name: (spec, self._by_name[name], spec.kind is MetricKind.COUNTER)
            for name, spec in self._specs.items()
            if collector in self._owners[name]
        }
        self._routes[collector] = routes
        return routes

    def specs(self) -> Mapping[str, MetricSpec]:
        """Every registered family by name."""
        return self._specs

    def ingest(self, collector: str, readings: Iterable[Reading], now: float) -> IngestResult:
        """Store one collection's readings, taken at monotonic time ``now``.

        Readings of undeclared families, with the wrong number of labels, or
        with a non-finite value are rejected and counted, never raised.
        """
        result = IngestResult()
        routes = self._routes.get(collector)
        if routes is None:
            routes = self._route(collector)
        series_map = self._series
        tracker = self._tracker
        history = self._history
        histogram = MetricKind.HISTOGRAM
        isfinite = math.isfinite
        new_point = tuple.__new__  # Point(...) without NamedTuple's Python-level __new__
        accepted = 0
        # Readings are unpacked, not read by attribute: it is the hottest loop
        # of the daemon (thousands of readings per second). The label count
        # is checked when a series is created: an existing series was found
        # by an equal label tuple.
        for name, labels, value, r_ts, epoch, hist in readings:
            route = routes.get(name)
            if route is None:
                result.reject("undeclared")
                continue
            if not isfinite(value):
                result.reject("not_finite")
                continue
            spec, family, is_counter = route
            ts = now if r_ts is None else r_ts
            s = family.get(labels)
            if s is None:
                if len(labels) != len(spec.labels):
                    result.reject("labels")
                    continue
                s = Series(spec, labels, collector, value, ts, deque(maxlen=history))
                series_map[(name, labels)] = s
                family[labels] = s
            s.updated = ts
            if is_counter:
                if value < 0:  # finite already: this is valid_sample()
                    result.reject("negative")
                    continue
                cs = s.counter
                if cs is None:
                    s.counter = cs = CounterState(value, ts, epoch)
                    rate = None
                else:
                    rate = cs.update(value, ts, tracker, spec.bits, epoch)
                s.value = cs.total
                s.rate = rate
                if rate is not None:
                    s.history.append(new_point(Point, (ts, rate.per_second)))
            else:
                s.value = value
                if spec.kind is histogram:
                    s.histogram = hist
                s.history.append(new_point(Point, (ts, value)))
            accepted += 1
        result.accepted = accepted
        return result

    def expire(self, now: float) -> int:
        """Drop series not updated for ``stale_after`` seconds; return how many."""
        cutoff = now - self._stale_after
        old = [k for k, s in self._series.items() if s.updated < cutoff]
        for key in old:
            del self._series[key]
            del self._by_name[key[0]][key[1]]
        return len(old)

    def get(self, name: str, labels: tuple[str, ...]) -> Series | None:
        """One series, or None."""
        return self._series.get((name, labels))

    def family(self, name: str) -> Sequence[Series]:
        """Every series of one family (empty if none or undeclared)."""
        return tuple(self._by_name.get(name, {}).values())

    def __iter__(self) -> Iterator[Series]:
        return iter(tuple(self._series.values()))

    def __len__(self) -> int:
        return len(self._series)
