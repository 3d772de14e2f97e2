"""The history readers on replay's hot path (signals.window, signals.chunk_means)
give what a walk over the history points gives, on any history.

They bisect slices of the packed ring where the history is in time order and
walk it where it is not; this checks both against a plain walk written here,
over rings that wrapped or not, gaps, equal timestamps, timestamps going back
and non-finite ones.
"""

from __future__ import annotations

import math
import random

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.readings import Reading
from fabricwatch.store import Series, SnapshotStore
from fabricwatch.testing.sim_scenarios import new_store
from tests.engine import _window_means as wm


def _walk(series: Series, start: float, end: float) -> tuple[list[float], list[float]]:
    """Newest first back to the first point older than ``start``, as the
    engine defines a window (the point walk the readers fall back to)."""
    w = sig._window_walk(series, start, end)
    return list(w.values), list(w.times)


def _means(series: Series, now: float, w: float, chunks: int) -> list[float] | None:
    """One walk from the newest point back to the first older than the oldest
    span (on an ordered history: a window per span)."""
    spans = wm.spans(now, w, chunks)
    vals, times = _walk(series, spans[-1][0], now)
    pts = list(zip(times, vals, strict=True))
    return wm.means([v for t, v in pts if lo <= t <= hi] for lo, hi in spans)


def _gauge(store: SnapshotStore, points: list[tuple[float, float]]) -> Series:
    for ts, v in points:
        store.ingest("nvml", [Reading(sig.GPU_SM, ("0",), v, ts)], now=ts)
    series = store.get(sig.GPU_SM, ("0",))
    assert series is not None
    return series


def _check(
    series: Series, rnd: random.Random, t_lo: float, t_hi: float, *, means: bool = True
) -> None:
    for _ in range(60):
        a, b = sorted(rnd.uniform(t_lo - 5, t_hi + 5) for _ in range(2))
        if rnd.random() < 0.1:
            a, b = b, a  # an empty span: start after end
        w = sig.window(series, a, b)
        # repr: a NaN timestamp must come out where the walk puts it (NaN != NaN).
        assert repr((list(w.values), list(w.times))) == repr(_walk(series, a, b))
        if not means:
            continue
        now = rnd.uniform(t_lo, t_hi + 5)
        width = rnd.choice([1.0, 2.5, 4.0, 10.0, 30.0])
        chunks = rnd.randint(1, 8)
        got = sig.chunk_means(series, now, width, chunks)
        assert repr(got) == repr(_means(series, now, width, chunks))


@pytest.mark.parametrize("seed", range(10))
def test_ordered_histories_wrapped_or_not(seed: int) -> None:
    rnd = random.Random(seed)
    store = new_store(history=rnd.choice([5, 60, 300]))
    t = 1000.0
    points = []
    for _ in range(rnd.randint(1, 700)):
        # Irregular steps, gaps and equal timestamps (two readings, one time).
        t += rnd.choice([1.0, 1.0, 0.999, 1.001, 0.0, 7.0, 0.0001])
        points.append((t, rnd.random()))
    series = _gauge(store, points)
    _check(series, rnd, 1000.0, t)


@pytest.mark.parametrize("seed", range(10))
def test_histories_out_of_time_order(seed: int) -> None:
    """A source's own timestamps may go back (a gauge keeps each): the window
    is still what the walk gives, not what a bisection of unsorted times gives."""
    rnd = random.Random(seed)
    store = new_store(history=rnd.choice([20, 120]))
    t = 1000.0
    points = []
    for _ in range(rnd.randint(20, 200)):
        t += rnd.choice([1.0, 1.0, 1.0, -3.0, -40.0, 0.5])
        points.append((t, rnd.random()))
    series = _gauge(store, points)
    times = [p.ts for p in series.history]
    assert times != sorted(times)
    _check(series, rnd, min(times), max(times))


def test_a_timestamp_going_back_inside_the_window() -> None:
    store = new_store()
    series = _gauge(store, [(100.0, 1.0), (101.0, 2.0), (90.0, 3.0), (102.0, 4.0), (103.0, 5.0)])
    # The walk from 103 stops at 90 (older than 95): 101 and 100 are not reached.
    assert sig.window(series, 95.0, 200.0).values == (4.0, 5.0)
    assert sig.window(series, 95.0, 200.0).times == (102.0, 103.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_timestamps(bad: float) -> None:
    rnd = random.Random(7)
    store = new_store(history=50)
    points = [(1000.0 + k, float(k)) for k in range(30)]
    points[rnd.randint(5, 25)] = (bad, 99.0)
    series = _gauge(store, points)
    # The means of a NaN timestamp raise, in the walk as before.
    _check(series, rnd, 1000.0, 1030.0, means=not math.isnan(bad))


def test_empty_and_single_point_histories() -> None:
    store = new_store()
    series = _gauge(store, [(100.0, 1.0)])
    assert sig.window(series, 0.0, 200.0).values == (1.0,)
    assert not sig.window(series, 101.0, 200.0)
    assert sig.chunk_means(series, 100.0, 1.0, 1) is None
    # A family the store keeps no history of has no ring at all.
    bare = SnapshotStore(history_families=())
    bare.register("nvml", [sig.SIGNAL_SPECS[sig.GPU_SM]])
    bare.ingest("nvml", [Reading(sig.GPU_SM, ("0",), 1.0, 100.0)], now=100.0)
    ringless = bare.get(sig.GPU_SM, ("0",))
    assert ringless is not None and ringless.ring is None and ringless.ring_ts is None
    assert not sig.window(ringless, 0.0, 200.0)
    assert sig.chunk_means(ringless, 100.0, 1.0, 1) is None
