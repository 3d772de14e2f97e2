"""Recordings of real device layouts (tests/switch/recgen.py) served by snmpsim, and SNMPv3
against net-snmp's snmpd: speed fallbacks, table presence, profile match by sysObjectID,
multicast queues, and a collector that is down when every switch fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings
from fabricwatch.outputs.exposition import ReloadStatus, SelfExporter
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import Supervisor
from tests.conftest import free_port

from .conftest import Harness, Snmpd, Snmpsim, community_file
from .test_v3 import _v3_target

pytestmark = pytest.mark.integration

PAUSE_BITS = 65535 * 512


def _target(tmp_path: Path, snmpsim: Snmpsim, stem: str, **kw: Any) -> TargetSettings:
    return TargetSettings(
        name=stem,
        host="127.0.0.1",
        port=snmpsim.port,
        community_file=community_file(tmp_path, stem),
        timeout=2.0,
        retries=1,
        mode="switch",
        **kw,
    )


async def _polls(h: Harness, n: int = 3) -> list[MutableMapping[str, Any]]:
    with structlog.testing.capture_logs() as logs:
        for k in range(n):
            await h.poll()
            if k < n - 1:
                await asyncio.sleep(1.05)  # snmpsim's numeric variation follows wall time
    return logs


def _present(h: Harness, switch: str) -> dict[str, float]:
    return {
        s.labels[1]: s.value
        for s in h.store.family("fabricwatch_switch_table_present")
        if s.labels[0] == switch
    }


def _one(logs: list[MutableMapping[str, Any]], event: str, switch: str) -> MutableMapping[str, Any]:
    found = [e for e in logs if e["event"] == event and e.get("switch") == switch]
    assert len(found) == 1, (event, found)
    return found[0]


async def test_arista_7280r_without_ifxtable(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    stem = "arista-7280r-sim"
    h = make_harness([_target(tmp_path, snmpsim, stem)])
    await h.collector.start()
    logs = await _polls(h)
    st = h.collector.target_state(stem)
    assert st.up, st.last_error
    assert st.profile is not None and st.profile.name == "arista"
    # No ifXTable: names from ifDescr; breakout lanes 1002-1004 (16 rows each) are orphans.
    assert set(st.ports.values()) == {"Ethernet1/1", "Ethernet2/1", "Ethernet53", "Management1"}
    assert h.value("fabricwatch_switch_orphan_rows", stem) == 48.0
    assert _present(h, stem) == {"pfc": 1.0, "queue": 1.0, "ecn": 0.0, "lldp": 1.0, "ifxtable": 0.0}
    tables = _one(logs, "switch_tables", stem)
    assert tables["absent"] == ["ecn", "ifxtable"]
    # One line naming the missing columns and the ports whose speed is unknown.
    missing = _one(logs, "switch_columns_missing", stem)
    assert {"ifHighSpeed", "ifHCInOctets", "ifHCOutOctets"} <= set(missing["missing"])
    assert "ifSpeed" not in missing["missing"]
    assert missing["ports_without_speed"] == ["Ethernet1/1", "Ethernet2/1"]
    # ifSpeed 1e9 (below the 2^32-1 cap) gives Ethernet53 a speed: 10 frames/s -> 33.6 %.
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet53") == 1e9 / 8
    r53 = h.value("fabricwatch_switch_pfc_pause_ratio", stem, "Ethernet53", "3", "rx")
    assert r53 is not None and r53 == pytest.approx(10 * PAUSE_BITS / 1e9, rel=0.15)
    # ifSpeed pinned at 4294967295: no speed is guessed, frames are still there.
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet1/1") is None
    assert h.value("fabricwatch_switch_pfc_pause_ratio", stem, "Ethernet1/1", "3", "rx") is None
    assert h.rate("fabricwatch_switch_pfc_pause_frames", stem, "Ethernet1/1", "3", "rx")
    # Multicast queues 8-15 are labelled mc0-mc7; unicast queues keep their number.
    queues = {
        s.labels[2]
        for s in h.store.family("fabricwatch_switch_queue_dropped_packets")
        if s.labels[1] == "Ethernet1/1"
    }
    assert queues == {str(q) for q in range(8)} | {f"mc{q}" for q in range(8)}
    mc0 = h.rate("fabricwatch_switch_queue_dropped_packets", stem, "Ethernet1/1", "mc0")
    assert mc0 is not None and 2 < mc0 < 6
    assert h.rate("fabricwatch_switch_queue_dropped_packets", stem, "Ethernet1/1", "0") == 0.0


async def test_arista_7280r_configured_speed_gives_the_storm(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    stem = "arista-7280r-sim"
    speeds = {"Ethernet1/1": 100.0, "2001": 100.0}  # by ifDescr and by ifIndex
    h = make_harness([_target(tmp_path, snmpsim, stem, port_speeds=speeds)])
    await h.collector.start()
    logs = await _polls(h)
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet1/1") == 100e9 / 8
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet2/1") == 100e9 / 8
    ratio = h.value("fabricwatch_switch_pfc_pause_ratio", stem, "Ethernet1/1", "3", "rx")
    assert ratio is not None and ratio > 0.9  # 2980 frames/s hold 100G paused
    assert h.value("fabricwatch_switch_pfc_pause_ratio", stem, "Ethernet2/1", "3", "rx") == 0.0
    missing = _one(logs, "switch_columns_missing", stem)
    assert missing["ports_without_speed"] == []


async def test_sonic_without_pfc_tables_says_so(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    stem = "sonic-nopfc-sim"
    h = make_harness([_target(tmp_path, snmpsim, stem)])
    await h.collector.start()
    logs = await _polls(h, 1)
    st = h.collector.target_state(stem)
    assert st.profile is not None and st.profile.name == "sonic"
    assert _present(h, stem) == {"pfc": 0.0, "queue": 1.0, "ecn": 0.0, "lldp": 1.0, "ifxtable": 1.0}
    assert _one(logs, "switch_tables", stem)["absent"] == ["pfc", "ecn"]
    assert not h.store.family("fabricwatch_switch_pfc_pause_frames")
    # Every IF-MIB column is there: no missing-columns line.
    assert not [e for e in logs if e["event"] == "switch_columns_missing"]


async def test_cumulus_matched_by_sysobjectid(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    stem = "cumulus-oid-sim"
    h = make_harness([_target(tmp_path, snmpsim, stem)])
    await h.collector.start()
    logs = await _polls(h, 2)
    st = h.collector.target_state(stem)
    assert st.profile is not None and st.profile.name == "cumulus"  # sysDescr is "Linux ..."
    assert _present(h, stem) == {"pfc": 1.0, "queue": 0.0, "ecn": 0.0, "lldp": 0.0, "ifxtable": 1.0}
    assert _one(logs, "switch_tables", stem)["present"] == ["pfc", "ifxtable"]
    rx = h.rate("fabricwatch_switch_pfc_pause_frames", stem, "swp1", "3", "rx")
    assert rx is not None and 1 < rx < 5


async def test_full_storm_on_25g_and_100g_reads_paused(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    """745 frames/s at 25G and 2980/s at 100G both hold a priority paused ~100 %.

    With one 200G constant the 25G port would read 12.5 % and the 100G one 50 %.
    """
    stem = "storm-25g-100g-sim"
    h = make_harness([_target(tmp_path, snmpsim, stem)])
    await h.collector.start()
    logs = await _polls(h, 3)
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet0") == 25e9 / 8
    assert h.value("fabricwatch_switch_port_speed_bytes", stem, "Ethernet4") == 100e9 / 8
    for port in ("Ethernet0", "Ethernet4"):
        ratio = h.value("fabricwatch_switch_pfc_pause_ratio", stem, port, "3", "rx")
        assert ratio is not None and ratio > 0.9, (port, ratio)
        assert h.value("fabricwatch_switch_pfc_pause_ratio", stem, port, "2", "rx") == 0.0
    assert _present(h, stem) == {"pfc": 1.0, "queue": 0.0, "ecn": 0.0, "lldp": 0.0, "ifxtable": 1.0}
    _one(logs, "switch_tables", stem)


def _supervised(targets: list[TargetSettings], tmp_path: Path) -> tuple[Supervisor, SnapshotStore]:
    st = SwitchSettings(targets=targets, interval=0.2, timeout=10.0, backoff_initial=0.1)
    env = CollectorEnv(node="gpu-node-1", sys_root=tmp_path / "no-sys", state_dir=tmp_path)
    c = SwitchCollector(st, env)
    store = SnapshotStore()
    store.register("switch", c.metrics())
    sup = Supervisor(store)
    sup.add(c, st)
    return sup, store


def _collector_up(sup: Supervisor) -> str:
    reg = CollectorRegistry()
    reg.register(SelfExporter(lambda: sup.states, ReloadStatus()))
    text = generate_latest(reg).decode()
    return next(line for line in text.splitlines() if line.startswith("fabricwatch_collector_up"))


async def _until_attempted(sup: Supervisor) -> None:
    for _ in range(200):
        if sup.ready():
            return
        await asyncio.sleep(0.05)
    pytest.fail("the switch collector made no attempt within 10 s")


async def test_every_target_failing_is_collector_down(snmpd: Snmpd, tmp_path: Path) -> None:
    """Wrong SNMPv3 passphrase on real snmpd + an unreachable loopback port: collector_up 0."""
    wrong = _v3_target(tmp_path, snmpd, "fwsha", auth_key="not-the-passphrase-1")
    dead = TargetSettings(
        name="unreachable",
        host="127.0.0.1",
        port=free_port(kind=2),  # nothing listens: ICMP port unreachable, then timeout
        timeout=0.3,
        retries=0,
        mode="switch",
    )
    sup, store = _supervised([wrong, dead], tmp_path)
    await sup.start()
    try:
        await _until_attempted(sup)
        (state,) = sup.states
        assert not state.up
        assert "all 2 switch target(s) failing" in state.last_error
        assert _collector_up(sup) == 'fabricwatch_collector_up{collector="switch"} 0.0'
        # The per-target health still reached the store: each target reads down, with why.
        for name in ("v3-fwsha", "unreachable"):
            s = store.get("fabricwatch_switch_target_up", (name,))
            assert s is not None and s.value == 0.0, name
        auth = store.get("fabricwatch_switch_poll_errors", ("v3-fwsha", "auth"))
        assert auth is not None and auth.value >= 1
        timeouts = store.get("fabricwatch_switch_poll_errors", ("unreachable", "timeout"))
        assert timeouts is not None and timeouts.value >= 1
    finally:
        await sup.stop()


async def test_one_good_target_keeps_the_collector_up(snmpd: Snmpd, tmp_path: Path) -> None:
    good = _v3_target(tmp_path, snmpd, "fwsha256")
    dead = TargetSettings(
        name="unreachable", host="127.0.0.1", port=free_port(kind=2), timeout=0.3, retries=0
    )
    sup, store = _supervised([good, dead], tmp_path)
    await sup.start()
    try:
        await _until_attempted(sup)
        assert sup.states[0].up
        assert _collector_up(sup) == 'fabricwatch_collector_up{collector="switch"} 1.0'
        s = store.get("fabricwatch_switch_target_up", ("unreachable",))
        assert s is not None and s.value == 0.0
    finally:
        await sup.stop()


def test_dashboard_shows_failing_targets() -> None:
    from dashboards import switch

    doc = switch.render()
    assert "SNMP targets up (failing targets)" in doc
    assert "fabricwatch_switch_target_up" in doc
    assert "fabricwatch_switch_table_present" in doc
