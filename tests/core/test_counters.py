"""CounterTracker: wraps, resets, gaps, slow refresh, garbage."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.counters import CounterState, CounterTracker, FamilyCounters, TrackerSettings

K = ("x", ())


def test_first_sample_has_no_rate() -> None:
    t = CounterTracker()
    assert t.update(K, 100, 0.0) is None
    r = t.update(K, 200, 1.0)
    assert r is not None
    assert r.per_second == 100.0
    assert r.interval == 1.0


def test_wrap_at_2_32_gives_true_delta() -> None:
    t = CounterTracker()
    t.update(K, 2**32 - 100, 0.0, bits=32)
    r = t.update(K, 50, 1.0, bits=32)
    assert r is not None
    assert r.per_second == 150.0
    assert t.total(K) == 2**32 - 100 + 150


def test_wrap_at_2_64_gives_true_delta() -> None:
    t = CounterTracker()
    t.update(K, 2**64 - 10, 0.0, bits=64)
    r = t.update(K, 5, 0.5, bits=64)
    assert r is not None
    assert r.per_second == 30.0


def test_small_backwards_step_is_a_reset_not_a_wrap() -> None:
    t = CounterTracker()
    t.update(K, 1_000_000, 0.0, bits=32)
    assert t.update(K, 10, 1.0, bits=32) is None  # device rebooted: no spike
    r = t.update(K, 20, 2.0, bits=32)
    assert r is not None
    assert r.per_second == 10.0


def test_epoch_change_is_a_reset_even_if_value_grew() -> None:
    t = CounterTracker()
    t.update(K, 100, 0.0, epoch=1)
    assert t.update(K, 5_000_000, 1.0, epoch=2) is None
    r = t.update(K, 5_000_100, 2.0, epoch=2)
    assert r is not None
    assert r.per_second == 100.0


def test_gap_spreads_delta_over_the_gap() -> None:
    t = CounterTracker(TrackerSettings(gap_after=10.0))
    t.update(K, 0, 0.0)
    t.update(K, 100, 1.0)
    r = t.update(K, 100 + 250 * 100, 251.0)  # 250 s collector gap at 100/s
    assert r is not None
    assert r.gap
    assert math.isclose(r.per_second, 100.0)
    assert r.interval == 250.0


def test_zero_then_double_refresh_pattern_is_not_a_stall() -> None:
    # Counter refreshes every 1 s, polled every 0.5 s: value, same, value+2x ...
    t = CounterTracker()
    rates = []
    value = 0
    for i in range(20):
        if i % 2 == 0:
            value += 1000
        r = t.update(K, value, i * 0.5)
        if r is not None:
            rates.append(r)
    steady = rates[2:]
    assert all(r.per_second == 1000.0 for r in steady), [r.per_second for r in steady]
    assert any(r.held for r in steady)


def test_real_stall_reads_zero_after_hold_window() -> None:
    t = CounterTracker(TrackerSettings(hold_factor=2.0, max_hold=5.0))
    for i in range(5):
        t.update(K, i * 100, float(i))
    last = None
    for i in range(5, 12):
        last = t.update(K, 400, float(i))
    assert last is not None
    assert last.per_second == 0.0
    assert not last.held


def test_burst_after_a_quiet_stretch_reads_at_full_rate_at_once() -> None:
    t = CounterTracker()
    for i in range(5):
        t.update(K, i * 10, float(i))  # moving slowly
    for i in range(5, 3600):
        t.update(K, 40, float(i))  # an idle hour, reported as zeros
    r = t.update(K, 40 + 6000, 3600.0)  # a pause storm starts
    assert r is not None
    assert r.per_second == 6000.0
    assert r.interval == 1.0


def test_garbage_values_are_ignored() -> None:
    t = CounterTracker()
    t.update(K, 10, 0.0)
    assert t.update(K, math.nan, 1.0) is None
    assert t.update(K, math.inf, 1.5) is None
    assert t.update(K, -5, 1.7) is None
    r = t.update(K, 30, 2.0)
    assert r is not None
    assert r.per_second == 10.0


def test_non_advancing_clock_is_ignored() -> None:
    t = CounterTracker()
    t.update(K, 10, 5.0)
    assert t.update(K, 20, 5.0) is None
    assert t.update(K, 20, 4.0) is None
    r = t.update(K, 30, 6.0)
    assert r is not None
    assert r.per_second == 20.0


def test_prune_and_forget_bound_memory() -> None:
    t = CounterTracker()
    for i in range(100):
        t.update(("s", (str(i),)), 1, float(i))
    assert t.prune(older_than=50.0) == 50
    assert len(t) == 50
    t.forget(("s", ("99",)))
    assert len(t) == 49


counter_steps = st.lists(
    st.tuples(
        st.floats(min_value=1e-3, max_value=1e4),  # dt
        st.one_of(
            st.integers(min_value=0, max_value=2**40),  # increment
            st.just(-1),  # reset marker
            st.just(0),
        ),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=2**64 - 1),
    steps=counter_steps,
    bits=st.sampled_from([32, 64]),
)
def test_random_sequences_never_yield_negative_or_infinite_rates(
    start: int, steps: list[tuple[float, int]], bits: int
) -> None:
    modulus = 2**bits
    t = CounterTracker()
    value = start % modulus
    ts = 0.0
    t.update(K, value, ts, bits=bits)
    for dt, inc in steps:
        ts += dt
        value = 0 if inc < 0 else (value + inc) % modulus
        r = t.update(K, value, ts, bits=bits)
        if r is not None:
            assert math.isfinite(r.per_second)
            assert r.per_second >= 0
            assert r.interval > 0
    total = t.total(K)
    assert total is not None
    assert math.isfinite(total)


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=2**32 - 1),
    incs=st.lists(st.integers(min_value=1, max_value=2**31 - 1), min_size=1, max_size=40),
)
def test_wrapping_32bit_counter_rates_equal_true_increments(start: int, incs: list[int]) -> None:
    t = CounterTracker()
    t.update(K, start, 0.0, bits=32)
    value = start
    for i, inc in enumerate(incs, start=1):
        value = (value + inc) % 2**32
        r = t.update(K, value, float(i), bits=32)
        assert r is not None
        assert r.per_second == inc


_STEP = st.sampled_from(["hold", "hold", "inc", "inc", "inc", "big", "back", "reset"])


@settings(max_examples=200, deadline=None)
@given(
    bits=st.sampled_from([32, 64]),
    width=st.integers(1, 6),
    polls=st.lists(
        st.tuples(
            st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0, 0.0, -1.0, 15.0, 40.0]),
            st.booleans(),  # epoch change (device reboot) this poll
            st.lists(st.tuples(_STEP, st.integers(1, 1 << 20)), min_size=6, max_size=6),
        ),
        min_size=1,
        max_size=60,
    ),
    gap_after=st.sampled_from([3.0, 10.0]),
    max_hold=st.sampled_from([1.5, 2.0, 5.0]),
)
def test_family_counters_equal_counter_state_series_by_series(
    bits: int,
    width: int,
    polls: list[tuple[float, bool, list[tuple[str, int]]]],
    gap_after: float,
    max_hold: float,
) -> None:
    settings_ = TrackerSettings(gap_after=gap_after, max_hold=max_hold)
    modulus = 1 << bits
    values = [float(modulus - 1000 * (i + 1)) for i in range(width)]  # near the top: wraps soon
    ts, epoch = 100.0, 0
    fam = FamilyCounters(settings_, bits)
    singles = []
    for v in values:
        fam.add(v, ts, epoch)
        singles.append(CounterState(v, ts, epoch))
    for dt, reboot, steps in polls:
        ts += dt
        epoch += 1 if reboot else 0
        for i in range(width):
            kind, n = steps[i]
            if kind == "inc":
                values[i] = float((int(values[i]) + n) % modulus)
            elif kind == "big":
                values[i] = float((int(values[i]) + n * 4096) % modulus)
            elif kind == "back":
                values[i] = float((int(values[i]) + modulus - n) % modulus)  # backwards: reset
            elif kind == "reset":
                values[i] = float(n % 100)
        got = fam.update(values, ts, epoch)
        want = [
            s.update(v, ts, settings_, bits, epoch) for s, v in zip(singles, values, strict=True)
        ]
        assert got == want
        assert fam.totals == [s.total for s in singles]


@settings(max_examples=200, deadline=None)
@given(
    width=st.integers(1, 6),
    polls=st.lists(
        st.tuples(
            st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0, 0.0, 15.0]),
            st.booleans(),  # every series' epoch changes (all ports reloaded)
            st.lists(st.tuples(_STEP, st.booleans()), min_size=6, max_size=6),  # own epoch bump
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_family_counters_with_per_series_epochs_equal_counter_state(
    width: int, polls: list[tuple[float, bool, list[tuple[str, bool]]]]
) -> None:
    """Per-series epochs (NIC ports), mostly all equal: the steady path taken for a
    uniform list gives what each series' CounterState gives, across own-epoch resets."""
    settings_ = TrackerSettings()
    modulus = 1 << 32
    values = [float(modulus - 1000 * (i + 1)) for i in range(width)]
    ts = 100.0
    epochs = [0] * width
    fam = FamilyCounters(settings_, 32)
    singles = []
    for v in values:
        fam.add(v, ts, 0)
        singles.append(CounterState(v, ts, 0))
    for dt, all_reload, steps in polls:
        ts += dt
        for i in range(width):
            kind, bump = steps[i]
            if all_reload or (bump and i == 0):
                epochs[i] += 1
            if kind in ("inc", "big"):
                values[i] = float((int(values[i]) + 4096 * (i + 1)) % modulus)
            elif kind == "back":
                values[i] = float((int(values[i]) + modulus - 7) % modulus)
            elif kind == "reset":
                values[i] = float(i)
        got = fam.update(values, ts, None, (), list(epochs))
        want = [
            s.update(v, ts, settings_, 32, e)
            for s, v, e in zip(singles, values, epochs, strict=True)
        ]
        assert got == want
        assert fam.totals == [s.total for s in singles]


