"""Window reads over the store's history rings, kept in step with the rings.

The slowdown check reads, for every job GPU on every sample, the means of a
few consecutive windows of its NVLink throughput and the values of its work
signal over the latest window (:meth:`Engine._comm_slow`). Read through
:func:`~fabricwatch.engine.signals.window` and
:func:`~fabricwatch.engine.signals.chunk_means`, each read copies the ring's
recent timestamps and checks them for order again. :class:`HistoryMirrors`
instead keeps one mirror per series read this way: its points' times and
values as lists, oldest first, bounded to the span the engine reads, brought
up to date from the ring's newest points only (a point or two a tick), with
the order check kept incrementally; a window is then two bisections and a
slice.

The figures are exactly those of ``signals``: the same points, summed in the
same order. A mirror that cannot stand for the ring (a history out of time
order, a non-finite timestamp, a series without a ring) reads through
``signals`` itself.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from fabricwatch.engine import signals as sig
from fabricwatch.store import Series


@dataclass(slots=True)
class _Mirror:
    """The newest points of one series' ring (see :class:`HistoryMirrors`)."""

    series: Series
    head: int = 0
    full: bool = False
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    # Absolute index (points appended since the rebuild) of the first point
    # kept, and the last points out of order with their predecessor / with
    # a non-finite time: the mirror is ordered while both lie before it.
    start: int = 0
    last_inversion: int = -1
    last_non_finite: int = -1
    # How far back from its newest point the engine reads this series (older
    # points are dropped), and whether the mirror dropped points the ring
    # still holds.
    depth: float = 0.0
    trimmed: bool = False
    trim_at: int = 0

    def ordered(self) -> bool:
        return self.last_inversion <= self.start and self.last_non_finite < self.start

    def rebuild(self) -> None:
        s = self.series
        assert s.ring is not None  # callers check
        times, values = s.ordered_rings()
        self.head, self.full = s.head, s.full
        self.times = times.tolist()
        self.values = values.tolist()
        self.start = 0
        self.last_inversion = self.last_non_finite = -1
        self._flag(0)
        self.trimmed = False
        self._trim()

    def _flag(self, first: int) -> None:
        """Order flags of the points from list position ``first`` on."""
        times = self.times
        prev = times[first - 1] if first > 0 else -math.inf
        for k in range(first, len(times)):
            t = times[k]
            if t < prev:
                self.last_inversion = self.start + k
            if not math.isfinite(t):
                self.last_non_finite = self.start + k
            prev = t

    def sync(self) -> None:
        """Take in the points written to the ring since the last sync."""
        s = self.series
        ring, ring_ts = s.ring, s.ring_ts
        assert ring is not None and ring_ts is not None  # callers check
        head, old = s.head, self.head
        times = self.times
        if head == old and s.full == self.full:
            if times and ring_ts[head - 1] != times[-1]:
                self.rebuild()  # a whole ring of new points went by
            return
        # The mirror's newest point must still be in the ring where it was
        # written (not written over by a ring's worth of newer points).
        if not times or ring_ts[old - 1] != times[-1] or ring[old - 1] != self.values[-1]:
            self.rebuild()
            return
        self.head, self.full = head, s.full
        if head == old + 1:
            # One new point (the usual case at one sample a tick): no copies.
            t = ring_ts[old]
            if t < times[-1]:
                self.last_inversion = self.start + len(times)
            if not math.isfinite(t):
                self.last_non_finite = self.start + len(times)
            times.append(t)
            self.values.append(ring[old])
        else:
            at = len(times)
            if head > old:
                times.extend(ring_ts[old:head].tolist())
                self.values.extend(ring[old:head].tolist())
            else:
                times.extend(ring_ts[old:].tolist() + ring_ts[:head].tolist())
                self.values.extend(ring[old:].tolist() + ring[:head].tolist())
            self._flag(at)
        # The ring holds its newest size points only.
        over = len(times) - len(ring)
        if over > 0:
            self._drop(over)
        if len(times) >= self.trim_at:
            self._trim()

    def _drop(self, k: int) -> None:
        del self.times[:k]
        del self.values[:k]
        self.start += k

    def _trim(self) -> None:
        """Drop points older than the engine reads (on an ordered mirror)."""
        if not self.times or not self.ordered():
            return
        k = bisect_left(self.times, self.times[-1] - self.depth) - 1
        if k > 0:
            self._drop(k)
            self.trimmed = True
        # Trimmed again once the mirror holds a quarter more than it needs
        # (a few points a time, not one per tick).
        self.trim_at = len(self.times) + len(self.times) // 4 + 8


