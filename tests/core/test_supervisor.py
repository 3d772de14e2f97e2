"""Supervisor: isolation, timeouts, backoff, startup policies."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.clock import Clock
from fabricwatch.collector import Collector, CollectorSettings, StartupPolicy
from fabricwatch.errors import SourceAbsentError
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import StartupFailedError, Supervisor, backoff_delay, grid_time


@dataclass
class FakeCollector:
    """A scriptable collector: behaviour per call from a list, then the last one forever."""

    name: str
    behaviour: list[str] = field(default_factory=lambda: ["ok"])
    start_behaviour: list[str] = field(default_factory=lambda: ["ok"])
    calls: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    starts: int = 0
    closed: bool = False

    def metrics(self) -> Sequence[MetricSpec]:
        return [MetricSpec(f"fabricwatch_fake_{self.name}", MetricKind.GAUGE, "x")]

    async def start(self) -> None:
        b = self.start_behaviour[min(self.starts, len(self.start_behaviour) - 1)]
        self.starts += 1
        if b == "raise":
            raise RuntimeError("device missing")

    async def collect(self) -> Sequence[Reading]:
        b = self.behaviour[min(len(self.calls), len(self.behaviour) - 1)]
        self.calls.append(time.monotonic())
        if b == "raise":
            raise RuntimeError("boom")
        if b == "absent":
            raise SourceAbsentError("no driver")
        if b == "hang":
            await asyncio.sleep(3600)
        if b == "thread":  # NVML's way: the sampling runs in a worker thread
            await asyncio.to_thread(time.sleep, 0.03)
        self.done.append(time.monotonic())
        return [Reading(f"fabricwatch_fake_{self.name}", (), float(len(self.calls)))]

    async def close(self) -> None:
        self.closed = True


def _settings(
    interval: float, timeout: float = 1.0, startup: StartupPolicy = StartupPolicy.RETRY
) -> CollectorSettings:
    return CollectorSettings(interval=interval, timeout=timeout, startup=startup)


def test_fake_is_a_collector() -> None:
    assert isinstance(FakeCollector("x"), Collector)


def test_backoff_grows_then_caps() -> None:
    assert backoff_delay(1.0, 0) == 1.0
    assert backoff_delay(1.0, 1) == 1.0
    assert backoff_delay(1.0, 2) == 2.0
    assert backoff_delay(1.0, 4) == 8.0
    assert backoff_delay(1.0, 50, cap=60.0) == 60.0
    assert backoff_delay(600.0, 5, cap=60.0) == 600.0  # never faster than the interval


async def test_raising_and_hanging_collectors_do_not_delay_a_healthy_one() -> None:
    store = SnapshotStore()
    sup = Supervisor(store)
    healthy = FakeCollector("healthy")
    raising = FakeCollector("raising", behaviour=["raise"])
    hanging = FakeCollector("hanging", behaviour=["hang"])
    sup.add(healthy, _settings(0.05))
    sup.add(raising, _settings(0.05))
    sup.add(hanging, _settings(0.05, timeout=0.5))
    await sup.start()
    await asyncio.sleep(1.0)
    states = {s.name: s for s in sup.states}
    await sup.stop()
    # Serialised behind a 0.5 s hang the healthy one would manage ~2 cycles.
    assert len(healthy.calls) >= 10
    assert states["healthy"].up
    assert not states["raising"].up
    assert states["raising"].failures["error"] >= 2
    assert not states["hanging"].up
    assert states["hanging"].failures["timeout"] >= 1
    assert all(c.closed for c in (healthy, raising, hanging))
    series = store.get("fabricwatch_fake_healthy", ())
    assert series is not None
    assert series.value >= 10


async def test_backoff_spacing_grows_and_resets_after_success() -> None:
    interval = 0.02
    c = FakeCollector("flaky", behaviour=["raise"] * 5 + ["ok"] * 50)
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(interval))
    await sup.start()
    for _ in range(200):
        if len(c.calls) >= 9:
            break
        await asyncio.sleep(0.02)
    await sup.stop()
    gaps = [b - a for a, b in itertools.pairwise(c.calls)]
    # After failure n the next attempt is planned backoff_delay(interval, n)
    # after the previous plan. The supervisor keeps to its planned grid, so
    # one late call shortens the next gap: compare the time since the first
    # call with the sum of the planned delays.
    for n in range(1, 6):
        planned = sum(backoff_delay(interval, k) for k in range(1, n + 1))
        assert c.calls[n] - c.calls[0] >= 0.9 * planned, gaps
    # After the first success the collector is back on its normal interval.
    assert max(gaps[6:8]) < backoff_delay(interval, 5)
    state = sup.states[0]
    assert state.up
    assert state.consecutive_failures == 0


async def test_startup_error_policy_refuses_to_run() -> None:
    c = FakeCollector("nic", start_behaviour=["raise"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.05, startup=StartupPolicy.ERROR))
    with pytest.raises(StartupFailedError, match=r"collectors\.nic\.startup"):
        await sup.start()
    assert c.closed


async def test_startup_ignore_policy_leaves_it_down_and_ready() -> None:
    c = FakeCollector("nic", start_behaviour=["raise"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.05, startup=StartupPolicy.IGNORE))
    await sup.start()
    await asyncio.sleep(0.2)
    await sup.stop()
    assert sup.ready()
    assert c.calls == []
    assert c.starts == 1


async def test_startup_retry_policy_starts_later() -> None:
    c = FakeCollector("nic", start_behaviour=["raise", "raise", "ok"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.02, startup=StartupPolicy.RETRY))
    await sup.start()
    for _ in range(100):
        if c.calls:
            break
        await asyncio.sleep(0.02)
    await sup.stop()
    assert c.starts == 3
    assert c.calls
    assert sup.states[0].failures["start"] == 2


async def test_absent_source_is_down_with_reason_absent_and_logged_quietly() -> None:
    from structlog.testing import capture_logs

    c = FakeCollector("gpu", behaviour=["absent"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.01))
    with capture_logs() as logs:
        await sup.start()
        for _ in range(100):
            if len(c.calls) >= 3:
                break
            await asyncio.sleep(0.02)
        await sup.stop()
    state = sup.states[0]
    assert not state.up
    assert state.failures["absent"] >= 3
    assert not [e for e in logs if e["event"] == "collector_failed"]


class _StillClock:
    """A monotonic clock that stands still, and a sleep that records when each task
    planned to wake (then yields briefly): the plans are the supervisor's grid."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.plans: dict[str, list[float]] = {}

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        name = asyncio.current_task().get_name()  # type: ignore[union-attr]
        self.plans.setdefault(name, []).append(self.t + seconds)
        await asyncio.sleep(0.001)