@settings(max_examples=100, deadline=None)
@given(
    idle=st.integers(0, 4),
    moving=st.integers(1, 6),
    polls=st.lists(
        st.tuples(
            st.sampled_from([1.0, 0.999, 1.001, 1.0004, 0.5, 3.0, 12.0]),  # jittered spacing
            st.integers(-1, 5),  # a moving series that stays still this poll (-1: none)
        ),
        min_size=2,
        max_size=60,
    ),
    gap_after=st.sampled_from([2.0, 10.0]),
    max_hold=st.sampled_from([0.8, 5.0]),
)
def test_family_counters_steady_moving_series_equal_counter_state(
    idle: int,
    moving: int,
    polls: list[tuple[float, int]],
    gap_after: float,
    max_hold: float,
) -> None:
    """Series that move at every poll (byte counters) next to ones that never move
    (error counters): the steady poll's rates, where every moving series moved last
    time too, equal each series' CounterState, also when one of them pauses, at
    jittered spacing, over gaps and beyond the hold window."""
    settings_ = TrackerSettings(gap_after=gap_after, max_hold=max_hold)
    width = idle + moving
    values = [float(1000 * i) for i in range(width)]
    ts = 50.0
    fam = FamilyCounters(settings_)
    singles = []
    for v in values:
        fam.add(v, ts, 7)
        singles.append(CounterState(v, ts, 7))
    for dt, still in polls:
        ts += dt
        for k in range(moving):
            if k != still:
                values[idle + k] += 4096.0 * (k + 1) + dt
        got = fam.update(values, ts, 7)
        want = [s.update(v, ts, settings_, 64, 7) for s, v in zip(singles, values, strict=True)]
        assert got == want
        assert fam.totals == [s.total for s in singles]
        assert [fam.state(i).refresh for i in range(width)] == [s.refresh for s in singles]


