"""SnapshotStore: rates via the tracker, bounded history, staleness, bad readings."""

from __future__ import annotations

import math

import pytest

from fabricwatch.outputs.exposition import ReloadStatus, build_registry, generate_text
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore

G = MetricSpec("fabricwatch_test_temp_celsius", MetricKind.GAUGE, "t", ("dev",))
C = MetricSpec("fabricwatch_test_frames", MetricKind.COUNTER, "f", ("port",), bits=32)


def _store(**kw: float) -> SnapshotStore:
    s = SnapshotStore(history=int(kw.get("history", 5)), stale_after=kw.get("stale", 30.0))
    s.register("c1", [G, C])
    return s


def test_counters_become_rates_and_unwrapped_totals() -> None:
    s = _store()
    s.ingest("c1", [Reading(C.name, ("p1",), 2**32 - 10)], 0.0)
    s.ingest("c1", [Reading(C.name, ("p1",), 20)], 1.0)
    series = s.get(C.name, ("p1",))
    assert series is not None
    assert series.rate is not None
    assert series.rate.per_second == 30.0
    assert series.value == 2**32 - 10 + 30
    assert [p.value for p in series.history] == [30.0]


def test_history_is_bounded_by_configuration() -> None:
    s = _store(history=5)
    for i in range(100):
        s.ingest("c1", [Reading(G.name, ("d",), float(i))], float(i))
    series = s.get(G.name, ("d",))
    assert series is not None
    assert len(series.history) == 5
    assert series.history[-1].value == 99.0


def test_memory_does_not_grow_with_uptime_or_device_churn() -> None:
    s = _store(stale=10.0)
    for i in range(1000):
        # A new device label every second, as with hot-plug churn.
        s.ingest("c1", [Reading(G.name, (f"d{i}",), 1.0)], float(i))
        s.expire(float(i))
    assert len(s) <= 11


def test_bad_readings_are_rejected_and_counted_not_raised() -> None:
    s = _store()
    res = s.ingest(
        "c1",
        [
            Reading("fabricwatch_unknown", (), 1.0),
            Reading(G.name, ("a", "b"), 1.0),
            Reading(G.name, ("a",), math.nan),
            Reading(C.name, ("p",), -3),
            Reading(G.name, ("a",), 2.0),
        ],
        0.0,
    )
    assert res.accepted == 1
    assert res.reasons == {"undeclared": 1, "labels": 1, "not_finite": 1, "negative": 1}


def test_wrong_label_count_is_rejected_when_the_family_has_series() -> None:
    s = _store()
    s.ingest("c1", [Reading(G.name, ("a",), 1.0)], 0.0)
    res = s.ingest("c1", [Reading(G.name, ("a", "b"), 2.0), Reading(G.name, (), 3.0)], 1.0)
    assert res.accepted == 0 and res.reasons == {"labels": 2}
    assert [x.labels for x in s.family(G.name)] == [("a",)]


def test_a_collector_cannot_write_another_collectors_family() -> None:
    s = _store()
    res = s.ingest("c2", [Reading(G.name, ("a",), 1.0)], 0.0)
    assert res.reasons == {"undeclared": 1}
    with pytest.raises(ValueError, match="declared differently"):
        s.register("c2", [MetricSpec(G.name, MetricKind.GAUGE, "other help", ("dev",))])
    s.register("c2", [G])  # an identical declaration shares the family
    assert s.ingest("c2", [Reading(G.name, ("b",), 1.0)], 0.0).accepted == 1


def test_family_lookup() -> None:
    s = _store()
    s.ingest("c1", [Reading(G.name, ("a",), 1.0), Reading(G.name, ("b",), 2.0)], 0.0)
    assert sorted(x.labels for x in s.family(G.name)) == [("a",), ("b",)]
    assert s.family("fabricwatch_nothing") == ()
    series = s.get(G.name, ("a",))
    assert series is not None
    assert series.label_map() == {"dev": "a"}


@pytest.mark.parametrize("history", [2, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 7, 8, 30])
def test_packed_ring_reads_like_a_bounded_deque(history: int, n: int) -> None:
    from collections import deque

    s = _store(history=history)
    model: deque[tuple[float, float]] = deque(maxlen=history)
    for i in range(n):
        s.ingest("c1", [Reading(G.name, ("d",), i * 1.5)], float(i))
        model.append((float(i), i * 1.5))
    series = s.get(G.name, ("d",))
    if n == 0:
        assert series is None
        return
    assert series is not None
    h = series.history
    assert [tuple(p) for p in h] == list(model)
    assert [tuple(p) for p in reversed(h)] == list(reversed(model))
    assert len(h) == len(model) and bool(h)
    assert tuple(h[0]) == model[0] and tuple(h[-1]) == model[-1]
    assert [tuple(p) for p in h[1:]] == list(model)[1:]
    assert h[-1].ts == model[-1][0] and h[0].value == model[0][1]
    with pytest.raises(IndexError):
        h[len(model)]
    # The in-place reads the engine makes every tick: the oldest time, the newest times.
    assert series.first_ts() == model[0][0]
    for k in range(history + 2):
        assert h.tail_times(k) == [t for t, _ in model][len(model) - min(k, len(model)) :]


