"""A configured series limit per collector, with a metric and a log line (issue 17, item 9)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.collector import CollectorEnv, CollectorSettings
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.readings import Batch, Columns, MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState, Supervisor
from fabricwatch.testing.sim_snmp import SimAgent, demo_switch
from tests.switch.conftest import community_file

ROW = MetricSpec("fabricwatch_test_row_octets", MetricKind.COUNTER, "Row.", ("switch", "port"))
OTHER = MetricSpec("fabricwatch_test_other", MetricKind.GAUGE, "Other.", ("port",))


@dataclass
class TableCollector:
    """A switch-mode poll of a table that keeps growing (a hostile or huge agent)."""

    rows: int
    grow: int = 0
    name: str = "table"

    def metrics(self) -> Sequence[MetricSpec]:
        return [ROW, OTHER]

    async def start(self) -> None:
        return None

    async def collect(self) -> Sequence[Reading]:
        self.rows += self.grow
        return [Reading(ROW.name, ("leaf1", f"Ethernet{i}"), float(i)) for i in range(self.rows)]

    async def close(self) -> None:
        return None


async def test_limit_holds_while_a_table_grows_and_is_counted_and_logged() -> None:
    store = SnapshotStore()
    sup = Supervisor(store, max_series=500)
    table = TableCollector(rows=300, grow=100)
    sup.add(table, CollectorSettings(interval=0.01, timeout=5.0))
    with structlog.testing.capture_logs() as logs:
        await sup.start()
        try:
            for _ in range(500):
                if table.rows >= 1500:
                    break
                await asyncio.sleep(0.01)
        finally:
            await sup.stop()
    assert table.rows >= 1500
    assert len(store.family(ROW.name)) == 500
    state = sup.states[0]
    assert state.up  # the collector still works: old series keep updating
    assert state.series_dropped > 0
    assert [e["event"] for e in logs].count("series_limit_reached") == 1
    reg = build_registry(store, lambda: sup.states, ReloadStatus(), process_metrics=False)
    text = "\n".join(f"{s.name} {s.labels} {s.value}" for fam in reg.collect() for s in fam.samples)
    assert "fabricwatch_collector_dropped_series_readings_total" in text


@settings(max_examples=40, deadline=None)
@given(
    limit=st.integers(1, 300),
    batches=st.lists(
        st.lists(st.tuples(st.sampled_from([ROW.name, OTHER.name]), st.integers(0, 400))),
        min_size=1,
        max_size=8,
    ),
)
def test_cap_never_lets_a_collector_pass_its_limit(
    limit: int, batches: list[list[tuple[str, int]]]
) -> None:
    store = SnapshotStore()
    sup = Supervisor(store, max_series=limit)
    sup.add(TableCollector(rows=0), CollectorSettings())
    state = CollectorState("table")
    seen: set[tuple[str, str]] = set()
    for batch in batches:
        readings = [
            Reading(n, ("leaf1", f"p{i}") if n == ROW.name else (f"p{i}",), 1.0) for n, i in batch
        ]
        before = {(s.spec.name, s.labels[-1]) for s in store}
        kept = sup._cap("table", readings, state)
        store.ingest("table", kept, 0.0)
        total = len(store.family(ROW.name)) + len(store.family(OTHER.name))
        assert total <= limit
        # Readings of series that already exist are never dropped.
        assert all(r in kept for r in readings if (r.name, r.labels[-1]) in before)
        seen |= {(n, f"p{i}") for n, i in batch}
    assert state.series_dropped == 0 or len(seen) > limit


async def test_a_big_switch_in_switch_mode_stays_under_the_limit(tmp_path: Path) -> None:
    """The real SNMP collector polling a real (simulated) 96-port agent over UDP."""
    sw = demo_switch(96, node="gpu-node-1")
    agent = await SimAgent(sw, community="fw-sim").start()
    target = TargetSettings(
        name="leaf1",
        host="127.0.0.1",
        port=agent.port,
        community_file=community_file(tmp_path, "fw-sim"),
        timeout=2.0,
        retries=1,
        mode="switch",
    )
    env = CollectorEnv(node="gpu-node-1", sys_root=tmp_path / "no-sys", state_dir=tmp_path)
    collector = SwitchCollector(SwitchSettings(targets=[target], interval=0.2), env)
    store = SnapshotStore()
    limit = 1000
    sup = Supervisor(store, max_series=limit)
    sup.add(collector, SwitchSettings(targets=[target], interval=0.2, timeout=10.0))
    with structlog.testing.capture_logs() as logs:
        await sup.start()
        try:
            state = sup.states[0]
            for _ in range(1500):
                if state.collections >= 3:
                    break
                await asyncio.sleep(0.01)
        finally:
            await sup.stop()
            agent.close()
    assert state.collections >= 3 and state.up
    total = sum(len(store.family(m.name)) for m in collector.metrics())
    assert total <= limit < 96 * 16  # 96 ports x 8 priorities x 2 directions of PFC alone
    assert state.series_dropped > 0
    hits = [e for e in logs if e["event"] == "series_limit_reached"]
    assert len(hits) == 1 and hits[0]["collector"] == "switch"


def test_cap_keeps_columns_as_columns_and_their_rates() -> None:
    """A collector that hands a family over as Columns (GPU NVLink, NIC counters) past
    its limit: the series over the limit are dropped from the columns, the kept ones
    stay columns and go on with their rates (no reset from a switch of paths)."""
    store = SnapshotStore()
    sup = Supervisor(store, max_series=3)
    sup.add(TableCollector(rows=0), CollectorSettings())
    state = CollectorState("table")
    labels = [("leaf1", f"p{i}") for i in range(5)]
    for k in range(3):
        cols = Columns(ROW.name, tuple(labels[: 2 + k]), [100.0 * (k + 1)] * (2 + k))
        kept = sup._cap("table", Batch([Reading(OTHER.name, ("x",), 1.0)], [cols]), state)
        assert isinstance(kept, Batch)
        store.ingest("table", kept, float(k))
    assert store.family_size(ROW.name) + store.family_size(OTHER.name) == 3
    assert state.series_dropped == 3  # p2 (twice: polls 2 and 3) and p3
    for i in (0, 1):
        s = store.get(ROW.name, labels[i])
        assert s is not None
        assert s.rate is not None
        assert s.rate.per_second == 100.0
