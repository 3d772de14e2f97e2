"""engine.windows.HistoryMirrors (the slowdown check's window reads, kept in
step with the store's rings) gives exactly what signals.window and
signals.chunk_means give, and the plain mean of the points inside each span.

Read as the engine reads: one mirror per series, read again and again as
the ring fills, wraps, skips (a gap in the samples, a read after more than a
ring's worth of new points), and with histories out of time order, non-finite
timestamps, a series replaced by a new one and a ring rewritten in place.
"""

from __future__ import annotations

import math
import random

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.windows import HistoryMirrors
from fabricwatch.readings import Reading
from fabricwatch.store import Series, SnapshotStore
from fabricwatch.testing.sim_scenarios import new_store
from tests.engine import _window_means as wm


def _plain(series: Series, now: float, w: float, chunks: int) -> list[float] | None:
    """The mean of the points inside each span, from the store's own point walk."""
    pts = [(p.ts, p.value) for p in series.history]
    return wm.means([v for t, v in pts if lo <= t <= hi] for lo, hi in wm.spans(now, w, chunks))


def _read(mirrors: HistoryMirrors, series: Series, rnd: random.Random, t: float) -> None:
    now = t - rnd.choice([0.0, 0.0, 0.3, 1.0, 7.5])
    w = rnd.choice([1.0, 2.5, 4.0, 10.0, 30.0])
    chunks = rnd.randint(1, 6)
    got = mirrors.chunk_means(series, now, w, chunks)
    # repr: a window without data is NaN on both sides (NaN != NaN).
    assert repr(got) == repr(sig.chunk_means(series, now, w, chunks))
    lo = now - rnd.choice([0.5, 3.0, 30.0, 200.0])
    assert list(mirrors.values(series, lo, now)) == list(sig.window(series, lo, now).values)


def _ingest(store: SnapshotStore, ts: float, v: float) -> Series:
    store.ingest("nvml", [Reading(sig.GPU_SM, ("0",), v, ts)], now=ts)
    series = store.get(sig.GPU_SM, ("0",))
    assert series is not None
    return series


@pytest.mark.parametrize("seed", range(16))
def test_reads_as_the_ring_fills_wraps_and_skips_equal_signals(seed: int) -> None:
    rnd = random.Random(seed)
    store = new_store(history=rnd.choice([5, 40, 120]))
    mirrors = HistoryMirrors()
    t = 1000.0
    for _ in range(rnd.randint(50, 600)):
        # Irregular steps, gaps and equal timestamps.
        t += rnd.choice([1.0, 1.0, 1.0, 0.999, 1.001, 0.0, 9.0, 0.0001])
        series = _ingest(store, t, rnd.random() * 1e9)
        # Mostly read every point; sometimes not for a while (more than a
        # whole ring of new points between two reads).
        if rnd.random() < 0.7:
            _read(mirrors, series, rnd, t)


@pytest.mark.parametrize("seed", range(6))
def test_equals_the_plain_mean_over_each_span_with_gaps(seed: int) -> None:
    rnd = random.Random(100 + seed)
    store = new_store(history=300)
    mirrors = HistoryMirrors()
    t = 5000.0
    checked = 0
    for k in range(400):
        # 1 s samples with 10 % missing and a 40 s collector gap.
        t += 41.0 if k == 200 else 1.0
        if rnd.random() < 0.1:
            continue
        series = _ingest(store, t, 1e10 * (1.0 + 0.3 * rnd.random()))
        now = t + 0.5
        got = mirrors.chunk_means(series, now, 30.0, 4)
        assert repr(got) == repr(_plain(series, now, 30.0, 4))
        checked += got is not None
    assert checked > 100


