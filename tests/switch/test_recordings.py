"""Every recording, served by snmpsim on 127.0.0.1, reached by the real collector over UDP.

The expectations come from reading the .snmprec text directly (an oracle
independent of the SNMP path) plus the vendor each file must be detected as.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from fabricwatch.collectors.switch._client import NativeV2cSession, PysnmpSession, walk
from fabricwatch.collectors.switch._lldp import LOC_OIDS, REM_OIDS, parse_remote
from fabricwatch.collectors.switch._settings import TargetSettings

from .conftest import SWITCH_DATA, Harness, Snmpsim, community_file

pytestmark = pytest.mark.integration

EXPECTED_PROFILE = {
    "arista-7050tx128-eos415": "arista",
    "arista-7150s52-eos420-ieeepfc": "arista",
    "cisco-n5000-nxos": "nxos",
    "cumulus421-mellanox": "cumulus",
    "dell-os9-z9100on": "dell-os9",
    "juniper-mx960-junos161-jnxcos": "junos",
    "junos-qfx5100-141x53": "junos",
    "junos-qfx5130-32cd-evo222": "junos",
    "nxos-n3k-3064pq-703i78": "nxos",
    "nxos-n9k-c93180yc-fx3-105": "nxos",
    "sonic-sim64": "sonic",
    "onyx-sim": "onyx",
    "arista-pfc-sim": "arista",
    "cumulus-counters-sim": "cumulus",
    "dell-os9-fpstats-sim": "dell-os9",
    "nxos-pfc-sim": "nxos",
    "arista-7280r-sim": "arista",
    "sonic-nopfc-sim": "sonic",
    "cumulus-oid-sim": "cumulus",
    "storm-25g-100g-sim": "sonic",
}
MUST_HAVE = {
    "arista-7150s52-eos420-ieeepfc": {("pfc_total_frames", "rx"), ("link_pause_frames", "tx")},
    "juniper-mx960-junos161-jnxcos": {("queue_drops", "")},
    "sonic-sim64": {("pfc_frames", "rx"), ("pfc_frames", "tx"), ("queue_drops", "")},
    "onyx-sim": {("pfc_duration", "rx"), ("pfc_frames", "tx"), ("queue_drops", "")},
    "arista-pfc-sim": {("pfc_frames", "rx"), ("queue_drops", "")},
    "cumulus-counters-sim": {("pfc_frames", "rx"), ("queue_drops", "")},
    "dell-os9-fpstats-sim": {("pfc_frames", "rx")},
    "nxos-pfc-sim": {("pfc_frames", "rx"), ("pfc_duration", "rx")},
}


def _file(shared_data: Path, stem: str) -> Path:
    p = shared_data / "snmprec" / f"{stem}.snmprec"
    return p if p.exists() else SWITCH_DATA / f"{stem}.snmprec"


def _oids(path: Path) -> list[tuple[int, ...]]:
    return [
        tuple(int(x) for x in line.split("|", 1)[0].split("."))
        for line in path.read_text(encoding="latin-1").splitlines()
        if line.strip()
    ]


def _if_indexes(oids: list[tuple[int, ...]]) -> set[int]:
    cols = ((1, 3, 6, 1, 2, 1, 2, 2, 1, 2), (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1))
    return {o[-1] for o in oids for c in cols if o[: len(c)] == c and len(o) == len(c) + 1}


def _lldp_rows(oids: list[tuple[int, ...]]) -> set[tuple[int, ...]]:
    rem = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)
    return {o[11:] for o in oids if o[:10] == rem and len(o) == 14}


def _target(tmp_path: Path, snmpsim: Snmpsim, stem: str, **kw: object) -> TargetSettings:
    return TargetSettings(
        name=stem,
        host="127.0.0.1",
        port=snmpsim.port,
        community_file=community_file(tmp_path, stem),
        timeout=2.0,
        retries=1,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("stem", sorted(EXPECTED_PROFILE))
async def test_recording_vendor_tables_ports_lldp(
    stem: str,
    snmpsim: Snmpsim,
    shared_data: Path,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    oids = _oids(_file(shared_data, stem))
    h = make_harness([_target(tmp_path, snmpsim, stem, mode="switch")])
    await h.collector.start()
    with structlog.testing.capture_logs() as logs:
        await h.poll()
    st = h.collector.target_state(stem)
    assert st.up, st.last_error
    assert st.profile is not None and st.profile.name == EXPECTED_PROFILE[stem]
    assert set(st.ports) == _if_indexes(oids)
    # Tables the collector found present == tables whose column is in the file.
    want = {
        t.key()
        for t in st.profile.tables
        if any(o[: len(t.probe_oid())] == t.probe_oid() for o in oids)
    }
    assert {t.key() for t in st.tables} == want
    assert MUST_HAVE.get(stem, set()) <= want

    # Presence gauges per table, against the file, and one log line saying so.
    def under(prefix: tuple[int, ...]) -> bool:
        return any(o[: len(prefix)] == prefix and len(o) > len(prefix) for o in oids)

    signals = {k[0] for k in want}
    ecn_col = (1, 3, 6, 1, 4, 1, 9, 9, 166, 1, 20, 1, 1, 21)
    expected = {
        "pfc": bool(signals & {"pfc_frames", "pfc_duration", "pfc_total_frames"}),
        "queue": "queue_drops" in signals,
        "ecn": st.profile.cbqos_ecn and under(ecn_col),
        "lldp": under((1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)),
        "ifxtable": under((1, 3, 6, 1, 2, 1, 31, 1, 1, 1)),
    }
    present = {
        s.labels[1]: s.value == 1.0 for s in h.store.family("fabricwatch_switch_table_present")
    }
    assert present == expected
    (line,) = [e for e in logs if e["event"] == "switch_tables"]
    assert line["present"] == [k for k, v in expected.items() if v]
    up = h.store.family("fabricwatch_switch_port_up")
    assert len(up) == len(
        {
            i
            for i in st.ports
            if any(o[:10] == (1, 3, 6, 1, 2, 1, 2, 2, 1, 8) and o[-1] == i for o in oids)
        }
    )
    # LLDP: every remote row parsed with its full 3-part index (time marks kept).
    session = NativeV2cSession("127.0.0.1", snmpsim.port, stem, timeout=2.0)
    try:
        cols = await walk(session, [*LOC_OIDS, *REM_OIDS])
    finally:
        await session.close()
    parsed = {(n.time_mark, n.local_port, n.index) for n in parse_remote(cols)}
    assert parsed == _lldp_rows(oids)


NODE_CASES = {
    # file: (node name as LLDP shows it, ifName of the expected uplink)
    "junos-qfx5100-141x53": ("devicea", "xe-0/0/0"),  # lldpRemTimeMark 35684499
    "dell-os9-z9100on": ("swrr309a", "hundredGigE 1/32"),
    "cisco-n5000-nxos": ("H3C-1", "Ethernet1/1"),
    "sonic-sim64": ("gpu-node-7", "Ethernet0"),
    "onyx-sim": ("gpu-node-3", "Eth1/2"),  # LLDP port numbers 1..4 != ifIndex 151..154
    "arista-pfc-sim": ("gpu-node-5", "Ethernet2"),  # FQDN in LLDP, short name here
}


@pytest.mark.parametrize("stem", sorted(NODE_CASES))
async def test_node_mode_finds_uplinks_in_recordings(
    stem: str, snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    node, port = NODE_CASES[stem]
    h = make_harness([_target(tmp_path, snmpsim, stem)], node=node)
    await h.collector.start()
    await h.poll()
    st = h.collector.target_state(stem)
    assert st.up, st.last_error
    assert port in st.ports.values()
    if stem == "sonic-sim64":
        assert sorted(st.ports.values()) == ["Ethernet0", "Ethernet4"]


async def test_counters_move_and_rates_come_out(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    h = make_harness(
        [
            _target(tmp_path, snmpsim, "nxos-pfc-sim", mode="switch"),
            _target(tmp_path, snmpsim, "onyx-sim", mode="switch"),
        ]
    )
    await h.collector.start()
    for _ in range(3):
        await h.poll()
        await asyncio.sleep(1.05)  # snmpsim's numeric variation follows wall time
    await h.poll()
    rx = h.rate("fabricwatch_switch_pfc_pause_frames", "nxos-pfc-sim", "Ethernet1/1", "3", "rx")
    assert rx is not None and 60 < rx < 140  # recorded at 100/s
    # cpfcIfPriorityWaitRx grows 250000 us/s: 25 % paused, from the duration counter.
    ratio = h.value("fabricwatch_switch_pfc_pause_ratio", "nxos-pfc-sim", "Ethernet1/1", "3", "rx")
    assert ratio is not None and 0.15 < ratio < 0.35
    # Onyx: 500 ms/s of RX pause duration on Eth1/2 priority 3 -> ~0.5.
    onyx = h.value("fabricwatch_switch_pfc_pause_ratio", "onyx-sim", "Eth1/2", "3", "rx")
    assert onyx is not None and 0.35 < onyx < 0.65
    assert h.value("fabricwatch_switch_pfc_pause_ratio", "onyx-sim", "Eth1/1", "3", "rx") == 0.0


async def test_breakout_orphans_and_holes(
    snmpsim: Snmpsim, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    h = make_harness([_target(tmp_path, snmpsim, "arista-pfc-sim", mode="switch")])
    await h.collector.start()
    await h.poll()
    await asyncio.sleep(1.05)
    await h.poll()
    # Ifindex 49001 (unused breakout lane) has 16 PFC rows but no ifTable row.
    assert h.value("fabricwatch_switch_orphan_rows", "arista-pfc-sim") == 16.0
    frames = h.store.family("fabricwatch_switch_pfc_pause_frames")
    assert {s.labels[1] for s in frames} == {"Ethernet1", "Ethernet2", "Ethernet3"}
    # Ethernet3 has no ifHighSpeed: frames still exported, ratio not guessed.
    assert (
        h.rate("fabricwatch_switch_pfc_pause_frames", "arista-pfc-sim", "Ethernet3", "3", "rx")
        is not None
    )
    assert (
        h.value("fabricwatch_switch_pfc_pause_ratio", "arista-pfc-sim", "Ethernet3", "3", "rx")
        is None
    )
    assert (
        h.value("fabricwatch_switch_pfc_pause_ratio", "arista-pfc-sim", "Ethernet1", "3", "rx")
        is not None
    )
    assert h.value("fabricwatch_switch_target_up", "arista-pfc-sim") == 1.0


async def test_pysnmp_and_native_clients_agree(snmpsim: Snmpsim) -> None:
    cols = [
        (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1),
        (1, 3, 6, 1, 2, 1, 2, 2, 1, 8),
        (1, 3, 6, 1, 2, 1, 2, 2, 1, 2),
    ]
    stem = "cisco-n5000-nxos"
    a = NativeV2cSession("127.0.0.1", snmpsim.port, stem, timeout=2.0)
    b = PysnmpSession("127.0.0.1", snmpsim.port, community=stem, timeout=2.0)
    try:
        ra = await walk(a, cols, max_repetitions=25)
        rb = await walk(b, cols, max_repetitions=25)
        assert ra == rb and all(len(v) == 61 for v in ra.values())
        got_a = await a.get([(1, 3, 6, 1, 2, 1, 1, 2, 0), (1, 3, 6, 1, 2, 1, 1, 99, 0)])
        got_b = await b.get([(1, 3, 6, 1, 2, 1, 1, 2, 0), (1, 3, 6, 1, 2, 1, 1, 99, 0)])
        assert got_a == got_b
        assert got_a[0][1] == (1, 3, 6, 1, 4, 1, 9, 12, 3, 1, 3, 1084)
    finally:
        await a.close()
        await b.close()
