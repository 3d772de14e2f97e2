"""The snapshot store: latest value and a bounded history per series.

The store is the registry of every series the daemon exports, not an input
bus. Every producer - each collector, the engine, alerting and the daemon's
own state - declares its families with :meth:`SnapshotStore.register` and
writes through :meth:`SnapshotStore.ingest` under its own name, so one family
has one owner and one place to be read. Nothing is pushed to subscribers:
``/metrics`` and MQTT read the latest values, the engine reads the collectors'
families (latest values and history) once per tick and writes its own
results back as one more producer. Counters become rates here, with the same
arithmetic as :class:`~fabricwatch.counters.CounterTracker`.

A collector may hand a family whole, as :class:`~fabricwatch.readings.Columns`
inside a :class:`~fabricwatch.readings.Batch` (the GPU's per-link NVLink
families, the NIC's counters): its series are matched once per change of the
labels tuple and its counters converted by one
:class:`~fabricwatch.counters.FamilyCounters` per family, with the same results
as reading by reading. A collector feeds a family one way or the other in a
cycle, not both.

Memory is bounded by configuration: each series keeps at most ``history``
points, and series not refreshed for ``stale_after`` seconds are dropped (a NIC
unplugged, a GPU lost).

History is packed: two preallocated ``array('d')`` rings per series, its
points' times and values (16 bytes a point, no per-point Python object for
the garbage collector to walk), and only for the families a reader of
history names (``history_families``: the engine's); ``/metrics`` and MQTT
read the latest value only. Rings are allocated full-size when a series is
created, so the store's memory at start-up is already its steady-state
memory. The series a collector creates together as one family's
:class:`~fabricwatch.readings.Columns` (a GPU's NVLink links: 18 per GPU and
direction) are polled together and share one ring of times, 8 bytes a point
less for each, while every one of them gets a point on every poll; before
their points may differ (an invalid value, a missing rate, a series absent
from a poll or fed alone, expiry) each takes its own copy of the times.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from types import MappingProxyType
from typing import NamedTuple, overload

from fabricwatch.counters import CounterState, FamilyCounters, Rate, TrackerSettings
from fabricwatch.readings import Batch, Columns, HistogramValue, MetricKind, MetricSpec, Reading

_Route = tuple[MetricSpec, dict[tuple[str, ...], "Series"], bool, bool, int, bool]
"""(spec, the family's series by labels, whether it is a counter, whether it keeps
history, the counter width, whether it is a histogram), per family a collector feeds."""


class Point(NamedTuple):
    """One point of a series' history: a gauge value or a counter's rate."""

    ts: float
    value: float


_new_point = tuple.__new__  # Point(...) without NamedTuple's Python-level __new__


class History(Sequence[Point]):
    """Read-only view of one series' history ring: points oldest first.

    A view made on each access of :attr:`Series.history`; it reads the rings in
    place (the store's next ingest may overwrite the oldest point).
    """

    __slots__ = ("_n", "_order", "_ts")

    def __init__(
        self, ring_ts: array[float] | None, ring: array[float] | None, head: int, full: bool
    ) -> None:
        self._ts = ring_ts
        if ring is None or ring_ts is None:
            self._order: tuple[array[float], int, int] | None = None
            self._n = 0
        else:
            self._order = (ring, head, len(ring) if full else head)
            self._n = len(ring) if full else head

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def _index(self, i: int) -> int:
        """Slot of the i-th point (0 = oldest) in the rings."""
        assert self._order is not None
        ring, head, used = self._order
        if used < len(ring):  # not wrapped yet: the oldest point is at 0
            return i
        off = head + i
        return off - used if off >= used else off

    @overload
    def __getitem__(self, index: int) -> Point: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Point]: ...
    def __getitem__(self, index: int | slice) -> Point | Sequence[Point]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            msg = "history index out of range"
            raise IndexError(msg)
        assert self._order is not None and self._ts is not None
        k = self._index(index)
        return _new_point(Point, (self._ts[k], self._order[0][k]))

    def tail_times(self, n: int) -> list[float]:
        """The times of the newest ``n`` points (every point, when fewer), oldest
        first: read off the ring in place, without a :class:`Point` each."""
        m = min(n, self._n)
        if self._order is None or self._ts is None or m <= 0:
            return []
        ts = self._ts
        _, head, used = self._order
        if used < len(ts):  # not wrapped: the newest point ends at ``used``
            return ts[used - m : used].tolist()
        if head >= m:
            return ts[head - m : head].tolist()
        return ts[used - (m - head) :].tolist() + ts[0:head].tolist()

    def _offsets(self, newest_first: bool) -> Iterable[int]:
        if self._order is None:
            return ()
        ring, head, used = self._order
        if used < len(ring):
            return range(used - 1, -1, -1) if newest_first else range(used)
        if newest_first:
            return chain(range(head - 1, -1, -1), range(used - 1, head - 1, -1))
        return chain(range(head, used), range(head))

    def __iter__(self) -> Iterator[Point]:
        if self._order is None or self._ts is None:
            return
        ring, ts = self._order[0], self._ts
        for k in self._offsets(False):
            yield _new_point(Point, (ts[k], ring[k]))

    def __reversed__(self) -> Iterator[Point]:
        if self._order is None or self._ts is None:
            return
        ring, ts = self._order[0], self._ts
        for k in self._offsets(True):
            yield _new_point(Point, (ts[k], ring[k]))


@dataclass(slots=True)
class Series:
    """State of one series. Read-only outside the store.

    Attributes:
        value: latest gauge value, or a counter's unwrapped running total.
        rate: a counter's latest rate (None for gauges or before two samples).
        history: recent points, oldest first; for counters, rates (empty for
            families the store keeps no history of).
        updated: monotonic time of the latest reading.
        ring: the history ring of values (counters: rates), or None; written
            by the store only.
        ring_ts: the history ring of the points' times (None with ``ring``);
            series created and polled together as columns share one.
        head: slot in the rings of the next point to write.
        full: whether the rings have wrapped (every slot holds a point).
        text_labels: the labels as the exposition writes them (sorted,
            escaped), cached here by ``/metrics`` so it dies with the series;
            one string for the series of every family with these labels.
    """

    spec: MetricSpec
    labels: tuple[str, ...]
    collector: str
    value: float
    updated: float
    ring: array[float] | None
    ring_ts: array[float] | None
    head: int = 0
    full: bool = False
    # The latest rate, or (the steady column path) only its per-second figure,
    # the rest of it in ``_shape``: no Rate is made per series and poll for a
    # field the daemon itself hardly reads (see the ``rate`` property).
    _rate: Rate | float | None = None
    histogram: HistogramValue | None = None
    counter: CounterState | None = None
    text_labels: str | None = None
    _shape: tuple[float, bool, bool] = (0.0, False, False)

    @property
    def rate(self) -> Rate | None:
        """A counter's latest rate (None for gauges or before two samples)."""
        r = self._rate
        if isinstance(r, float):
            return Rate(r, *self._shape)
        return r

    @property
    def history(self) -> History:
        """Recent points, oldest first (a view; see :class:`History`)."""
        return History(self.ring_ts, self.ring, self.head, self.full)

    def first_ts(self) -> float | None:
        """Time of the oldest point in :attr:`history` (None when it is empty),
        without a view."""
        ts = self.ring_ts
        if ts is None:
            return None
        if self.full:
            return ts[self.head]
        return ts[0] if self.head else None

    def ordered_rings(self) -> tuple[array[float], array[float]]:
        """Copies of the history's times and values, oldest first (empty
        without rings)."""
        ts, ring = self.ring_ts, self.ring
        if ts is None or ring is None:
            return array("d"), array("d")
        head = self.head
        if self.full:
            return ts[head:] + ts[:head], ring[head:] + ring[:head]
        return ts[:head], ring[:head]

    def label_map(self) -> dict[str, str]:
        """Labels as a name -> value mapping (allocates; not for hot paths)."""
        return dict(zip(self.spec.labels, self.labels, strict=True))


@dataclass(slots=True)
class _ColumnState:
    """The series one collector feeds a family's :class:`Columns` into, in column order.

    Counter state lives in ``counters`` (row ``i`` for ``series[i]``), not in the
    series' own :class:`CounterState`. ``labels`` is the labels tuple the series
    were matched for; None after :meth:`SnapshotStore.expire` dropped some.
    """

    labels: tuple[tuple[str, ...], ...] | None
    series: list[Series]
    counters: FamilyCounters | None
    rings: bool = True
    """Whether any of ``series`` keeps a history ring (a series' ring never comes or goes)."""
    times: array[float] | None = None
    """The ring of times every one of ``series`` shares, and no other series
    does (None: each has its own). Shared only while every one of them gets a
    point on every poll (the steady path): anything else gives each its own
    copy first (:func:`_own_times`)."""


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
        history_families: Collection[str] | None = None,
    ) -> None:
        """``history_families``: the families whose series keep a history ring
        (None: every family)."""
        if history < 1:
            msg = "history must be >= 1"
            raise ValueError(msg)
        self._history = history
        self._stale_after = stale_after
        self._tracker = tracker or TrackerSettings()
        self._history_families = None if history_families is None else frozenset(history_families)
        self._blank = array("d", (0.0,)) * history  # copied for each new ring
        # A lower bound of every series' ``updated``: expire() scans only when
        # some series may be older than its cutoff (it runs every tick).
        self._oldest = math.inf
        self._specs: dict[str, MetricSpec] = {}
        self._owners: dict[str, set[str]] = {}
        # Every series, by family and then by label values: the one index (a second
        # one by (family, labels) cost ~100 bytes a series, ~10 MiB in switch mode).
        self._by_name: dict[str, dict[tuple[str, ...], Series]] = {}
        # Per collector: family name -> _Route, for the families that
        # collector may feed; one dict lookup per reading instead of three.
        # Rebuilt lazily after every register().
        self._routes: dict[str, dict[str, _Route]] = {}
        # Per (collector, family, source) fed as Columns: its series in column order.
        self._columns: dict[tuple[str, str, str], _ColumnState] = {}

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
        keep = self._history_families
        routes = {
            name: (
                spec,
                self._by_name[name],
                spec.kind is MetricKind.COUNTER,
                keep is None or name in keep,
                spec.bits,
                spec.kind is MetricKind.HISTOGRAM,
            )
            for name, spec in self._specs.items()
            if collector in self._owners[name]
        }
        self._routes[collector] = routes
        return routes

    def set_history_families(self, names: Collection[str] | None) -> None:
        """Keep history for these families from now on (None: every family).

        Series that exist already keep (or lack) their ring until they expire.
        """
        self._history_families = None if names is None else frozenset(names)
        self._routes.clear()

    @property
    def history_size(self) -> int:
        """Points each history ring holds."""
        return self._history

    def keeps_history(self, name: str) -> bool:
        """Whether series of family ``name`` keep a history ring."""
        keep = self._history_families
        return keep is None or name in keep

    def specs(self) -> Mapping[str, MetricSpec]:
        """Every registered family by name."""
        return self._specs

    def ingest(self, collector: str, readings: Iterable[Reading], now: float) -> IngestResult:
        """Store one collection's readings, taken at monotonic time ``now``.

        Readings of undeclared families, with the wrong number of labels, or
        with a non-finite value are rejected and counted, never raised. A
        :class:`~fabricwatch.readings.Batch` is taken as its single readings
        plus its columns, each family in one pass (same results as readings).
        """
        result = IngestResult()
        routes = self._routes.get(collector)
        if routes is None:
            routes = self._route(collector)
        if type(readings) is Batch:
            for col in readings.columns:
                self._ingest_columns(collector, routes, col, now, result)
            readings = readings.readings
        self._ingest_readings(collector, routes, readings, now, result)
        return result

    def _ingest_readings(
        self,
        collector: str,
        routes: dict[str, _Route],
        readings: Iterable[Reading],
        now: float,
        result: IngestResult,
    ) -> None:
        """The single readings of :meth:`ingest`, one by one."""
        rejected_before = result.rejected
        tracker = self._tracker
        size = self._history
        isfinite = math.isfinite
        oldest = self._oldest
        seen = 0
        # Readings are unpacked, not read by attribute: it is the hottest loop
        # of the daemon (thousands of readings per second). The label count
        # is checked when a series is created: an existing series was found
        # by an equal label tuple.
        for name, labels, value, r_ts, epoch, hist in readings:
            seen += 1
            route = routes.get(name)
            if route is None:
                result.reject("undeclared")
                continue
            if not isfinite(value):
                result.reject("not_finite")
                continue
            spec, family, is_counter, keep, bits, is_histogram = route
            if is_counter and value < 0:  # valid_sample(), before the series is made or refreshed
                result.reject("negative")
                continue
            ts = now if r_ts is None else r_ts
            s = family.get(labels)
            if s is None:
                if len(labels) != len(spec.labels):
                    result.reject("labels")
                    continue
                s = family[labels] = self._new_series(spec, labels, collector, value, ts, keep=keep)
            s.updated = ts
            if ts < oldest:  # noqa: PLR1730 - cheaper than min() on the hottest loop
                oldest = ts
            if is_counter:
                cs = s.counter
                if cs is None:
                    s.counter = cs = CounterState(value, ts, epoch)
                    rate = None
                else:
                    rate = cs.update(value, ts, tracker, bits, epoch)
                s.value = cs.total
                s._rate = rate
                if rate is None:
                    continue
                point = rate.per_second
            else:
                s.value = point = value
                if is_histogram:
                    s.histogram = hist
            ring = s.ring
            if ring is not None:
                # Inline ring write: a method call per point would cost more
                # than the write itself on this path.
                h = s.head
                s.ring_ts[h] = ts  # type: ignore[index]
                ring[h] = point
                h += 1
                if h == size:
                    h = 0
                    s.full = True
                s.head = h
        result.accepted += seen - (result.rejected - rejected_before)
        self._oldest = oldest

    def _ingest_columns(
        self,
        collector: str,
        routes: dict[str, _Route],
        col: Columns,
        now: float,
        result: IngestResult,
    ) -> None:
        """One family's columns: the per-reading loop of :meth:`ingest`, for a whole family."""
        values = col.values
        n = len(values)
        route = routes.get(col.name)
        if route is None:
            for _ in range(n):
                result.reject("undeclared")
            return
        _, _, is_counter, _, _, _ = route
        # One check for the whole family: a NaN or an infinity makes the sum
        # non-finite; only then is each value looked at.
        bad: dict[int, str] = {}
        if not math.isfinite(sum(values)) or (is_counter and n and min(values) < 0):
            bad = _invalid(values, is_counter)
        key = (collector, col.name, col.source)
        st = self._columns.get(key)
        ts = now if col.ts is None else col.ts
        if st is not None and st.times is not None and (bad or st.labels is not col.labels):
            _own_times(st)  # off the steady path: the series may get points apart
        if st is None or st.labels is not col.labels:
            bound = None if bad else self._bind(collector, route, col, ts, st)
            if bound is None:
                # New series with invalid samples or labels of the wrong length:
                # reading by reading, each refused or kept on its own.
                self._unbind(key)
                single = self.ingest(collector, col.readings(), now)
                result.accepted += single.accepted
                for reason, k in single.reasons.items():
                    result.rejected += k
                    result.reasons[reason] = result.reasons.get(reason, 0) + k
                return
            st = self._columns[key] = bound
        for reason in bad.values():
            result.reject(reason)
        result.accepted += n - len(bad)
        series = st.series
        self._oldest = min(self._oldest, ts)
        if not bad:
            self._steady_columns(st, col, ts, is_counter)
            return
        if is_counter:
            fc = st.counters
            assert fc is not None
            rates = fc.update(values, ts, col.epoch, bad, col.epochs)
            totals = fc.totals
            points: list[float | None] = []
            for i, s in enumerate(series):
                rate = rates[i]
                if not (bad and i in bad):
                    s.value = totals[i]
                    s._rate = rate
                points.append(None if rate is None else rate[0])
            self._write_points(series, points, ts, bad)
        else:
            for i, s in enumerate(series):
                if not (bad and i in bad):
                    s.value = values[i]
            self._write_points(series, values, ts, bad)

    def _steady_columns(self, st: _ColumnState, col: Columns, ts: float, is_counter: bool) -> None:
        """:meth:`_ingest_columns` when every value is valid: the value, rate and ring
        write of each series in one loop (the per-point work of :meth:`_write_points`;
        without the ring write where no series of the family keeps history).
        Every series gets a point, so series sharing their times stay in step."""
        size = self._history
        series = st.series
        if not is_counter:
            if not st.rings:
                for s, value in zip(series, col.values, strict=True):
                    s.value = value
                    s.updated = ts
                return
            for s, value in zip(series, col.values, strict=True):
                s.value = value
                s.updated = ts
                ring = s.ring
                if ring is None:
                    continue
                h = s.head
                s.ring_ts[h] = ts  # type: ignore[index]
                ring[h] = value
                h += 1
                if h == size:
                    h = 0
                    s.full = True
                s.head = h
            return
        fc = st.counters
        assert fc is not None
        polled = fc.poll(col.values, ts, col.epoch, (), col.epochs)
        per_second = polled.per_second
        if per_second is None:
            assert polled.rates is not None
            self._counter_rates(st, polled.rates, fc.totals, ts)
            return
        # Every series has a rate of one shape: its figure is the point.
        shape = polled.shape
        if not st.rings:
            for s, point, total in zip(series, per_second, fc.totals, strict=True):
                s.value = total
                s._rate = point
                s._shape = shape
                s.updated = ts
            return
        for s, point, total in zip(series, per_second, fc.totals, strict=True):
            s.value = total
            s._rate = point
            s._shape = shape
            s.updated = ts
            ring = s.ring
            if ring is None:
                continue
            h = s.head
            s.ring_ts[h] = ts  # type: ignore[index]
            ring[h] = point
            h += 1
            if h == size:
                h = 0
                s.full = True
            s.head = h

    def _counter_rates(
        self, st: _ColumnState, rates: list[Rate | None], totals: list[float], ts: float
    ) -> None:
        """:meth:`_steady_columns` for rates made one by one (some None, or held)."""
        size = self._history
        if st.times is not None and None in rates and any(r is not None for r in rates):
            _own_times(st)  # some get a point, some do not
        for s, rate, total in zip(st.series, rates, totals, strict=True):
            s.value = total
            s._rate = rate
            s.updated = ts
            ring = s.ring
            if ring is None or rate is None:
                continue
            h = s.head
            s.ring_ts[h] = ts  # type: ignore[index]
            ring[h] = rate[0]
            h += 1
            if h == size:
                h = 0
                s.full = True
            s.head = h

    def _write_points(
        self,
        series: list[Series],
        points: Sequence[float | None],
        ts: float,
        bad: Collection[int],
    ) -> None:
        """Mark ``series[i]`` updated at ``ts`` and add ``points[i]`` to its ring (None:
        no point, a counter without a rate yet); skip the indexes in ``bad``
        (the series have their own rings of times here)."""
        size = self._history
        for i, s in enumerate(series):
            if bad and i in bad:
                continue
            s.updated = ts
            point = points[i]
            ring = s.ring
            if point is None or ring is None:
                continue
            # The ring write of the single-reading loop (inline there: hotter still).
            h = s.head
            s.ring_ts[h] = ts  # type: ignore[index]
            ring[h] = point
            s.head = h = (h + 1) % size
            if not h:
                s.full = True

    def _unbind(self, key: tuple[str, str, str]) -> None:
        """Hand a family's column state back to its series (single readings go on from it)."""
        st = self._columns.pop(key, None)
        if st is None or st.counters is None:
            return
        for i, s in enumerate(st.series):
            if s is self._by_name[key[1]].get(s.labels):
                s.counter = st.counters.state(i)

    def _bind(
        self,
        collector: str,
        route: _Route,
        col: Columns,
        ts: float,
        old: _ColumnState | None,
    ) -> _ColumnState | None:
        """Match (or create) the series of ``col``'s labels; carry their counter state over.

        A series already fed as columns keeps its row, one fed as single readings
        goes on from its :class:`CounterState`, a new one starts with this
        sample (no rate yet, as for a single reading). None when a label tuple
        has the wrong length or a series comes twice.
        """
        spec, family, is_counter, keep, bits, _ = route
        if old is not None and old.labels is not None and old.labels == col.labels:
            old.labels = col.labels  # equal tuples, another object: same series
            return old
        width = len(spec.labels)
        if any(len(labels) != width for labels in col.labels) or len(set(col.labels)) != len(
            col.labels
        ):
            return None  # wrong label count, or a series twice: reading by reading
        rows: dict[int, int] = {}
        if old is not None and old.counters is not None:
            rows = {id(s): i for i, s in enumerate(old.series)}
        fc = FamilyCounters(self._tracker, bits) if is_counter else None
        series: list[Series] = []
        epochs = col.epochs
        new = 0
        for i, (labels, value) in enumerate(zip(col.labels, col.values, strict=True)):
            epoch = col.epoch if epochs is None else epochs[i]
            s = family.get(labels)
            if s is None:
                s = family[labels] = self._new_series(spec, labels, collector, value, ts, keep=keep)
                new += 1
                if fc is not None:
                    fc.add(value, ts, epoch)  # first sample: update() gives None
            elif fc is not None:
                row = rows.get(id(s))
                if row is not None and old is not None and old.counters is not None:
                    fc.take(old.counters, row)
                elif s.counter is not None:
                    fc.adopt(s.counter)
                    s.counter = None
                else:
                    fc.add(value, ts, epoch)
            series.append(s)
        if rows:
            # Series that left the columns keep their state for when they come back
            # (as columns or as single readings).
            assert old is not None and old.counters is not None
            kept = {id(s) for s in series}
            for s_id, row in rows.items():
                if s_id not in kept:
                    gone = old.series[row]
                    gone.counter = old.counters.state(row)
        state = _ColumnState(col.labels, series, fc, any(s.ring is not None for s in series))
        if keep and new == len(series) > 1:
            # Created together, polled together from now on: one ring of times.
            state.times = series[0].ring_ts
            for s in series[1:]:
                s.ring_ts = state.times
        return state

    def _new_series(
        self,
        spec: MetricSpec,
        labels: tuple[str, ...],
        collector: str,
        value: float,
        ts: float,
        *,
        keep: bool,
    ) -> Series:
        """A series with its first value and, where its family keeps history,
        empty rings of times and values."""
        blank = self._blank
        return Series(
            spec,
            labels,
            collector,
            value,
            ts,
            blank[:] if keep else None,
            blank[:] if keep else None,
        )

    def expire(self, now: float) -> int:
        """Drop series not updated for ``stale_after`` seconds; return how many."""
        cutoff = now - self._stale_after
        if cutoff <= self._oldest:
            return 0  # no series is older than the oldest one seen: nothing to scan
        dropped = 0
        names: set[str] = set()
        for name, family in self._by_name.items():
            old = [labels for labels, s in family.items() if s.updated < cutoff]
            for labels in old:
                del family[labels]
            if old:
                dropped += len(old)
                names.add(name)
        if names and self._columns:
            self._prune_columns(names)
        self._oldest = min((s.updated for s in self._all()), default=math.inf)
        return dropped

    def _prune_columns(self, names: set[str]) -> None:
        """Drop expired series from the column states of families ``names``; those
        states match their series again on the next ingest (not holding the dropped ones)."""
        for (_, name, _), st in self._columns.items():
            if name not in names:
                continue
            if st.times is not None:
                _own_times(st)
            live = self._by_name[name]
            keep = [i for i, s in enumerate(st.series) if live.get(s.labels) is s]
            old_fc = st.counters
            if old_fc is not None:
                fc = FamilyCounters(old_fc.settings, old_fc.bits)
                for i in keep:
                    fc.take(old_fc, i)
                st.counters = fc
            st.series = [st.series[i] for i in keep]
            st.labels = None

    def pad_history(self) -> int:
        """Fill every history ring to capacity with copies of its oldest point.

        For benchmarks and tests that measure memory at steady state (history
        full) without waiting ``history`` x interval seconds. Returns the
        points added. The rings are preallocated, so this must not change RSS.
        """
        added = 0
        # A ring of times shared by series in step is shifted once.
        padded: dict[int, array[float]] = {}
        for s in self._all():
            ring, ts = s.ring, s.ring_ts
            if ring is None or ts is None or s.full or s.head == 0:
                continue
            # Shift the points to the end of the ring and repeat the oldest
            # one before them, a little older each time.
            used = s.head
            n_pad = len(ring) - used
            if id(ts) not in padded:
                first_ts = ts[0]
                pad_ts = array("d", (first_ts - k * 1e-6 for k in range(n_pad, 0, -1)))
                padded[id(ts)] = pad_ts + ts[:used]
            ring[:] = array("d", (ring[0],)) * n_pad + ring[:used]
            s.head = 0
            s.full = True
            added += n_pad
        for s in self._all():
            ts = s.ring_ts
            if ts is not None and id(ts) in padded:
                ts[:] = padded[id(ts)]
        return added

    def get(self, name: str, labels: tuple[str, ...]) -> Series | None:
        """One series, or None."""
        family = self._by_name.get(name)
        return None if family is None else family.get(labels)

    def family(self, name: str) -> Sequence[Series]:
        """Every series of one family (empty if none or undeclared)."""
        return tuple(self._by_name.get(name, {}).values())

    def family_size(self, name: str) -> int:
        """How many series family ``name`` has (0 if none or undeclared), without a copy."""
        return len(self._by_name.get(name, ()))

    def family_series(self, name: str) -> Mapping[tuple[str, ...], Series]:
        """Family ``name``'s series by label values, read-only and live (empty if undeclared)."""
        return MappingProxyType(self._by_name.get(name, {}))

    def __iter__(self) -> Iterator[Series]:
        return iter(tuple(self._all()))

    def __len__(self) -> int:
        return sum(map(len, self._by_name.values()))

    def _all(self) -> Iterator[Series]:
        """Every series, family by family (a live view: not while one is added or dropped)."""
        return chain.from_iterable(family.values() for family in self._by_name.values())


def _own_times(st: _ColumnState) -> None:
    """Give each series of ``st`` its own copy of the ring of times they
    share, before any of them gets a point the others do not (or misses one)."""
    shared = st.times
    if shared is None:
        return
    for s in st.series:
        if s.ring_ts is shared:
            s.ring_ts = array("d", shared)
    st.times = None


def _invalid(values: Sequence[float], is_counter: bool) -> dict[int, str]:
    """Index -> reject reason of each value :meth:`SnapshotStore.ingest` would refuse."""
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        if not math.isfinite(v):
            bad[i] = "not_finite"
        elif is_counter and v < 0:
            bad[i] = "negative"
    return bad
