"""Counter samples of an export that went back between two that did not.

Noisy exports swap two samples' values now and then (or serve a stale
cached value): the counter reads lower for one sample, then carries on. Read
as a reset, the next sample counted the increase since the low value twice,
so a one-sample ECN burst held on two samples and read as sustained
congestion: a storage stall on a noisy 15 s node (sweep plan 31372) opened
as an ``ecn_congestion`` slowdown. Replay drops such a value; a reset or a
32-bit wrap stays low on the next sample and is kept.
"""

from __future__ import annotations

import io

from fabricwatch.engine import signals as sig
from fabricwatch.engine import tracegen as tg
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics

from .conftest import replay_plan

T0 = 1_700_000_000.0
_NAME = 'node_infiniband_np_cnp_packets_sent_total{device="mlx5_0",port="1"}'


def _values(values: list[float]) -> list[tuple[float, float]]:
    text = "".join(f"{_NAME} {v!r} {T0 + 15 * k}\n" for k, v in enumerate(values))
    m = Mapper()
    parse_openmetrics(io.StringIO(text + "# EOF\n"), m)
    return [(ts - T0, v) for ts, fam, _, v in m.finish() if fam == sig.NIC_CNP_SENT]


def test_a_value_below_both_neighbours_is_dropped() -> None:
    # 130 and 120 swapped: 120 read as a reset would count 120 -> 140 again.
    assert _values([100, 110, 130, 120, 140, 150]) == [
        (0, 100),
        (15, 110),
        (30, 130),
        (60, 140),
        (75, 150),
    ]


def test_a_reset_and_a_wrap_are_kept() -> None:
    # A reset stays low; a 32-bit wrap too (the counter tracker unwraps it).
    reset = [100.0, 110.0, 120.0, 3.0, 9.0, 15.0]
    assert [v for _, v in _values(reset)] == reset
    wrap = [2**32 - 30.0, 2**32 - 10.0, 5.0, 25.0]
    assert [v for _, v in _values(wrap)] == wrap
    # Two resets in a row, and a reset to a value that then falls again.
    twice = [100.0, 50.0, 20.0, 30.0]
    assert [v for _, v in _values(twice)] == twice


def test_a_value_that_goes_back_at_the_end_is_kept() -> None:
    # Nothing after it says whether it was stale: it stays (read as a reset).
    assert [v for _, v in _values([100.0, 110.0, 105.0])] == [100.0, 110.0, 105.0]


def test_a_swapped_cnp_sample_opens_no_congestion_slowdown_before_a_storage_stall() -> None:
    plan, incidents = replay_plan(31372, "noisy", 15.0)
    sp = plan.spacing
    truth = next(t for t in plan.truth if t.cause == "storage_latency")
    near = [
        inc
        for inc in incidents
        if inc.onset <= truth.end + 2 * sp and (inc.ended_at or inc.updated_at) >= truth.onset - sp
    ]
    assert [(inc.kind, inc.cause) for inc in near] == [("stall", "storage_latency")], [
        (inc.kind, inc.cause, inc.onset - tg.T0) for inc in near
    ]


def test_a_value_repeated_between_moving_ones_is_dropped() -> None:
    # A stale repeat of 130 at 45 s: 0 then a double step. Without it the
    # rate over 30-60 s is the same as around it.
    m = Mapper()
    text = "".join(
        f"{_NAME} {v!r} {T0 + 15 * k}\n" for k, v in enumerate([100, 115, 130, 130, 160, 175])
    )
    parse_openmetrics(io.StringIO(text + "# EOF\n"), m)
    kept = [(ts - T0, v) for ts, fam, _, v in m.finish() if fam == sig.NIC_CNP_SENT]
    assert kept == [(0, 100), (15, 115), (30, 130), (60, 160), (75, 175)]
    assert m.dropped == {"stale_repeat": 1}


def test_repeats_of_a_quiet_counter_or_a_real_pause_in_events_are_kept() -> None:
    # Quiet (its step before the repeat is 0), then a storm: every sample stays.
    quiet = [100.0, 100.0, 100.0, 400.0, 700.0]
    assert [v for _, v in _values(quiet)] == quiet
    # Events stop for a sample and come back at the same pace: kept too.
    pause = [100.0, 115.0, 130.0, 130.0, 145.0, 160.0]
    assert [v for _, v in _values(pause)] == pause
    # A repeat at the end: nothing says it was stale.
    end = [100.0, 115.0, 130.0, 130.0]
    assert [v for _, v in _values(end)] == end


def test_a_stale_repeat_of_a_pause_time_counter_is_dropped_on_the_way() -> None:
    # Pause time becomes a ratio as it is read: a stale repeat of the
    # microseconds paused read 0 % and then 100 % (192 %, capped) of a storm
    # at 96 %; without it every interval reads 96 %.
    name = 'cpfcIfPriorityWaitRx{switch="leaf1",ifName="Ethernet48",cpfcIfPriorityWaitCoS="3"}'
    values = [0.0, 9.6e6, 19.2e6, 19.2e6, 38.4e6, 48.0e6]
    text = "".join(f"{name} {v!r} {T0 + 10 * k}\n" for k, v in enumerate(values))
    m = Mapper()
    parse_openmetrics(io.StringIO(text + "# EOF\n"), m)
    ratios = [(ts - T0, round(v, 3)) for ts, fam, _, v in m.finish() if fam == sig.SW_PFC_RATIO]
    assert ratios == [(10, 0.96), (20, 0.96), (40, 0.96), (50, 0.96)]
    assert m.dropped == {"stale_repeat": 1}
