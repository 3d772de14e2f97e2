"""Switch mode at the design's scale on the embedded defaults: no series silently lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings
from fabricwatch.config import StoreSettings
from fabricwatch.outputs.exposition import ReloadStatus, build_registry, generate_text
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import Supervisor
from fabricwatch.testing.sim_snmp import SimAgent, demo_switch
from tests.switch.conftest import ManualClock, community_file

pytestmark = pytest.mark.timeout(300)


async def test_two_512_port_switches_fit_the_default_series_limit(tmp_path: Path) -> None:
    """Two 512-port switches polled every 10 s in switch mode make more series than one
    collector's 50 000 of before: on the defaults (limit per switch, collection
    timeout from the interval) every series of both is stored, none dropped."""
    clock = ManualClock()
    agents = []
    targets = []
    for n in range(2):
        sw = demo_switch(512, clock=clock)
        for p in sw.ports:
            sw.pfc_storm(p.if_index, 3, "rx", 0.001)
        agents.append(await SimAgent(sw, community="fw-sim").start())
        targets.append(
            TargetSettings(
                name=f"leaf{n}",
                host="127.0.0.1",
                port=agents[-1].port,
                community_file=community_file(tmp_path, "fw-sim"),
                timeout=5.0,
            )
        )
    settings = SwitchSettings(targets=targets, mode="switch", interval=10.0)
    env = CollectorEnv(
        node="poller", sys_root=tmp_path / "no-sys", state_dir=tmp_path, monotonic=clock
    )
    collector = SwitchCollector(settings, env)
    store = SnapshotStore()
    sup = Supervisor(store, max_series=StoreSettings().max_series_per_collector)
    sup.add(collector, settings)
    state = sup.states[0]
    try:
        await collector.start()
        for _ in range(2):  # discovery and the first counters, then their rates
            t0 = time.monotonic()
            await sup._collect_once(collector, settings, state)
            assert state.up, (state.last_error, time.monotonic() - t0)
            clock.advance(10.0)
    finally:
        await collector.close()
        for a in agents:
            a.close()
    assert state.failures == {} and state.series_dropped == 0
    by_switch = [sum(s.labels[0] == t.name for s in store) for t in targets]
    assert by_switch[0] == by_switch[1] > 25_000  # ~52 a port, each switch whole
    assert len(store) > 50_000  # the one limit a collector had before
    # /metrics of it all: prometheus_client's text, byte for byte, with one labels
    # text for a port's series of every family with the same labels.
    reg = build_registry(store, lambda: sup.states, ReloadStatus(), process_metrics=False)
    assert generate_text(reg) == generate_latest(reg)
    port = ("leaf1", "Ethernet0")
    rx, tx = (
        store.get(f"fabricwatch_switch_port_{d}_bytes", port) for d in ("receive", "transmit")
    )
    assert rx is not None and tx is not None
    assert rx.text_labels is not None and rx.text_labels is tx.text_labels