async def test_collectors_of_one_interval_share_the_grid_after_their_first_collection() -> None:
    """After its first collection every collector plans on the multiples of its interval
    (as the daemon's tick does), so loops of one interval wake the event loop once."""
    still = _StillClock(1000.3)
    cs = [FakeCollector(f"c{i}") for i in range(4)]
    sup = Supervisor(SnapshotStore(), clock=Clock(still.monotonic, time.time, still.sleep))
    for c in cs:
        sup.add(c, _settings(1.0))
    await sup.start()
    for _ in range(200):
        if all(len(still.plans.get(f"collector:{c.name}", ())) >= 3 for c in cs):
            break
        await asyncio.sleep(0.005)
    await sup.stop()
    for c in cs:
        plans = still.plans[f"collector:{c.name}"]
        # 1000.3 + 1 s, up to the next whole second; then a second apart.
        assert plans[:3] == pytest.approx([1002.0, 1003.0, 1004.0]), c.name


async def test_settled_returns_after_the_collections_of_the_grid_instant() -> None:
    """The daemon's tick wakes on the collectors' grid; after ``settled`` the
    collection due at that instant is in, not the one a round before."""
    c = FakeCollector("gpu", behaviour=["thread"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.2))
    await sup.start()
    fresh = []
    at = grid_time(time.monotonic() + 0.2, 0.2)
    try:
        for _ in range(4):
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            await sup.settled(at, at + 0.15)
            # The collection planned for ``at`` began at ``at`` at the earliest.
            fresh.append(bool(c.calls) and c.calls[-1] >= at - 0.01 and len(c.done) == len(c.calls))
            at += 0.2
    finally:
        await sup.stop()
    assert fresh == [True] * 4


async def test_settled_gives_up_at_its_limit_on_a_hanging_collector() -> None:
    c = FakeCollector("stuck", behaviour=["ok", "hang"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.1, timeout=5.0))
    await sup.start()
    at = grid_time(time.monotonic() + 0.1, 0.1)
    try:
        await asyncio.sleep(max(0.0, at - time.monotonic()) + 0.01)
        await sup.settled(at, time.monotonic() + 0.05)
        # It returned on the limit: the collection is still in flight.
        assert len(c.calls) == 2
        assert len(c.done) == 1
    finally:
        await sup.stop()


async def test_settled_does_not_wait_for_a_collector_backing_off() -> None:
    c = FakeCollector("down", start_behaviour=["raise"])
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.1))
    await sup.start()
    try:
        await asyncio.sleep(0.05)
        # Not started: nothing is due, whatever the instant.
        assert not sup._pending(time.monotonic() + 10.0)
    finally:
        await sup.stop()


async def test_settled_does_not_wait_for_a_stopped_supervisor() -> None:
    # A reload stops the old supervisor while its loops sleep to their next
    # collection: a tick that still asks it must not wait for them.
    c = FakeCollector("old")
    sup = Supervisor(SnapshotStore())
    sup.add(c, _settings(0.1))
    await sup.start()
    await asyncio.sleep(0.05)
    await sup.stop()
    assert not sup._pending(time.monotonic() + 10.0)


