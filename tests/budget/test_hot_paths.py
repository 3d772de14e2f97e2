"""The store's and the counter tracker's fast paths behave exactly like the documented rules.

``SnapshotStore.ingest`` caches, per collector, which families it may feed and
unpacks readings; ``CounterState.update`` builds ``Rate``/``Point`` with
``tuple.__new__`` and takes ``bits``/``epoch`` by position. These tests fail if
a cache goes stale, a rejection reason changes, or a rate differs from the
tracker's keyword path.
"""

from __future__ import annotations

import math
import random

from fabricwatch.counters import CounterState, CounterTracker, Rate, TrackerSettings
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.store import Point, SnapshotStore

C32 = MetricSpec("fabricwatch_t_frames", MetricKind.COUNTER, "f", ("port",), bits=32)
G = MetricSpec("fabricwatch_t_temp_celsius", MetricKind.GAUGE, "t", ("dev",))
SHARED = MetricSpec("fabricwatch_t_shared_bytes", MetricKind.COUNTER, "s", ("port",))
LATE = MetricSpec("fabricwatch_t_late", MetricKind.GAUGE, "l", ())


def test_route_cache_follows_later_registrations() -> None:
    s = SnapshotStore()
    s.register("a", [C32, SHARED])
    assert s.ingest("a", [Reading(SHARED.name, ("p",), 1.0)], 0.0).accepted == 1
    # b is not an owner yet: rejected, and that answer must not be cached forever.
    assert s.ingest("b", [Reading(SHARED.name, ("p",), 2.0)], 0.5).reasons == {"undeclared": 1}
    s.register("b", [SHARED])
    assert s.ingest("b", [Reading(SHARED.name, ("q",), 2.0)], 1.0).accepted == 1
    # A family registered after a collector's first ingest is routed too.
    assert s.ingest("a", [Reading(LATE.name, (), 3.0)], 1.0).reasons == {"undeclared": 1}
    s.register("a", [LATE])
    assert s.ingest("a", [Reading(LATE.name, (), 3.0)], 2.0).accepted == 1
    fam = s.family(SHARED.name)
    assert {x.labels: x.collector for x in fam} == {("p",): "a", ("q",): "b"}


def test_rejections_keep_their_reasons_and_negative_counters_do_not_move_state() -> None:
    s = SnapshotStore()
    s.register("a", [C32, G])
    s.ingest("a", [Reading(C32.name, ("p",), 10.0)], 0.0)
    res = s.ingest(
        "a",
        [
            Reading(C32.name, ("p",), -1.0),
            Reading(C32.name, ("p", "x"), 1.0),
            Reading(G.name, ("d",), math.inf),
            Reading("fabricwatch_nope", (), 1.0),
            Reading(G.name, ("d",), 5.0),
        ],
        1.0,
    )
    assert (res.accepted, res.rejected) == (1, 4)
    assert res.reasons == {"negative": 1, "labels": 1, "not_finite": 1, "undeclared": 1}
    c = s.get(C32.name, ("p",))
    assert c is not None and c.value == 10.0 and c.rate is None
    s.ingest("a", [Reading(C32.name, ("p",), 14.0)], 2.0)
    assert c.rate == Rate(2.0, 2.0, False, False)


def test_rates_and_points_are_the_real_types() -> None:
    s = SnapshotStore()
    s.register("a", [C32, G])
    s.ingest("a", [Reading(C32.name, ("p",), 0.0), Reading(G.name, ("d",), 1.5)], 0.0)
    s.ingest("a", [Reading(C32.name, ("p",), 50.0), Reading(G.name, ("d",), 2.5)], 1.0)
    c, g = s.get(C32.name, ("p",)), s.get(G.name, ("d",))
    assert c is not None and g is not None
    assert type(c.rate) is Rate and c.rate.per_second == 50.0 and c.rate.interval == 1.0
    assert type(c.history[-1]) is Point and c.history[-1].value == 50.0
    assert list(g.history) == [Point(0.0, 1.5), Point(1.0, 2.5)]
    assert g.history[-1].ts == 1.0


def _sequence(rng: random.Random, n: int) -> list[tuple[float, float, int | None]]:
    """Polls with refresh lag, quiet stretches, gaps, 32-bit wraps, resets and epochs."""
    out: list[tuple[float, float, int | None]] = []
    t, v, epoch = 0.0, float(rng.randrange(1 << 32)), 0
    for _ in range(n):
        t += rng.choice((1.0, 1.0, 1.0, 0.5, 2.0, 15.0, 0.0))
        step = rng.random()
        if step < 0.35:
            pass  # not refreshed / quiet
        elif step < 0.85:
            v = (v + rng.randrange(1, 1 << 20)) % (1 << 32)
        elif step < 0.93:
            v = float(rng.randrange(100))  # reset
        else:
            epoch += 1
        out.append((t, v, epoch))
    return out


def test_positional_fast_path_equals_the_tracker_keyword_path() -> None:
    rng = random.Random(7)
    settings = TrackerSettings()
    for _ in range(50):
        seq = _sequence(rng, 200)
        tracker = CounterTracker(settings)
        state: CounterState | None = None
        for t, v, epoch in seq:
            want = tracker.update("k", v, t, bits=32, epoch=epoch)
            if state is None:
                state = CounterState(v, t, epoch)
                got = None
            else:
                got = state.update(v, t, settings, 32, epoch)
            assert got == want
            assert state.total == tracker.total("k")


def test_hold_and_refresh_learning() -> None:
    st = CounterState(0.0, 0.0, None)
    s = TrackerSettings()
    assert st.update(100.0, 1.0, s) == Rate(100.0, 1.0, False, False)
    assert st.update(300.0, 3.0, s) == Rate(100.0, 2.0, False, False)  # 2 s later: refresh 2 s
    # The counter refreshes every 2 s: a zero poll holds the last rate ...
    assert st.update(300.0, 4.0, s) == Rate(100.0, 1.0, True, False)
    # ... and the next change covers the time since the previous change.
    assert st.update(500.0, 5.0, s) == Rate(100.0, 2.0, False, False)
    # Quiet beyond hold (2 x refresh = 4 s): zeros with the poll interval.
    for t in (6.0, 7.0, 8.0, 9.0):
        st.update(500.0, t, s)
    assert st.update(500.0, 10.0, s) == Rate(0.0, 1.0, False, False)
    # After the quiet stretch a change covers only the last poll.
    assert st.update(600.0, 11.0, s) == Rate(100.0, 1.0, False, False)