def test_steady_poll_gives_per_second_figures_of_one_shape() -> None:
    """The steady poll of a busy family hands over figures, not a Rate per series;
    they are the rates update() gives (and CounterState does)."""
    settings_ = TrackerSettings()
    fam = FamilyCounters(settings_)
    singles = [CounterState(0.0, 0.0, 1), CounterState(0.0, 0.0, 1), CounterState(5.0, 0.0, 1)]
    for i, s in enumerate(singles):
        fam.add(s.value, 0.0, 1)
        assert fam.state(i).value == s.value
    last = None
    for step in range(1, 6):
        ts = step * 1.0
        values = [100.0 * step, 7.0 * step, 5.0]  # two move every poll, one never
        polled = fam.poll(values, ts, 1)
        want = [s.update(v, ts, settings_, 64, 1) for s, v in zip(singles, values, strict=True)]
        assert polled.all() == want
        last = polled
    assert last is not None
    assert last.rates is None
    assert last.per_second == [100.0, 7.0, 0.0]
    assert last.shape == (1.0, False, False)


@pytest.mark.parametrize("first", [[0.0, 0.0, 5.0], [-0.0, 0.0, 5.0], [0, 3, 5.0]])
def test_idle_family_poll_equals_counter_state_to_the_bit(first: list[float]) -> None:
    """A family that never moves (error counters) takes a short cut: zero rates and
    unchanged totals without a delta per series. Its totals are CounterState's
    bit for bit - also a -0.0 total (kept by a reset to -0.0; -0.0 + 0.0 is 0.0) -
    and the family goes on the same way when it starts moving."""
    settings_ = TrackerSettings()
    fam = FamilyCounters(settings_)
    singles = [CounterState(v, 0.0, 0) for v in first]
    for v in first:
        fam.add(v, 0.0, 0)
    values = list(first)
    for step in range(1, 9):
        if step >= 6:
            values = [v + 10.0 * step for v in values]
        epoch = 1  # a reboot at the first poll: each total += the same value again
        polled = fam.poll(values, float(step), epoch)
        want = [
            s.update(v, float(step), settings_, 64, epoch)
            for s, v in zip(singles, values, strict=True)
        ]
        assert polled.all() == want
        assert [repr(t) for t in fam.totals] == [repr(s.total) for s in singles]
        if 1 < step < 6:  # idle after the reboot: zero rates of this interval
            assert polled.per_second == [0.0, 0.0, 0.0]


def test_a_64_bit_counter_that_wraps_at_2_32_keeps_every_rate() -> None:
    # Legacy InfiniBand port data counters are 32-bit: at 400 MB/s one
    # wraps every 11 s. Declared 64-bit (the family's width), each wrap
    # read as a reset and dropped a sample; the one-by-one and the
    # family-wide conversion agree on it.
    settings_ = TrackerSettings()
    value, ts = float(2**32 - 1_000_000_000), 0.0
    single = CounterState(value, ts, None)
    fam = FamilyCounters(settings_, 64)
    fam.add(value, ts, None)
    for _ in range(20):
        ts += 5.0
        value = float((int(value) + 2_000_000_000) % 2**32)
        r = single.update(value, ts, settings_, 64)
        assert r is not None and r.per_second == 400e6
        assert fam.update([value], ts, None) == [r]
    # A counter above 2^32 is 64-bit indeed: going backwards is a reset.
    big = CounterState(float(2**40), 0.0, None)
    assert big.update(5.0, 1.0, settings_, 64) is None
    # And one low in the 32-bit range too (no wrap leaves it that high).
    low = CounterState(1e9, 0.0, None)
    assert low.update(5.0, 1.0, settings_, 64) is None