@dataclass(slots=True)
class HistoryMirrors:
    """Window reads over store series (see the module docstring), one mirror per series read."""

    _mirrors: dict[tuple[str, tuple[str, ...]], _Mirror] = field(default_factory=dict)

    def _mirror(self, series: Series, oldest: float) -> _Mirror | None:
        """The series' mirror, in step with its ring and holding every
        point from just before ``oldest`` on, or None (read through ``signals``)."""
        if series.ring is None:
            return None
        key = (series.spec.name, series.labels)
        m = self._mirrors.get(key)
        if m is None or m.series is not series:
            m = self._mirrors[key] = _Mirror(series, depth=math.inf)
            m.rebuild()
            if m.times:
                m.depth = max(0.0, m.times[-1] - oldest)
        else:
            m.sync()
            if m.times and (m.depth == math.inf or m.times[-1] - oldest > m.depth):
                m.depth = m.times[-1] - oldest
                if m.trimmed and m.times[0] >= oldest:
                    m.rebuild()
        return m if m.ordered() else None

    def values(self, series: Series, start: float, end: float) -> Sequence[float]:
        """The values of :func:`signals.window` ``(series, start, end)``."""
        m = self._mirror(series, start)
        if m is None:
            return sig.window(series, start, end).values
        times = m.times
        lo = bisect_left(times, start)
        return m.values[lo : bisect_right(times, end, lo)]

    def chunk_means(
        self, series: Series, now: float, width: float, chunks: int
    ) -> list[float] | None:
        """:func:`signals.chunk_means` ``(series, now, width, chunks)``, bit for bit."""
        m = self._mirror(series, now - (chunks + 1) * width)
        if m is None:
            return sig.chunk_means(series, now, width, chunks)
        spans = _spans(m.times, now, width, chunks)
        return None if spans is None else _means(m.values, spans)

    def summed_means(
        self, series: Sequence[Series], now: float, width: float, chunks: int
    ) -> tuple[float, list[float]] | None:
        """The latest window's and the earlier windows' :meth:`chunk_means`,
        each summed over ``series`` in order from 0.0 (None where a series has
        none). A series whose points have the times of the one before (a
        GPU's NVLink links, polled together) shares its spans: one set of
        bisections for all of them."""
        return summed_window_means(self._means_sharing_spans(series, now, width, chunks))

    def _means_sharing_spans(
        self, series: Sequence[Series], now: float, width: float, chunks: int
    ) -> Iterator[list[float] | None]:
        times: list[float] | None = None
        spans: list[tuple[int, int]] | None = None
        oldest = now - (chunks + 1) * width
        for x in series:
            m = self._mirror(x, oldest)
            if m is None:
                yield sig.chunk_means(x, now, width, chunks)
                continue
            if times is None or m.times != times:
                times = m.times
                spans = _spans(times, now, width, chunks)
            yield None if spans is None else _means(m.values, spans)


def summed_window_means(
    per_series: Iterable[list[float] | None],
) -> tuple[float, list[float]] | None:
    """The latest window's mean and the earlier windows' means of each series
    (``chunk_means`` order: latest first), summed over the series in order:
    the latest from 0.0, the earlier ones from the first series' own means
    (adding those to 0.0 would change no value but the sign of a zero, and no
    decision reads that). None where a series has none or there is none."""
    recent = 0.0
    history: list[float] | None = None
    for means in per_series:
        if means is None:
            return None
        recent += means[0]
        # Summed series by series, as a loop over the windows would.
        history = (
            means[1:]
            if history is None
            else [h + v for h, v in zip(history, means[1:], strict=True)]
        )
    return None if history is None else (recent, history)


def _spans(
    times: list[float], now: float, width: float, chunks: int
) -> list[tuple[int, int]] | None:
    """The ``[lo, hi)`` positions in ``times`` (ordered) of each span of
    :func:`signals.chunk_spans`, or None where the latest holds under two
    points (an earlier one with too few is a gap: :func:`_means` makes it NaN)."""
    start = now - width
    lo = bisect_left(times, start)
    hi = bisect_right(times, now, lo)
    if hi - lo < 2:
        return None
    out = [(lo, hi)]
    for j in range(chunks):
        # A span ends 1 ms before the next one starts (at ``lo``, that one's
        # first point): one bisection a span, and a step back over the rare
        # point inside that millisecond.
        end = start - 1e-3
        hi = lo
        while hi > 0 and times[hi - 1] > end:
            hi -= 1
        start = now - (j + 2) * width
        lo = bisect_left(times, start, 0, hi)
        out.append((lo, hi))
    return out


def _means(values: list[float], spans: list[tuple[int, int]]) -> list[float]:
    """The plain mean of ``values`` over each span (summed in order, as
    ``signals`` sums; NaN over an earlier span of under
    :func:`signals.enough_points`, as there)."""
    need = sig.enough_points(spans[0][1] - spans[0][0])
    return [
        sum(values[lo:hi]) / (hi - lo) if k == 0 or hi - lo >= need else math.nan
        for k, (lo, hi) in enumerate(spans)
    ]
