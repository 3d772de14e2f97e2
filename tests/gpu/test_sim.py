"""The simulated backend behind the collector: the scenario API the demo and engine use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.collectors.gpu._types import NvmlUnavailable
from fabricwatch.errors import CollectorError
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_gpu import Activity, ScenarioClock, SimulatedGPUs


class SimRig:
    def __init__(self, model: str, count: int, tmp: Path, **settings: object) -> None:
        self.clock = ScenarioClock()
        self.gpus = SimulatedGPUs(model, count, self.clock)
        env = CollectorEnv(proc_root=tmp, monotonic=self.clock)
        self.collector = GpuCollector(GpuSettings(**settings), env, self.gpus)  # type: ignore[arg-type]
        self.store = SnapshotStore()
        self.store.register("gpu", self.collector.metrics())

    async def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.clock.advance(1.0)
            r = await self.collector.collect()
            assert self.store.ingest("gpu", r, self.clock()).rejected == 0

    def value(self, name: str, *labels: str) -> float:
        s = self.store.get(f"fabricwatch_gpu_{name}", labels)
        assert s is not None, (name, labels)
        return s.value

    def rate(self, name: str, *labels: str) -> float:
        s = self.store.get(f"fabricwatch_gpu_{name}", labels)
        assert s is not None and s.rate is not None, (name, labels)
        return s.rate.per_second


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Callable[..., SimRig]]:
    rigs: list[SimRig] = []

    def make(model: str = "H100", count: int = 8, **settings: object) -> SimRig:
        r = SimRig(model, count, tmp_path, **settings)
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        await r.collector.close()


async def test_busy_then_hung_collective(sim: Callable[..., SimRig]) -> None:
    rig = sim("H100", 8)
    await rig.collector.start()
    rig.gpus.set_activity(None, Activity.BUSY)
    await rig.run(3)
    assert rig.value("utilization_ratio", "0") > 0.9
    assert rig.value("sm_active_ratio", "0") > 0.7
    assert rig.value("power_watts", "0") > 500
    assert rig.value("compute_processes", "0") == 1.0
    assert rig.rate("nvlink_transmit_bytes", "0", "17") == pytest.approx(0.55 * 26.562e9)
    rig.gpus.set_activity(None, Activity.HUNG)
    await rig.run(3)
    # The hung collective: utilization lies, the other work signals collapse.
    assert rig.value("utilization_ratio", "0") > 0.95
    assert rig.value("sm_active_ratio", "0") < 0.05
    assert rig.value("power_watts", "0") < 150
    assert rig.rate("nvlink_transmit_bytes", "0", "17") == 0.0
    assert rig.value("compute_processes", "0") == 1.0  # the job is still there
    rig.gpus.set_activity(None, Activity.IDLE)
    await rig.run(2)
    assert rig.value("compute_processes", "0") == 0.0
    assert rig.value("clock_event_active", "0", "gpu_idle") == 1.0


async def test_nvlink_drop_and_restore(sim: Callable[..., SimRig]) -> None:
    rig = sim("H200", 2)
    await rig.collector.start()
    rig.gpus.set_activity(None, Activity.BUSY)
    await rig.run(2)
    rig.gpus.drop_nvlink(1, 7)
    await rig.run(1)
    assert rig.value("nvlink_up", "1", "7") == 0.0
    assert rig.value("nvlink_up", "1", "6") == 1.0
    # Error counters (store totals) moved on the dropped link only.
    assert rig.value("nvlink_errors", "1", "7", "recovery") == 1.0
    assert rig.value("nvlink_errors", "1", "7", "crc") == 250.0
    assert rig.value("nvlink_errors", "1", "6", "crc") == 0.0
    assert rig.rate("nvlink_errors", "1", "7", "crc") > 0
    await rig.run(3)  # past the tracker's hold of a slow-refreshing counter
    assert rig.rate("nvlink_transmit_bytes", "1", "7") == 0.0
    assert rig.rate("nvlink_transmit_bytes", "1", "6") > 1e10
    rig.gpus.restore_nvlink(1, 7)
    rig.gpus.add_link_errors(1, 7, "replay", 5)
    await rig.run(1)
    assert rig.value("nvlink_up", "1", "7") == 1.0
    assert rig.value("nvlink_errors", "1", "7", "replay") == 40.0 + 5.0


async def test_xid_and_lost_gpu(sim: Callable[..., SimRig]) -> None:
    rig = sim("B200", 4)
    await rig.collector.start()
    await rig.run(1)
    rig.gpus.inject_xid(2, 74)
    for _ in range(100):  # bounded: the event thread picks it up
        if rig.collector.recent_events():
            break
        await asyncio.sleep(0.01)
        await rig.run(1)
    await rig.run(1)
    assert rig.value("xid_errors", "2", "74") == 1.0
    rig.gpus.lose_gpu(3)
    await rig.run(1)
    assert rig.value("healthy", "3") == 0.0
    assert rig.value("healthy", "2") == 1.0
    assert rig.collector.clique() == "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"


async def test_blocked_calls_go_stale_then_recover(sim: Callable[..., SimRig]) -> None:
    rig = sim("A100", 2, call_timeout=0.1)
    await rig.collector.start()
    await rig.run(1)
    rig.gpus.block_calls(0)
    t0 = time.monotonic()
    await rig.run(2)
    assert time.monotonic() - t0 < 5.0
    assert rig.value("sample_stale", "0") == 1.0
    assert rig.value("sample_stale", "1") == 0.0
    rig.gpus.unblock_calls(0)
    for _ in range(100):
        if not rig.collector.facade.busy(0):
            break
        await asyncio.sleep(0.01)
    await rig.run(1)
    assert rig.value("sample_stale", "0") == 0.0


async def test_profiles(sim: Callable[..., SimRig]) -> None:
    a100 = sim("A100", 1)
    b200 = sim("b200", 1)
    for r in (a100, b200):
        await r.collector.start()
        r.gpus.set_activity(0, Activity.BUSY, pids=[7, 8])
        await r.run(2)
    assert a100.store.family("fabricwatch_gpu_sm_active_ratio") == ()
    assert len(a100.store.family("fabricwatch_gpu_nvlink_up")) == 12
    assert a100.value("compute_processes", "0") == 2.0
    assert len(b200.store.family("fabricwatch_gpu_nvlink_up")) == 18
    assert b200.rate("nvlink_receive_bytes", "0", "0") == pytest.approx(0.55 * 50e9)
    assert b200.store.get("fabricwatch_gpu_nvlink_errors", ("0", "0", "recovery_failed"))
    assert b200.store.get("fabricwatch_gpu_nvlink_errors", ("0", "0", "replay")) is None
    with pytest.raises(ValueError, match="does not report"):
        b200.gpus.add_link_errors(0, 0, "replay", 1)


async def test_simulated_absent(tmp_path: Path) -> None:
    clock = ScenarioClock()
    gpus = SimulatedGPUs("H100", 1, clock, init_error="no driver (simulated)")
    c = GpuCollector(GpuSettings(), CollectorEnv(proc_root=tmp_path, monotonic=clock), gpus)
    await c.start()
    with pytest.raises(CollectorError, match="simulated"):
        await c.collect()
    await c.close()
    with pytest.raises(NvmlUnavailable):
        gpus.init()


def test_bad_arguments() -> None:
    clock = ScenarioClock()
    with pytest.raises(ValueError, match="unknown GPU model"):
        SimulatedGPUs("V100", 1, clock)
    with pytest.raises(ValueError, match="count"):
        SimulatedGPUs("H100", 0, clock)
    g = SimulatedGPUs("H100", 2, clock)
    with pytest.raises(IndexError):
        g.drop_nvlink(2, 0)
    with pytest.raises(IndexError):
        g.drop_nvlink(0, 18)
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)
