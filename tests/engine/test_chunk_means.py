"""signals.chunk_means equals window() span by span (the slowdown check's one-walk form)."""

from __future__ import annotations

import math
import random

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.readings import Reading
from fabricwatch.store import Series
from fabricwatch.testing.sim_scenarios import new_store
from tests.engine import _window_means as wm


def _by_window(series: Series, now: float, w: float, chunks: int) -> list[float] | None:
    return wm.means(sig.window(series, lo, hi).values for lo, hi in wm.spans(now, w, chunks))


@pytest.mark.parametrize("seed", range(12))
def test_one_walk_gives_what_a_window_per_chunk_gives(seed: int) -> None:
    rnd = random.Random(seed)
    store = new_store(history=rnd.choice([60, 300, 600]))
    t = 1000.0
    step = rnd.choice([0.5, 1.0, 1.0, 5.0, 15.0])
    for _ in range(rnd.randint(5, 700)):
        # Irregular spacing and gaps, as collectors deliver them.
        t += step * rnd.choice([1.0, 1.0, 1.0, 0.999, 1.001, 3.0, 0.0001])
        store.ingest("nvml", [Reading(sig.GPU_SM, ("0",), rnd.random())], now=t)
    series = store.get(sig.GPU_SM, ("0",))
    assert series is not None
    for _ in range(40):
        now = t - rnd.random() * 60 * step
        w = step * rnd.choice([2.0, 3.0, 4.5, 10.0, 17.3])
        chunks = rnd.randint(1, 12)
        # repr: a window without data is NaN on both sides (NaN != NaN).
        got = sig.chunk_means(series, now, w, chunks)
        assert repr(got) == repr(_by_window(series, now, w, chunks))


def test_a_span_with_one_point_is_no_mean() -> None:
    store = new_store()
    for k in range(30):
        store.ingest("nvml", [Reading(sig.GPU_SM, ("0",), float(k))], now=100.0 + k)
    series = store.get(sig.GPU_SM, ("0",))
    assert series is not None
    assert sig.chunk_means(series, 129.0, 5.0, 3) == [26.5, 21.0, 16.0, 11.0]
    # Ten chunks of 5 s reach back before the first point: those windows
    # have no mean (NaN), the ones with data keep theirs.
    means = sig.chunk_means(series, 129.0, 5.0, 10)
    assert means is not None
    assert means[:6] == [26.5, 21.0, 16.0, 11.0, 6.0, 1.5]
    assert all(math.isnan(m) for m in means[6:])
    # A latest window of one point is no mean at all.
    assert sig.chunk_means(series, 129.0, 0.5, 3) is None


def test_an_earlier_window_with_under_half_the_latest_points_has_no_mean() -> None:
    # 1 s samples, then a gap that leaves 4 of an earlier 10 s window's 10
    # points: they are one stretch of the job's rhythm, not the window.
    store = new_store()
    for k in range(60):
        if not 20 <= k < 26:
            store.ingest("nvml", [Reading(sig.GPU_SM, ("0",), float(k))], now=100.0 + k)
    series = store.get(sig.GPU_SM, ("0",))
    assert series is not None
    means = sig.chunk_means(series, 159.0, 10.0, 4)
    assert means is not None
    assert means[:3] == [54.0, 43.5, 33.5]
    assert math.isnan(means[3])  # 4 points (k = 19, 26-28) where the latest has 11
    assert means[4] == 13.5
    assert sig.enough_points(11) == 6 and sig.enough_points(1) == 2