def test_out_of_order_and_non_finite_timestamps_read_through_signals() -> None:
    rnd = random.Random(3)
    store = new_store(history=30)
    mirrors = HistoryMirrors()
    t = 1000.0
    for k in range(200):
        t += rnd.choice([1.0, 1.0, 1.0, -3.0, -40.0, 0.5])
        ts = math.inf if k == 50 else t
        series = _ingest(store, ts, rnd.random())
        _read(mirrors, series, rnd, t)
    times = [p.ts for p in series.history]
    assert times != sorted(times)


def test_a_replaced_series_and_a_ring_rewritten_in_place() -> None:
    rnd = random.Random(4)
    store = new_store(history=50)
    mirrors = HistoryMirrors()
    for k in range(30):
        series = _ingest(store, 100.0 + k, float(k))
        _read(mirrors, series, rnd, 100.0 + k)
    # The store fills every ring with copies of its oldest point.
    store.pad_history()
    _read(mirrors, series, rnd, 129.0)
    # Expired and seen again: a new series (a new ring) under the same labels.
    store.expire(10_000.0)
    assert store.get(sig.GPU_SM, ("0",)) is None
    for k in range(20):
        fresh = _ingest(store, 10_000.0 + k, 100.0 + k)
        _read(mirrors, fresh, rnd, 10_000.0 + k)
    assert fresh is not series
    assert mirrors.chunk_means(fresh, 10_019.0, 4.0, 2) == [117.0, 112.5, 108.5]


def test_a_series_without_a_ring() -> None:
    bare = SnapshotStore(history_families=())
    bare.register("nvml", [sig.SIGNAL_SPECS[sig.GPU_SM]])
    bare.ingest("nvml", [Reading(sig.GPU_SM, ("0",), 1.0, 100.0)], now=100.0)
    ringless = bare.get(sig.GPU_SM, ("0",))
    assert ringless is not None and ringless.ring is None and ringless.ring_ts is None
    mirrors = HistoryMirrors()
    assert mirrors.chunk_means(ringless, 100.0, 1.0, 1) is None
    assert not mirrors.values(ringless, 0.0, 200.0)


def _summed_by_signals(
    group: list[Series], now: float, w: float, chunks: int
) -> tuple[float, list[float]] | None:
    """signals.chunk_means of each series, summed series by series from 0.0."""
    recent = 0.0
    history = [0.0] * chunks
    for x in group:
        means = sig.chunk_means(x, now, w, chunks)
        if means is None:
            return None
        recent += means[0]
        history = [h + m for h, m in zip(history, means[1:], strict=True)]
    return recent, history


@pytest.mark.parametrize("seed", range(8))
def test_summed_means_of_links_polled_together_or_apart_equal_signals(seed: int) -> None:
    """A GPU's links: one sample time for all (the spans are shared), or each
    link missing its own samples (spans of its own), and a link missing for
    longer than a span (no sum)."""
    rnd = random.Random(200 + seed)
    store = new_store(history=rnd.choice([60, 300]))
    mirrors = HistoryMirrors()
    apart = seed % 2 == 1
    t = 1000.0
    checked = 0
    sent = [0.0] * 4  # the links' byte counters
    for k in range(360):
        t += rnd.choice([1.0, 1.0, 1.0, 0.999, 1.001])
        readings = []
        for link in range(4):
            sent[link] += 1e10 * (1.0 + 0.3 * rnd.random())
            if not (apart and rnd.random() < 0.15) and not (link == 3 and 100 <= k < 160):
                readings.append(Reading(sig.NVLINK_TX, ("0", str(link)), sent[link], t))
        store.ingest("nvml", readings, now=t)
        group = sorted(store.family(sig.NVLINK_TX), key=lambda x: x.labels)
        if len(group) < 4 or rnd.random() < 0.3:
            continue
        now = t - rnd.choice([0.0, 0.4, 3.0])
        w, chunks = rnd.choice([(5.0, 4), (10.0, 8), (30.0, 8)])
        got = mirrors.summed_means(group, now, w, chunks)
        want = _summed_by_signals(group, now, w, chunks)
        assert repr(got) == repr(want)
        checked += got is not None
    assert checked > 30
