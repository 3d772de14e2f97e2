"""The simulated node read by the real collectors (SNMP over loopback, NVML facade, sysfs, procfs).

A manual clock drives both the node and the collectors, so every rate the
store derives must come out exactly as the scenario set it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricwatch.clock import Clock
from fabricwatch.collector import CollectionFailedError, Collector, CollectorEnv
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.config import Config, parse_config
from fabricwatch.demo.node import (
    RDMA_BYTES_PER_SECOND,
    SimulatedNode,
    SyncedCollector,
)
from fabricwatch.demo.scenarios import HEALTHY, NODE, SCENARIOS, Condition, Work
from fabricwatch.engine import signals as sig
from fabricwatch.readings import MetricKind
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_gpu import ScenarioClock


@dataclass
class Rig:
    node: SimulatedNode
    clock: ScenarioClock
    config: Config
    env: CollectorEnv
    store: SnapshotStore
    collectors: dict[str, Collector]

    def build(self, name: str) -> Collector:
        reg = self.node.registry()
        c = reg[name].build(self.config.collectors[name], self.env)
        self.store.register(name, c.metrics())
        self.collectors[name] = c
        return c

    async def cycle(self, *names: str, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        for n in names:
            try:
                readings = await self.collectors[n].collect()
            except CollectionFailedError as exc:  # down, with readings saying why (supervisor)
                readings = exc.readings
            self.store.ingest(n, readings, self.clock())

    def value(self, name: str, labels: tuple[str, ...]) -> float | None:
        s = self.store.get(name, labels)
        if s is None:
            return None
        if s.spec.kind is MetricKind.COUNTER:
            return None if s.rate is None else s.rate.per_second
        return s.value


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    sc = ScenarioClock(1000.0)
    clock = Clock(monotonic=sc, wall=lambda: 1.7e9 + sc(), sleep=asyncio.sleep)
    node = SimulatedNode(tmp_path, clock)
    await node.start()
    reg = node.registry()
    config = parse_config(node.config_table(listen="127.0.0.1:0", alerting=None), reg)
    env = CollectorEnv(
        node=NODE,
        proc_root=node.proc_root,
        sys_root=node.sys_root,
        state_dir=node.state_dir,
        monotonic=sc,
        wall=clock.wall,
    )
    r = Rig(node, sc, config, env, SnapshotStore(), {})
    try:
        yield r
    finally:
        for c in r.collectors.values():
            await asyncio.wait_for(c.close(), timeout=10)
        node.close()


NK = ("mlx5_0", "1")


async def test_nic_collector_sees_each_condition_exactly(rig: Rig) -> None:
    nic = rig.build("nic")
    assert isinstance(nic, SyncedCollector)
    await nic.start()
    for _ in range(3):
        await rig.cycle("nic")
    assert rig.value(sig.NIC_TX_BYTES, NK) == pytest.approx(RDMA_BYTES_PER_SECOND, rel=1e-6)
    assert rig.value(sig.NIC_ECN, NK) == pytest.approx(HEALTHY.ecn_rate, abs=1)
    storm = SCENARIOS["pfc-storm"].condition(5.0)
    rig.node.apply(storm)
    await rig.cycle("nic")
    await rig.cycle("nic")
    assert rig.value(sig.NIC_PFC_RATIO, (*NK, "3", "rx")) == pytest.approx(storm.nic_pause, 1e-3)
    assert rig.value(sig.NIC_TX_BYTES, NK) == pytest.approx(
        RDMA_BYTES_PER_SECOND * storm.traffic, rel=1e-6
    )
    ecn = SCENARIOS["ecn-congestion"].condition(5.0)
    rig.node.apply(ecn)
    await rig.cycle("nic")
    await rig.cycle("nic")
    assert rig.value(sig.NIC_ECN, NK) == pytest.approx(ecn.ecn_rate, abs=1)
    assert rig.value(sig.NIC_CNP_HANDLED, NK) == pytest.approx(ecn.ecn_rate * 0.8, abs=1)
    assert rig.value(sig.NIC_XMIT_WAIT, NK) == pytest.approx(ecn.xmit_wait, abs=1e-3)


async def test_nic_link_flap_counts_downs_and_recovers(rig: Rig) -> None:
    nic = rig.build("nic")
    await nic.start()
    flap = SCENARIOS["link-flap"]
    await rig.cycle("nic")
    await rig.cycle("nic")
    assert rig.value(sig.NIC_LINK_UP, NK) == 1.0
    for cycle in range(2):
        rig.node.apply(flap.condition(0.0))
        await rig.cycle("nic")
        assert rig.value(sig.NIC_LINK_UP, NK) == 0.0
        downed = rig.store.get(sig.NIC_LINK_DOWNED, NK)
        assert downed is not None
        assert downed.value == cycle + 1
        rig.node.apply(flap.condition(6.0))
        await rig.cycle("nic")
        assert rig.value(sig.NIC_LINK_UP, NK) == 1.0


async def test_storage_latency_and_burst_from_the_simulated_backend(rig: Rig) -> None:
    st = rig.build("storage")
    await st.start()
    for _ in range(3):
        await rig.cycle("storage")
    assert rig.value(sig.ST_WRITE_LAT, ("ckpt",)) == pytest.approx(HEALTHY.ckpt_latency, rel=0.05)
    assert rig.value(sig.ST_WRITE_BYTES, ("ckpt",)) == pytest.approx(
        HEALTHY.ckpt_write_rate, rel=0.01
    )
    ckpt = SCENARIOS["checkpoint-stall"].condition(3.0)
    rig.node.apply(ckpt)
    await rig.cycle("storage")
    await rig.cycle("storage")
    assert rig.value(sig.ST_WRITE_LAT, ("ckpt",)) == pytest.approx(ckpt.ckpt_latency, rel=0.01)
    assert rig.value(sig.ST_WRITE_BYTES, ("ckpt",)) == pytest.approx(ckpt.ckpt_write_rate, rel=0.01)
    info = rig.store.family("fabricwatch_storage_path_info")
    assert [s.labels[2:] for s in info] == [("xfs", "nvme9n1")]


async def test_storage_collector_survives_a_torn_diskstats(rig: Rig) -> None:
    st = rig.build("storage")
    await st.start()
    await rig.cycle("storage")
    # Something else scribbles over the simulated file: the collector reports
    # the source down; the next write-at-read brings it back.
    (rig.node.proc_root / "diskstats").write_text("259 9 nvme9n1 1 2\n")
    inner = st._inner  # type: ignore[attr-defined]
    readings = await inner.collect()
    up = [
        r
        for r in readings
        if r.name == "fabricwatch_storage_source_up" and r.labels == ("diskstats",)
    ]
    assert up[0].value == 0.0
    await rig.cycle("storage")
    s = rig.store.get("fabricwatch_storage_source_up", ("diskstats",))
    assert s is not None
    assert s.value == 1.0


async def test_gpu_work_states_through_the_nvml_facade(rig: Rig) -> None:
    gpu = rig.build("gpu")
    assert isinstance(gpu, GpuCollector)
    await gpu.start()
    await rig.cycle("gpu")
    await rig.cycle("gpu")
    assert rig.value(sig.GPU_SM, ("0",)) == pytest.approx(0.82, abs=0.02)
    job = rig.store.family(sig.GPU_JOB)
    assert {s.labels for s in job} == {(str(i), "slurm:4242") for i in range(8)}
    states: list[tuple[Condition, float, float]] = [
        (Condition(work=Work.SLOW, load=0.45), 0.82 * 0.45, 0.9),
        (Condition(work=Work.HUNG), 0.01, 0.9),
        (Condition(work=Work.WAIT), 0.0, -0.1),
    ]
    for cond, sm, util_min in states:
        rig.node.apply(cond)
        await rig.cycle("gpu")
        assert rig.value(sig.GPU_SM, ("3",)) == pytest.approx(sm, abs=0.02), cond.work
        util = rig.value(sig.GPU_UTIL, ("3",))
        assert util is not None
        assert util >= util_min
        # Waiting on I/O or hung, the job's processes and memory stay.
        assert rig.value(sig.GPU_PROCS, ("3",)) == 1.0
    power = rig.value(sig.GPU_POWER, ("3",))
    assert power is not None
    assert power < 100


async def test_nvlink_drop_and_xid_reach_the_collector(rig: Rig) -> None:
    gpu = rig.build("gpu")
    await gpu.start()
    await rig.cycle("gpu")
    rig.node.apply(SCENARIOS["nvlink-degraded"].condition(1.0))
    rig.node.inject_xid(3, 74)
    await rig.cycle("gpu")
    assert rig.value(sig.NVLINK_UP, ("3", "7")) == 0.0
    assert rig.value(sig.NVLINK_UP, ("3", "6")) == 1.0
    # XIDs come through the facade's event thread (real time): bounded wait.
    deadline = time.monotonic() + 5
    xid = None
    for _ in range(100):
        xid = rig.store.get(sig.GPU_XID, ("3", "74"))
        if xid is not None or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
        await rig.cycle("gpu")
    assert xid is not None
    rig.node.apply(HEALTHY)
    await rig.cycle("gpu")
    assert rig.value(sig.NVLINK_UP, ("3", "7")) == 1.0


async def test_switch_collector_over_snmp_finds_the_uplink_by_lldp(rig: Rig) -> None:
    sw = rig.build("switch")
    await sw.start()
    await rig.cycle("switch")
    await rig.cycle("switch")
    up = rig.store.family(sig.SW_PORT_UP)
    # Only the ports whose LLDP neighbour is this node are polled.
    assert sorted(s.labels for s in up) == [("leaf1", "Ethernet0"), ("leaf1", "Ethernet4")]
    storm = SCENARIOS["pfc-storm"].condition(5.0)
    rig.node.apply(storm)
    await rig.cycle("switch")
    await rig.cycle("switch")
    ratio = rig.value(sig.SW_PFC_RATIO, ("leaf1", "Ethernet0", "3", "rx"))
    assert ratio == pytest.approx(storm.uplink_pause, abs=0.01)
    assert rig.value(sig.SW_PFC_RATIO, ("leaf1", "Ethernet4", "3", "rx")) == 0.0
    rig.node.apply(SCENARIOS["link-flap"].condition(0.0))
    await rig.cycle("switch")
    assert rig.value(sig.SW_PORT_UP, ("leaf1", "Ethernet0")) == 0.0


async def test_switch_collector_recovers_when_the_agent_goes_silent(rig: Rig) -> None:
    sw = rig.build("switch")
    await sw.start()
    await rig.cycle("switch")
    target_up = "fabricwatch_switch_target_up"
    assert rig.value(target_up, ("leaf1",)) == 1.0
    rig.node.agent.fault = "silent"
    await rig.cycle("switch")
    assert rig.value(target_up, ("leaf1",)) == 0.0
    rig.node.agent.fault = "none"
    # The collector backs off after a failure (2 s, in simulated time).
    for _ in range(5):
        await rig.cycle("switch", seconds=2.0)
        if rig.value(target_up, ("leaf1",)) == 1.0:
            break
    assert rig.value(target_up, ("leaf1",)) == 1.0


def test_registry_keeps_the_switch_factory_and_config_disables_nothing_it_needs(
    rig: Rig,
) -> None:
    from fabricwatch.collectors import builtin_registry

    reg = rig.node.registry()
    assert reg["switch"] is builtin_registry()["switch"]
    for name in ("gpu", "nic", "storage", "switch"):
        assert rig.config.collectors[name].enabled