def test_history_only_for_the_families_named_and_latest_values_for_all() -> None:
    s = SnapshotStore(history=4, history_families={C.name})
    s.register("c1", [G, C])
    for i in range(6):
        s.ingest("c1", [Reading(G.name, ("d",), float(i)), Reading(C.name, ("p",), 10.0 * i)], i)
    g, c = s.get(G.name, ("d",)), s.get(C.name, ("p",))
    assert g is not None and c is not None
    assert g.value == 5.0 and not g.history and list(g.history) == [] and g.ring is None
    assert [p.value for p in c.history] == [10.0] * 4
    assert s.keeps_history(C.name) and not s.keeps_history(G.name)


def test_pad_history_fills_every_ring_keeping_the_points_newest_last() -> None:
    s = _store(history=5)
    for i in range(3):
        s.ingest("c1", [Reading(G.name, ("d",), float(i))], float(i))
    s.ingest("c1", [Reading(G.name, ("e",), 9.0)], 3.0)
    assert s.pad_history() == 2 + 4
    d = s.get(G.name, ("d",))
    assert d is not None and len(d.history) == 5
    assert [p.value for p in d.history] == [0.0, 0.0, 0.0, 1.0, 2.0]
    times = [p.ts for p in d.history]
    assert times == sorted(times) and times[-3:] == [0.0, 1.0, 2.0]
    # Appends after padding overwrite the padding first.
    s.ingest("c1", [Reading(G.name, ("d",), 7.0)], 4.0)
    assert [p.value for p in d.history] == [0.0, 0.0, 1.0, 2.0, 7.0]
    assert s.pad_history() == 0


def test_expire_skips_scans_but_never_misses_an_old_series() -> None:
    s = _store(stale=300.0)
    s.ingest("c1", [Reading(G.name, ("a",), 1.0)], 0.0)
    s.ingest("c1", [Reading(G.name, ("b",), 1.0)], 100.0)
    assert s.expire(299.0) == 0
    assert s.expire(350.0) == 1 and s.get(G.name, ("a",)) is None
    # A reading stamped earlier than anything seen (a collector's own ts).
    s.ingest("c1", [Reading(G.name, ("b",), 2.0, 10.0)], 360.0)
    s.ingest("c1", [Reading(G.name, ("c",), 2.0)], 360.0)
    assert s.expire(320.0) == 1 and s.get(G.name, ("b",)) is None
    assert s.expire(659.0) == 0 and s.expire(661.0) == 1 and len(s) == 0


def test_history_families_can_change_for_series_created_later() -> None:
    s = _store(history=3)
    s.set_history_families(())
    s.ingest("c1", [Reading(G.name, ("a",), 1.0)], 0.0)
    s.set_history_families(None)
    s.ingest("c1", [Reading(G.name, ("a",), 2.0), Reading(G.name, ("b",), 3.0)], 1.0)
    a, b = s.get(G.name, ("a",)), s.get(G.name, ("b",))
    assert a is not None and b is not None
    assert not a.history and [p.value for p in b.history] == [3.0]


def test_a_negative_first_counter_sample_leaves_no_series_to_export() -> None:
    """#21: a rejected first sample created the series, so /metrics served ``..._total -5.0``."""
    s = _store()
    res = s.ingest("c1", [Reading(C.name, ("p1",), -5.0)], 0.0)
    assert res.accepted == 0 and res.reasons == {"negative": 1}
    assert s.get(C.name, ("p1",)) is None and len(s) == 0
    text = generate_text(build_registry(s, list, ReloadStatus(True, 0.0), process_metrics=False))
    assert not [ln for ln in text.splitlines() if ln.startswith(b"fabricwatch_test_frames")]
    # A later valid sample starts the series from scratch; a negative one for
    # an existing series changes neither its value nor its freshness.
    s.ingest("c1", [Reading(C.name, ("p1",), 7.0)], 1.0)
    s.ingest("c1", [Reading(C.name, ("p1",), -1.0)], 2.0)
    series = s.get(C.name, ("p1",))
    assert series is not None and series.value == 7.0 and series.updated == 1.0
