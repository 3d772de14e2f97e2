"""Families handed to the store as Columns give exactly what single readings give.

The store converts a column of counters with FamilyCounters in one pass; these
tests feed the same polls to one store as ``Batch``/``Columns`` and to another
as plain ``Reading`` values, and compare every series after every poll: values
(unwrapped totals), rates, history, and what was accepted or refused - over
wraps, resets (backwards steps and epoch changes), gaps, counters that refresh
slower than they are polled, invalid samples, series that come and go, and
expiry.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.counters import TrackerSettings
from fabricwatch.readings import (
    Batch,
    Columns,
    ColumnsBuilder,
    MetricKind,
    MetricSpec,
    Reading,
)
from fabricwatch.store import SnapshotStore

C32 = MetricSpec("fabricwatch_test_link_errors", MetricKind.COUNTER, "e", ("gpu", "link"), bits=32)
C64 = MetricSpec("fabricwatch_test_link_bytes", MetricKind.COUNTER, "b", ("gpu", "link"))
G = MetricSpec("fabricwatch_test_link_up", MetricKind.GAUGE, "u", ("gpu", "link"))
SPECS = (C32, C64, G)

_STEP = st.sampled_from(
    [
        *("hold", "hold", "inc", "inc", "inc", "big", "back", "reset"),
        *("nan", "negative", "absent", "own_epoch"),
    ]
)


def _stores(gap_after: float, max_hold: float, stale: float) -> tuple[SnapshotStore, ...]:
    out = []
    for _ in range(2):
        s = SnapshotStore(
            history=4,
            stale_after=stale,
            tracker=TrackerSettings(gap_after=gap_after, max_hold=max_hold),
        )
        s.register("gpu", SPECS)
        out.append(s)
    return tuple(out)


def _snapshot(store: SnapshotStore) -> dict[tuple[str, tuple[str, ...]], object]:
    return {
        (s.spec.name, s.labels): (
            s.value,
            s.rate,
            s.updated,
            [tuple(p) for p in s.history],
        )
        for s in store
    }


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(1, 5),
    polls=st.lists(
        st.tuples(
            st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0, 0.0, 15.0, 40.0]),
            st.booleans(),  # epoch change (driver reload) this poll
            st.lists(st.tuples(_STEP, st.integers(1, 1 << 20)), min_size=5, max_size=5),
            st.booleans(),  # expire() before this poll
        ),
        min_size=1,
        max_size=40,
    ),
    gap_after=st.sampled_from([3.0, 10.0]),
    max_hold=st.sampled_from([1.5, 5.0]),
    # (each series its own epoch, as a NIC port re-plugged alone; samples time-stamped
    # by the collector, as SNMP responses)
    variant=st.tuples(st.booleans(), st.booleans()),
)
def test_columns_equal_single_readings_through_the_store(
    width: int,
    polls: list[tuple[float, bool, list[tuple[str, int]], bool]],
    gap_after: float,
    max_hold: float,
    variant: tuple[bool, bool],
) -> None:
    per_series, stamped = variant
    by_columns, by_readings = _stores(gap_after, max_hold, stale=30.0)
    builders = {spec.name: ColumnsBuilder(spec.name) for spec in SPECS}
    labels = [("0", str(i)) for i in range(width)]  # the same tuple objects every poll
    values = [float((1 << 32) - 1000 * (i + 1)) for i in range(width)]  # wrap soon
    now, epoch = 100.0, 0
    own = [0] * width
    for dt, reboot, steps, expire in polls:
        now += dt
        epoch += 1 if reboot else 0
        if expire:
            assert by_columns.expire(now) == by_readings.expire(now)
        sent_labels: list[tuple[str, ...]] = []
        sent: list[float] = []
        sent_epochs: list[int | None] = []
        for i in range(width):
            kind, n = steps[i]
            if kind == "absent":
                continue  # this series is missing this poll: the columns change
            if kind == "inc":
                values[i] = float((int(values[i]) + n) % (1 << 32))
            elif kind == "big":
                values[i] = float((int(values[i]) + n * 4096) % (1 << 32))
            elif kind == "back":
                values[i] = float((int(values[i]) + (1 << 32) - n) % (1 << 32))
            elif kind == "reset":
                values[i] = float(n % 100)
            elif kind == "own_epoch":
                own[i] += 1
                values[i] = float((int(values[i]) + n) % (1 << 32))
            sample = {"nan": math.nan, "negative": -1.0}.get(kind, values[i])
            sent_labels.append(labels[i])
            sent.append(sample)
            sent_epochs.append(epoch + 1000 * own[i])
        columns = [
            builders[spec.name].columns(
                sent_labels,
                list(sent),
                None if spec.kind is MetricKind.GAUGE else epoch,
                list(sent_epochs) if per_series and spec.kind is MetricKind.COUNTER else None,
            )
            for spec in SPECS
        ]
        if stamped:  # the collector knows the sample time (an SNMP response's arrival)
            columns = [replace(c, ts=now - 0.25) for c in columns]
        singles = [r for c in columns for r in c.readings()]
        got = by_columns.ingest("gpu", Batch([], columns), now)
        want = by_readings.ingest("gpu", singles, now)
        assert (got.accepted, got.rejected, got.reasons) == (
            want.accepted,
            want.rejected,
            want.reasons,
        )
        assert _snapshot(by_columns) == _snapshot(by_readings)


def test_a_batch_reads_as_its_readings() -> None:
    cols = Columns(C64.name, (("0", "1"), ("0", "2")), [5.0, 6.0], epoch=3)
    single = Reading(G.name, ("0", "1"), 1.0)
    batch = Batch([single], [cols])
    want = [
        single,
        Reading(C64.name, ("0", "1"), 5.0, None, 3),
        Reading(C64.name, ("0", "2"), 6.0, None, 3),
    ]
    assert list(batch) == want
    assert len(batch) == 3
    assert batch[1] == want[1]
    assert list(batch[1:]) == want[1:]


def test_columns_keep_their_labels_tuple_while_the_series_are_the_same() -> None:
    b = ColumnsBuilder(C64.name)
    a, c = ("0", "1"), ("0", "2")
    first = b.columns([a, c], [1.0, 2.0]).labels
    assert b.columns([a, c], [3.0, 4.0]).labels is first
    changed = b.columns([a], [5.0]).labels
    assert changed == (a,)
    assert changed is not first


def test_series_fed_as_readings_go_on_from_their_state_when_fed_as_columns() -> None:
    """A family that switches from readings to columns (a collector upgrade in
    place, a fallback) keeps rates and totals: no reset in between."""
    store, _ = _stores(10.0, 5.0, 30.0)
    lab = ("0", "1")
    store.ingest("gpu", [Reading(C64.name, lab, 100.0, None, 1)], 0.0)
    store.ingest("gpu", [Reading(C64.name, lab, 150.0, None, 1)], 1.0)
    store.ingest("gpu", Batch([], [Columns(C64.name, (lab,), [250.0], 1)]), 2.0)
    s = store.get(C64.name, lab)
    assert s is not None
    assert s.rate is not None
    assert s.rate.per_second == 100.0
    assert s.value == 250.0
    assert [p.value for p in s.history] == [50.0, 100.0]


def test_columns_of_an_undeclared_family_or_wrong_labels_are_refused_and_counted() -> None:
    store, _ = _stores(10.0, 5.0, 30.0)
    res = store.ingest(
        "gpu",
        Batch(
            [],
            [
                Columns("fabricwatch_test_unknown", (("a",),), [1.0]),
                Columns(G.name, (("0", "1"), ("only-one",)), [1.0, 1.0]),
            ],
        ),
        0.0,
    )
    assert res.accepted == 1
    assert res.rejected == 2
    assert res.reasons == {"undeclared": 1, "labels": 1}
    assert store.get(G.name, ("0", "1")) is not None


def test_a_series_twice_in_one_column_is_taken_as_single_readings() -> None:
    """Columns with one series twice go reading by reading: the same as readings."""
    by_columns, by_readings = _stores(10.0, 5.0, 30.0)
    lab = ("0", "1")
    for now, (a, b) in enumerate([(100.0, 150.0), (300.0, 320.0), (400.0, 410.0)]):
        cols = Columns(C64.name, (lab, lab), [a, b], 1)
        by_columns.ingest("gpu", Batch([], [cols]), float(now))
        by_readings.ingest("gpu", list(cols.readings()), float(now))
        assert _snapshot(by_columns) == _snapshot(by_readings)


@settings(max_examples=60, deadline=None)
@given(
    idle=st.integers(0, 3),
    moving=st.integers(1, 4),
    polls=st.lists(
        st.tuples(
            st.sampled_from([1.0, 0.999, 1.001, 0.5, 3.0, 12.0]),  # jittered spacing, gaps
            st.integers(-1, 3),  # a moving series that stays still this poll (-1: none)
            st.sampled_from(["ok", "ok", "ok", "ok", "nan", "absent", "reboot"]),
        ),
        min_size=2,
        max_size=40,
    ),
    history_of=st.sampled_from([None, (C64.name, G.name), ()]),
)
def test_steady_columns_equal_single_readings_through_the_store(
    idle: int,
    moving: int,
    polls: list[tuple[float, int, str]],
    history_of: tuple[str, ...] | None,
) -> None:
    """Byte counters that move every poll next to error counters that never move:
    the steady path (one rate shape for the whole family, no Rate made per series;
    families with and without history) gives what single readings give, also when
    a poll brings an invalid sample, a missing series or a reboot in between."""
    stores = [
        SnapshotStore(history=5, stale_after=30.0, history_families=history_of) for _ in range(2)
    ]
    for s in stores:
        s.register("gpu", SPECS)
    by_columns, by_readings = stores
    width = idle + moving
    labels: list[tuple[str, ...]] = [("0", str(i)) for i in range(width)]
    values = [float(1000 * i) for i in range(width)]
    builders = {spec.name: ColumnsBuilder(spec.name) for spec in SPECS}
    now, epoch = 10.0, 0
    for dt, still, event in polls:
        now += dt
        epoch += event == "reboot"
        for k in range(moving):
            if k != still:
                values[idle + k] += 4096.0 * (k + 1) + dt
        sent = list(values)
        sent_labels = list(labels)
        if event == "nan":
            sent[0] = math.nan
        elif event == "absent":
            del sent[0], sent_labels[0]
        columns = [
            builders[spec.name].columns(
                sent_labels, sent, None if spec.kind is MetricKind.GAUGE else epoch
            )
            for spec in SPECS
        ]
        singles = [r for c in columns for r in c.readings()]
        got = by_columns.ingest("gpu", Batch([], columns), now)
        want = by_readings.ingest("gpu", singles, now)
        assert (got.accepted, got.reasons) == (want.accepted, want.reasons)
        assert _snapshot(by_columns) == _snapshot(by_readings)


def test_series_created_together_as_columns_share_one_ring_of_times() -> None:
    """A GPU's links are polled together: their series keep one ring of times
    (8 bytes a point less each) until their points stop matching; then each
    has its own copy, with the points it had."""
    store, _ = _stores(10.0, 5.0, 30.0)
    b = ColumnsBuilder(G.name)
    links: list[tuple[str, ...]] = [("0", str(i)) for i in range(3)]
    for k in range(3):
        store.ingest("gpu", Batch([], [b.columns(links, [1.0, 1.0, 0.0])]), float(k))
    a, c, d = (store.get(G.name, lab) for lab in links)
    assert a is not None and c is not None and d is not None
    assert a.ring_ts is not None and a.ring_ts is c.ring_ts is d.ring_ts
    # Link 2 goes missing from one poll: the others get a point it does not.
    store.ingest("gpu", Batch([], [b.columns(links[:2], [1.0, 0.0])]), 3.0)
    assert d.ring_ts is not a.ring_ts and c.ring_ts is not a.ring_ts
    assert [p.ts for p in a.history] == [0.0, 1.0, 2.0, 3.0]
    assert [p.ts for p in d.history] == [0.0, 1.0, 2.0]
    assert [p.value for p in c.history] == [1.0, 1.0, 1.0, 0.0]
    # A family that keeps no history has no rings to share.
    store.set_history_families(())
    b2 = ColumnsBuilder(C64.name)
    store.ingest("gpu", Batch([], [b2.columns(links, [1.0, 2.0, 3.0])]), 4.0)
    assert all(s.ring_ts is None for s in store.family(C64.name))
