"""The collector against the simulated switch agent (real UDP on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from fabricwatch.collectors.switch._settings import TargetSettings
from fabricwatch.testing.sim_snmp import SimAgent, SimPort, SimSwitch

from .conftest import Harness, ManualClock, community_file

RATIO = "fabricwatch_switch_pfc_pause_ratio"
FRAMES = "fabricwatch_switch_pfc_pause_frames"


def _target(tmp_path: Path, agent: SimAgent, **kw: object) -> TargetSettings:
    return TargetSettings(
        name="leaf1",
        host="127.0.0.1",
        port=agent.port,
        community_file=community_file(tmp_path, "fw-sim"),
        timeout=0.5,
        retries=0,
        **kw,  # type: ignore[arg-type]
    )


async def _polls(h: Harness, clock: ManualClock, n: int, step: float = 1.0) -> None:
    for _ in range(n):
        await h.poll()
        clock.advance(step)


async def test_node_mode_polls_only_lldp_uplinks(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    _, agent = sim
    h = make_harness([_target(tmp_path, agent)], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 2)
    st = h.collector.target_state("leaf1")
    assert st.profile is not None and st.profile.name == "sonic"
    assert sorted(st.ports.values()) == ["Ethernet0", "Ethernet4"]
    assert h.value("fabricwatch_switch_uplink_info", "leaf1", "Ethernet0", "eth0") == 1.0
    assert h.value("fabricwatch_switch_port_up", "leaf1", "Ethernet8") is None
    assert h.value("fabricwatch_switch_target_up", "leaf1") == 1.0
    # Traffic of 2.5 GB/s on a 200G port: 10 % utilisation, exact rate in the store.
    assert h.rate("fabricwatch_switch_port_receive_bytes", "leaf1", "Ethernet0") == pytest.approx(
        2.5e9, rel=1e-6
    )
    util = h.value("fabricwatch_switch_port_utilization_ratio", "leaf1", "Ethernet0", "rx")
    assert util == pytest.approx(0.1, rel=1e-6)
    # Queue rows learnt at discovery (type-5 rows only): 8 queues per uplink.
    queues = {s.labels[2] for s in h.store.family("fabricwatch_switch_queue_dropped_packets")}
    assert queues == {str(q) for q in range(8)}


async def test_priority3_storm_pauses_only_that_port(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    h = make_harness([_target(tmp_path, agent)], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 2)
    rate = sw.pfc_storm("Ethernet0", priority=3, direction="rx")
    assert rate == pytest.approx(200e9 / (65535 * 512))
    await _polls(h, clock, 3)
    ratio = h.value(RATIO, "leaf1", "Ethernet0", "3", "rx")
    assert ratio is not None and ratio > 0.9
    assert h.rate(FRAMES, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(rate, rel=1e-3)
    for s in h.store.family(RATIO):
        if s.labels != ("leaf1", "Ethernet0", "3", "rx"):
            assert s.value == 0.0, s.labels
    # Half the continuous rate reads as ~50 % paused.
    sw.pfc_storm("Ethernet0", priority=3, direction="rx", fraction=0.5)
    await _polls(h, clock, 2)
    half = h.value(RATIO, "leaf1", "Ethernet0", "3", "rx")
    assert half == pytest.approx(0.5, abs=0.01)


async def test_agent_restart_gives_no_spike(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    sw.set_rate("Ethernet0", "pfc_rx3", 100.0)
    h = make_harness([_target(tmp_path, agent)], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 3)
    assert h.rate(FRAMES, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(100.0)
    clock.advance(30)
    sw.restart()  # sysUpTime and all counters back to 0, then grow again
    clock.advance(1)
    with structlog.testing.capture_logs() as logs:
        await h.poll()
    assert any(e["event"] == "switch_restarted" for e in logs)
    assert h.collector.target_state("leaf1").boot == 1
    rate = h.rate(FRAMES, "leaf1", "Ethernet0", "3", "rx")
    assert rate is None  # a reset re-baselines: no delta, no spike
    ratio = h.value(RATIO, "leaf1", "Ethernet0", "3", "rx")
    assert ratio is not None and ratio < 0.02
    clock.advance(1)
    await h.poll()
    assert h.rate(FRAMES, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(100.0)


async def test_counter_discontinuity_time_rebaselines(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    sw.set_rate("Ethernet0", "rx_bytes", 1e9)
    h = make_harness([_target(tmp_path, agent)], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 2)
    # Counters cleared on one port (no reboot): ifCounterDiscontinuityTime moves.
    sw.clear_port_counters("Ethernet0")
    clock.advance(1)
    await h.poll()
    assert h.rate("fabricwatch_switch_port_receive_bytes", "leaf1", "Ethernet0") is None
    assert h.collector.target_state("leaf1").boot == 0
    clock.advance(1)
    await h.poll()
    assert h.rate("fabricwatch_switch_port_receive_bytes", "leaf1", "Ethernet0") == pytest.approx(
        1e9
    )


async def test_oper_status_and_flaps(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    h = make_harness([_target(tmp_path, agent)], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 1)
    assert h.value("fabricwatch_switch_port_up", "leaf1", "Ethernet4") == 1.0
    for up in (False, True, False):
        sw.set_up("Ethernet4", up)
        await _polls(h, clock, 1)
    assert h.value("fabricwatch_switch_port_up", "leaf1", "Ethernet4") == 0.0
    assert h.value("fabricwatch_switch_port_flaps", "leaf1", "Ethernet4") == 3.0
    assert h.value("fabricwatch_switch_port_flaps", "leaf1", "Ethernet0") == 0.0


async def test_lldp_port_numbers_differ_from_ifindex(
    clock: ManualClock, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    # Dell OS10-style numbering (lldpLocPortNum != ifIndex), a non-zero time
    # mark, and a neighbour known only by the MAC of one of this node's NICs.
    ports = [
        SimPort(1001, "ethernet1/1/1", neighbour_name="someone-else"),
        SimPort(1002, "ethernet1/1/2", neighbour_mac="0c:42:a1:00:00:07"),
        SimPort(1003, "ethernet1/1/3"),
    ]
    sw = SimSwitch(ports, clock=clock, lldp_time_mark=987654, lldp_port_offset=-1000)
    agent = await SimAgent(sw, community="fw-sim").start()
    try:
        sysfs = tmp_path / "sys"
        for nic, mac in (("lo", "00:00:00:00:00:00"), ("ens1f0", "0C:42:A1:00:00:07")):
            (sysfs / "class" / "net" / nic).mkdir(parents=True)
            (sysfs / "class" / "net" / nic / "address").write_text(mac + "\n")
        h = make_harness(
            [_target(tmp_path, agent)], clock=clock, node="not-in-lldp", sys_root=sysfs
        )
        await h.collector.start()
        await h.poll()
        st = h.collector.target_state("leaf1")
        assert st.ports == {1002: "ethernet1/1/2"}
        # The port numbers 1..3 are not ifIndexes: without the loc-port mapping
        # nothing (or the wrong port) would be found.
        assert 2 not in st.ports
    finally:
        agent.close()


async def test_static_uplinks_override_discovery(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    _, agent = sim
    h = make_harness([_target(tmp_path, agent, uplinks=["Ethernet12", "9", "Nope0"])], clock=clock)
    await h.collector.start()
    with structlog.testing.capture_logs() as logs:
        await h.poll()
    st = h.collector.target_state("leaf1")
    assert sorted(st.ports) == [9, 13]
    assert any(e["event"] == "switch_static_uplink_unknown" and e["port"] == "Nope0" for e in logs)
    assert h.value("fabricwatch_switch_uplink_info", "leaf1", "Ethernet12", "static") == 1.0


async def test_switch_mode_polls_every_port_and_discovery_logs_changes(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
) -> None:
    sw, agent = sim
    h = make_harness([_target(tmp_path, agent, mode="switch")], clock=clock)
    await h.collector.start()
    await _polls(h, clock, 2)
    assert len(h.collector.target_state("leaf1").ports) == 4
    assert len(h.store.family("fabricwatch_switch_port_up")) == 4
    assert len(h.store.family(FRAMES)) == 4 * 8 * 2
    st = h.collector.target_state("leaf1")
    # sysUpTime, then per port 9 IF-MIB columns, 16 PFC rows and 8 queue drop rows
    # (SONiC's per-queue sent rows, type 1, are not asked for): ports in ifIndex order.
    assert len(st.get_oids) == 1 + 4 * (9 + 16 + 8)
    csq = (1, 3, 6, 1, 4, 1, 9, 9, 580, 1, 5, 5, 1, 4)
    assert all(o[-1] == 5 for o in st.get_oids if o[: len(csq)] == csq)
    assert [o[-1] for o in st.get_oids[1:10]] == [st.get_oids[1][-1]] * 9
    assert st.layout is not None and len(st.layout.ports) == 4
    requests = agent.requests
    await _polls(h, clock, 3)
    # Each poll is GETs alone, no walk: GETs grew from 40 varbinds while the agent
    # answered them, to one GET of 133 a poll.
    assert agent.requests - requests == 3 * 1
    # Node mode: a neighbour moves; the periodic rediscovery notices and logs it.
    h2 = make_harness([_target(tmp_path, agent)], clock=clock, discovery_interval=5.0)
    await h2.collector.start()
    await h2.poll()
    sw.port("Ethernet8").neighbour_name = "gpu-node-1"
    agent.refresh()
    clock.advance(6)
    with structlog.testing.capture_logs() as logs:
        await h2.poll()
    changed = [e for e in logs if e["event"] == "switch_uplinks_changed"]
    assert changed and changed[0]["added"] == ["Ethernet8"]


def _series(h: Harness) -> dict[tuple[str, tuple[str, ...]], tuple[float, float | None]]:
    return {
        (s.spec.name, s.labels): (s.value, None if s.rate is None else s.rate.per_second)
        for s in h.store
    }


@pytest.mark.parametrize("mode", ["node", "switch"])
async def test_cached_oid_plans_and_labels_equal_fresh_ones(
    sim: tuple[SimSwitch, SimAgent],
    clock: ManualClock,
    tmp_path: Path,
    make_harness: Callable[..., Harness],
    mode: str,
) -> None:
    sw, agent = sim
    warm = make_harness([_target(tmp_path, agent, mode=mode)], clock=clock)
    cold = make_harness([_target(tmp_path, agent, mode=mode)], clock=clock)
    # Values taken one by one (what a poll with exception values or summed rows
    # does), not as each port's slices of the poll layout.
    each = make_harness([_target(tmp_path, agent, mode=mode)], clock=clock)
    for h in (warm, cold, each):
        await h.collector.start()
    for k in range(6):
        if k == 2:
            sw.pfc_storm("Ethernet0", priority=3, direction="rx", fraction=0.5)
        state = cold.collector.target_state("leaf1")
        state.label_cache.clear()  # each port's labels and recipes, made again this poll
        state.steady = None  # and the poll compiled again from them
        one_by_one = each.collector.target_state("leaf1")
        one_by_one.layout = None
        one_by_one.poll_plan.clear()  # what each OID is, worked out again this poll
        await warm.poll()
        await cold.poll()
        await each.poll()
        # Only polls taken one by one keep each OID's plan and each port's recipes.
        kept = warm.collector.target_state("leaf1")
        assert kept.layout is not None and kept.steady is not None
        assert kept.poll_plan == [] and kept.label_cache == {}
        if k:  # (the first poll discovers: a layout, polled compiled)
            assert len(one_by_one.poll_plan) == len(one_by_one.get_oids) > 0
        assert _series(warm) == _series(cold) == _series(each)
        clock.advance(1.0)
    ratio = warm.value(RATIO, "leaf1", "Ethernet0", "3", "rx")
    assert ratio == pytest.approx(0.5, abs=0.01)