def test_grid_time_is_the_next_multiple_of_the_interval() -> None:
    assert grid_time(1000.3, 1.0) == 1001.0
    assert grid_time(1001.0, 1.0) == 1001.0
    assert grid_time(7.1, 2.5) == 7.5
    assert grid_time(7.1, 0.0) == 7.1


class _Rows:
    """A collector of one two-label family (for the series cap)."""

    name = "rows"
    spec = MetricSpec("fabricwatch_test_rows", MetricKind.GAUGE, "rows", ("a", "b"))

    def metrics(self) -> Sequence[MetricSpec]:
        return [self.spec]

    async def start(self) -> None:
        return None

    async def collect(self) -> Sequence[Reading]:
        return []

    async def close(self) -> None:
        return None


def _cap_reference(
    store: SnapshotStore, readings: Sequence[Reading], have: int, limit: int
) -> tuple[list[Reading], int]:
    """The cap's rule, plainly: a reading of a series not in the store (nor admitted
    earlier in this batch) is admitted while fewer than ``limit`` series exist."""
    kept: list[Reading] = []
    admitted: set[tuple[str, tuple[str, ...]]] = set()
    for r in readings:
        key = (r.name, r.labels)
        new = key not in admitted and store.get(*key) is None
        if not new or have < limit:
            kept.append(r)
            have += new
            admitted |= {key} if new else set()
    return kept, len(readings) - len(kept)


@settings(max_examples=150, deadline=None)
@given(
    existing=st.integers(0, 30),
    limit=st.integers(1, 40),
    rows=st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=60),
)
def test_series_cap_keeps_what_the_plain_rule_keeps(
    existing: int, limit: int, rows: list[tuple[int, bool]]
) -> None:
    store = SnapshotStore()
    sup = Supervisor(store, max_series=limit)
    collector = _Rows()
    sup.add(collector, CollectorSettings())
    name = collector.spec.name
    store.ingest("rows", [Reading(name, (str(i), "x"), 1.0) for i in range(existing)], 0.0)
    # Other families' names (undeclared here) never count as this collector's series.
    readings = [
        Reading(name if ours else "fabricwatch_test_other", (str(i), "x"), float(i))
        for i, ours in rows
    ]
    want, dropped = _cap_reference(store, readings, existing, limit)
    state = sup.states[0]
    got = sup._cap("rows", readings, state)
    assert list(got) == want
    assert state.series_dropped == dropped


@dataclass(kw_only=True)
class _Sourced(CollectorSettings):
    """Settings of a collector that polls ``n`` sources (switch targets, say)."""

    n: int = 1

    def sources(self) -> frozenset[str]:
        return frozenset(f"switch 'leaf{i}'" for i in range(self.n))


@pytest.mark.parametrize("sources", [0, 1, 4])
def test_series_limit_counts_per_source(sources: int) -> None:
    """Each source a collector polls has its own allowance (four 512-port switches in
    switch mode are ~105 000 series; the limit guards a runaway table)."""
    store = SnapshotStore()
    sup = Supervisor(store, max_series=10)
    collector = _Rows()
    sup.add(collector, _Sourced(n=sources))
    readings = [Reading(collector.spec.name, (str(i), "x"), 1.0) for i in range(100)]
    state = sup.states[0]
    store.ingest("rows", sup._cap("rows", readings, state), 0.0)
    assert store.family_size(collector.spec.name) == 10 * max(1, sources)
    assert state.series_dropped == 100 - 10 * max(1, sources)


def test_collection_timeout_derived_from_the_interval() -> None:
    assert CollectorSettings().collection_timeout() == 5.0  # 1 s: the 5 s of before
    assert CollectorSettings(interval=10.0).collection_timeout() == 9.0
    assert CollectorSettings(interval=60.0).collection_timeout() == 54.0
    assert CollectorSettings(interval=60.0, timeout=2.0).collection_timeout() == 2.0


@dataclass
class _Slow:
    """A collector whose every collection takes ``seconds``."""

    seconds: float
    name: str = "slow"

    def metrics(self) -> Sequence[MetricSpec]:
        return []

    async def start(self) -> None:
        return None

    async def collect(self) -> Sequence[Reading]:
        await asyncio.sleep(self.seconds)
        return []

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("interval", "up"), [(0.5, True), (0.1, False)])
async def test_supervisor_times_collections_out_by_their_interval(
    monkeypatch: pytest.MonkeyPatch, interval: float, up: bool
) -> None:
    """With no timeout set, a collection may take 0.9 x the interval (the 5 s floor
    lowered here to keep the test short): 0.2 s fits a 0.5 s interval, not a 0.1 s one."""
    monkeypatch.setattr("fabricwatch.collector.MIN_DERIVED_TIMEOUT", 0.01)
    sup = Supervisor(SnapshotStore())
    settings = CollectorSettings(interval=interval)
    collector = _Slow(0.2)
    sup.add(collector, settings)
    state = sup.states[0]
    await sup._collect_once(collector, settings, state)
    assert state.up is up
    assert state.failures == ({} if up else {"timeout": 1})
