"""The real collector against a real gNMI target on 127.0.0.1 over gRPC with TLS."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collectors.gnmi._settings import GnmiTargetSettings
from fabricwatch.engine.evidence import ScoreContext, score_congestion
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.testing.sim_gnmi import SimTarget, demo_target
from fabricwatch.testing.sim_snmp import SimPort
from tests.gnmi.conftest import NODE, MakeHarness, ManualClock, Pki, write_secret

pytestmark = pytest.mark.integration

ECN = fam.SW_ECN.name
PFC_RATIO = fam.SW_PFC_RATIO.name
PFC_S = fam.SW_PFC_SECONDS.name


def _mtls_target(pki: Pki, tmp_path: Path, **kw: object) -> GnmiTargetSettings:
    return GnmiTargetSettings(
        name="leaf1",
        host="127.0.0.1",
        tls=pki.client_tls(),
        username="telemetry",
        password_file=write_secret(tmp_path, "gnmi-password", "s3cret"),
        **kw,  # type: ignore[arg-type]
    )


async def test_openconfig_ecn_marks_per_second_over_mutual_tls(
    make_harness: MakeHarness, pki: Pki, tmp_path: Path
) -> None:
    clock = ManualClock()
    sim = demo_target(4, layout="openconfig", clock=clock)
    sim.ecn_surge("Ethernet1/1", 3, 12_000)
    sim.ecn_surge("Ethernet1/2", 5, 700)
    sim.ecn_surge("Ethernet1/3", 3, 99_999)  # not this node's uplink
    h = await make_harness(
        sim,
        tls=pki.server_tls(mutual=True),
        target=_mtls_target(pki, tmp_path),
        clock=clock,
        username="telemetry",
        password="s3cret",
    )
    t = h.collector.target_state("leaf1")
    await h.until("uplinks from LLDP", lambda: t.uplinks is not None and len(t.uplinks) == 2)
    await h.until(
        "resubscribed to the uplinks",
        lambda: t.subscribed_ports is not None and len(t.subscribed_ports) == 2,
    )
    keys = (
        (ECN, ("leaf1", "Ethernet1/1", "3")),
        (ECN, ("leaf1", "Ethernet1/2", "5")),
        (fam.SW_RX_BYTES.name, ("leaf1", "Ethernet1/1")),
    )
    await h.fresh(*keys)
    for _ in range(3):
        await h.step(clock, *keys)
    assert h.rate(ECN, "leaf1", "Ethernet1/1", "3") == pytest.approx(12_000, rel=1e-3)
    assert h.rate(ECN, "leaf1", "Ethernet1/2", "5") == pytest.approx(700, rel=1e-2)
    assert h.rate(ECN, "leaf1", "Ethernet1/1", "0") == 0.0
    # Node mode: ports that face other hosts are not exported.
    assert h.store.get(ECN, ("leaf1", "Ethernet1/3", "3")) is None
    assert h.series(fam.SW_UPLINK_INFO.name, "leaf1", "Ethernet1/1", "eth0") == 1.0
    assert h.series(fam.SW_PORT_UP.name, "leaf1", "Ethernet1/1") == 1.0
    assert h.series(fam.SW_SPEED.name, "leaf1", "Ethernet1/1") == 400e9 / 8
    util = h.series(fam.SW_UTILIZATION.name, "leaf1", "Ethernet1/1", "rx")
    assert util == pytest.approx(5e9 * 8 / 400e9, rel=1e-3)
    assert h.series("fabricwatch_gnmi_target_up", "leaf1") == 1.0
    assert h.series("fabricwatch_gnmi_target_info", "leaf1", "openconfig") == 1.0
    assert t.ignored == {"malformed": 0, "unknown_path": 0}


async def test_sonic_pfc_pause_fraction_from_duration_counters(
    make_harness: MakeHarness, pki: Pki, tmp_path: Path
) -> None:
    clock = ManualClock()
    sim = demo_target(4, layout="sonic", clock=clock)
    sim.pfc_storm("Ethernet0", priority=3, direction="rx", fraction=0.8)
    sim.pfc_storm("Ethernet4", priority=4, direction="tx", fraction=0.25)
    sim.ecn_surge("Ethernet4", 3, 3_000)
    h = await make_harness(
        sim, tls=pki.server_tls(mutual=True), target=_mtls_target(pki, tmp_path),
        clock=clock, username="telemetry", password="s3cret",
    )  # fmt: skip
    t = h.collector.target_state("leaf1")
    await h.until(
        "resubscribed to the uplinks", lambda: t.subscribed_ports == ["Ethernet0", "Ethernet4"]
    )
    keys = (
        (PFC_S, ("leaf1", "Ethernet0", "3", "rx")),
        (PFC_S, ("leaf1", "Ethernet4", "4", "tx")),
        (ECN, ("leaf1", "Ethernet4", "3")),
    )
    await h.fresh(*keys)
    for _ in range(3):
        await h.step(clock, *keys)
    assert t.profile is not None and t.profile.name == "sonic"
    assert h.series(PFC_RATIO, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(0.8, rel=1e-3)
    assert h.series(PFC_RATIO, "leaf1", "Ethernet4", "4", "tx") == pytest.approx(0.25, rel=1e-3)
    assert h.series(PFC_RATIO, "leaf1", "Ethernet0", "2", "rx") == 0.0
    frames = h.rate(fam.SW_PFC_FRAMES.name, "leaf1", "Ethernet0", "3", "rx")
    assert frames == pytest.approx(0.8 * 400e9 / (65535 * 512), rel=1e-2)
    assert h.rate(fam.SW_PFC_SECONDS.name, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(
        0.8, rel=1e-3
    )
    assert h.rate(ECN, "leaf1", "Ethernet4", "3") == pytest.approx(3_000, rel=1e-3)
    # SONiC serves ~100 counters per port; those no rule maps are counted, not errors.
    assert t.ignored["malformed"] == 0
    assert t.ignored["unknown_path"] > 0


async def test_sonic_pause_fraction_from_frames_without_duration_counters(
    make_harness: MakeHarness,
) -> None:
    clock = ManualClock()
    sim = demo_target(2, layout="sonic", clock=clock)
    sim.pfc_durations = False
    sim.pfc_storm("Ethernet0", priority=3, direction="rx", fraction=0.5)
    h = await make_harness(sim, clock=clock, mode="switch")
    t = h.collector.target_state("leaf1")
    await h.until(
        "port speed", lambda: "Ethernet0" in t.ports and t.ports["Ethernet0"].speed_bps > 0
    )
    key = (fam.SW_PFC_FRAMES.name, ("leaf1", "Ethernet0", "3", "rx"))
    await h.fresh(key)
    for _ in range(3):
        await h.step(clock, key)
    assert h.series(PFC_RATIO, "leaf1", "Ethernet0", "3", "rx") == pytest.approx(0.5, rel=1e-2)
    assert h.store.get(fam.SW_PFC_SECONDS.name, ("leaf1", "Ethernet0", "3", "rx")) is None


async def test_switch_mode_streams_every_port_and_oper_status_on_change(
    make_harness: MakeHarness,
) -> None:
    clock = ManualClock()
    sim = demo_target(6, layout="openconfig", clock=clock)
    h = await make_harness(sim, clock=clock, mode="switch")
    await h.until(
        "all six ports up",
        lambda: len(h.store.family(fam.SW_PORT_UP.name)) == 6,
    )
    sim.set_up("Ethernet1/5", False)
    await h.until(
        "Ethernet1/5 down", lambda: h.series(fam.SW_PORT_UP.name, "leaf1", "Ethernet1/5") == 0.0
    )
    sim.set_up("Ethernet1/5", True)
    await h.until(
        "Ethernet1/5 up", lambda: h.series(fam.SW_PORT_UP.name, "leaf1", "Ethernet1/5") == 1.0
    )
    assert h.collector.target_state("leaf1").ports["Ethernet1/5"].flaps == 2
    await h.step(
        clock, (fam.SW_PORT_FLAPS.name, ("leaf1", "Ethernet1/5"))
    )  # the store needs time to move for a counter's next sample
    assert h.series(fam.SW_PORT_FLAPS.name, "leaf1", "Ethernet1/5") == 2.0
    assert h.series(fam.SW_PORT_FLAPS.name, "leaf1", "Ethernet1/1") == 0.0
    assert h.collector.target_state("leaf1").uplinks is None  # no LLDP filtering in switch mode


async def test_static_uplinks_skip_lldp(make_harness: MakeHarness) -> None:
    clock = ManualClock()
    sim = demo_target(4, layout="openconfig", clock=clock)
    sim.ecn_surge("Ethernet1/4", 2, 1000)
    target = GnmiTargetSettings(
        name="leaf1", host="127.0.0.1", insecure=True, uplinks=["Ethernet1/4"]
    )
    h = await make_harness(sim, target=target, clock=clock)
    t = h.collector.target_state("leaf1")
    await h.fresh((ECN, ("leaf1", "Ethernet1/4", "2")))
    await h.step(clock, (ECN, ("leaf1", "Ethernet1/4", "2")))
    assert h.rate(ECN, "leaf1", "Ethernet1/4", "2") == pytest.approx(1000, rel=1e-2)
    assert {s.labels[1] for s in h.store.family(ECN)} == {"Ethernet1/4"}
    assert t.stream is not None and t.stream.stats.connects == 1  # planned once, no resubscribe


async def test_lldp_by_mac_when_the_host_name_differs(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    sysfs = tmp_path / "no-sys" / "class" / "net" / "ens1f0np0"
    sysfs.mkdir(parents=True)
    (sysfs / "address").write_text("b8:ce:f6:12:34:56\n", encoding="ascii")
    sim = SimTarget(
        [
            SimPort(1, "swp1", neighbour_name="some-other-name", neighbour_mac="b8:ce:f6:12:34:56"),
            SimPort(2, "swp2", neighbour_name="not-me", neighbour_mac="02:00:00:00:00:02"),
        ]
    )
    h = await make_harness(sim)
    t = h.collector.target_state("leaf1")
    await h.until("uplink by MAC", lambda: t.uplinks is not None and list(t.uplinks) == ["swp1"])


async def test_ecn_surge_on_one_queue_drives_ecn_congestion_evidence(
    make_harness: MakeHarness,
) -> None:
    clock = ManualClock()
    sim = demo_target(2, layout="sonic", clock=clock)
    for q in range(8):
        sim.ecn_surge("Ethernet0", q, 30)  # background marking on every queue
    h = await make_harness(sim, clock=clock)
    t = h.collector.target_state("leaf1")
    await h.until("resubscribed", lambda: t.subscribed_ports == ["Ethernet0", "Ethernet4"])
    await h.fresh((ECN, ("leaf1", "Ethernet0", "3")))
    for _ in range(40):  # quiet baseline
        await h.step(clock, (ECN, ("leaf1", "Ethernet0", "3")))
    onset = clock.now
    sim.ecn_surge("Ethernet0", 3, 40_000)
    for _ in range(5):
        await h.step(clock, (ECN, ("leaf1", "Ethernet0", "3")))
    ctx = ScoreContext(h.store, EngineSettings(), onset, clock.now)
    evidence = score_congestion(ctx)
    ecn = [e for e in evidence if e.family == ECN]
    assert len(ecn) == 1, evidence
    e = ecn[0]
    assert e.cause == "ecn_congestion"
    assert e.culprit.key == "switch:leaf1:Ethernet0"
    assert dict(e.culprit.labels)["queue"] == "3"
    assert e.value == pytest.approx(40_000, rel=1e-2)
    assert e.baseline == pytest.approx(30, rel=0.1)
    assert e.score >= 0.7
    # The same background without a surge is no evidence.
    quiet = ScoreContext(h.store, EngineSettings(), onset - 20, onset - 5)
    assert [e for e in score_congestion(quiet) if e.family == ECN] == []
    assert NODE  # the uplinks were found by this node's name
