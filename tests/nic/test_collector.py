"""The NIC collector end to end over fixture trees, through a real SnapshotStore."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fabricwatch.collector import CollectorEnv, StartupPolicy
from fabricwatch.collectors.nic import FACTORY
from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.collectors.nic._metrics import METRICS
from fabricwatch.collectors.nic._settings import NicSettings
from fabricwatch.collectors.nic._topology import PciFunction, locality, nvml_bus_id
from fabricwatch.errors import CollectorError, ConfigError
from fabricwatch.readings import MetricKind
from fabricwatch.settings import build
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names, pause_frames_for

from .conftest import REPO_DOCS, Harness

GBPS100 = 100e9
MakeHarness = Callable[..., Harness]


def roce_host(fx: NicFixture, *, congestion: bool = True, pfc: tuple[int, ...] = (3, 4)) -> None:
    """One ConnectX RoCE port at 100G behind a PCIe switch shared with GPU 0000:3c:00.0."""
    fx.add_pci("0000:3b:00.0", numa=0, switch="sw0")
    fx.add_gpu("0000:3c:00.0", numa=0, switch="sw0")
    fx.add_gpu("0000:3d:00.0", numa=0)
    fx.add_gpu("0000:bb:00.0", numa=1)
    fx.add_netdev("eth0", pci="0000:3b:00.0")
    fx.add_rdma_port("mlx5_0", pci="0000:3b:00.0", netdev="eth0", congestion=congestion)
    fx.add_ethtool("eth0", mlx5_ethtool_names(pfc))


# -- contract -----------------------------------------------------------------


def _catalogue() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in REPO_DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or "fabricwatch_nic_" not in cells[0]:
            continue
        names = re.findall(r"`([a-z_]+)`", cells[0])
        first = names[0]
        full = [first] + [first.rsplit("_", 2)[0] + n for n in names[1:]]
        kind = cells[1].split()[0]
        labels = tuple(x.strip() for x in cells[2].split(","))
        for n in full:
            rows[n] = (kind, labels)
    return rows


def test_exports_the_signal_catalogue_exactly() -> None:
    cat = _catalogue()
    assert "fabricwatch_nic_receive_bytes" in cat and len(cat) == 12
    specs = {s.name: s for s in METRICS}
    for name, (kind, labels) in cat.items():
        assert name in specs, name
        assert specs[name].kind is MetricKind(kind), name
        assert specs[name].labels == labels, name
    assert len(specs) == len(METRICS)
    for s in METRICS:
        assert s.name.startswith("fabricwatch_nic_")
        assert "pid" not in s.labels and "timestamp" not in s.labels
    assert specs["fabricwatch_nic_rdma_transport_events"].bits == 32
    assert specs["fabricwatch_nic_xmit_wait_ticks"].bits == 32


def test_settings_are_strict_and_have_defaults() -> None:
    s = build(NicSettings, {}, prefix="collectors.nic")
    assert s.enabled and s.ethtool and s.startup is StartupPolicy.RETRY
    s = build(
        NicSettings, {"rescan_interval": "2m", "devices": ["mlx5_*"]}, prefix="collectors.nic"
    )
    assert s.rescan_interval == 120.0 and s.devices == ["mlx5_*"]
    with pytest.raises(ConfigError, match=r"collectors\.nic\.bogus"):
        build(NicSettings, {"bogus": 1}, prefix="collectors.nic")
    with pytest.raises(ConfigError, match=r"collectors\.nic\.xmit_wait_tick_bytes"):
        build(NicSettings, {"xmit_wait_tick_bytes": -1}, prefix="collectors.nic")
    collector = FACTORY.build(s, CollectorEnv())
    assert isinstance(collector, NicCollector) and collector.name == "nic"


async def test_missing_stats_dir_fails_start(tmp_path: Path) -> None:
    s = build(NicSettings, {"ethtool_stats_dir": str(tmp_path / "nope")})
    with pytest.raises(CollectorError, match="not a directory"):
        await NicCollector(s, CollectorEnv(sys_root=tmp_path)).start()


async def test_no_rdma_devices_is_an_empty_cycle(tmp_path: Path, harness: MakeHarness) -> None:
    h = await harness(sys_root=tmp_path / "empty").start()
    assert await h.cycle() == []


# -- congestion counters, units, wraps -----------------------------------------


async def test_roce_port_with_congestion_counters(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    h = await harness().start()
    await h.cycle()
    for _ in range(3):
        fx.advance("mlx5_0", "1", "np_ecn_marked_roce_packets", 5000)
        fx.advance("mlx5_0", "1", "np_cnp_sent", 1200)
        fx.advance("mlx5_0", "1", "rp_cnp_handled", 800)
        fx.advance("mlx5_0", "1", "port_xmit_data", 1_000_000)  # 4-byte words
        fx.advance("mlx5_0", "1", "out_of_sequence", 7, bits=32)
        await h.cycle(2.0)
    dp = ("mlx5_0", "1")
    assert h.rate("ecn_marked_packets", *dp) == 2500
    assert h.rate("cnp_sent_packets", *dp) == 600
    assert h.rate("cnp_handled_packets", *dp) == 400
    assert h.rate("transmit_bytes", *dp) == 2_000_000
    assert h.value("transmit_bytes", *dp) == 3_000_000 * 4
    assert h.rate("rdma_transport_events", *dp, "out_of_sequence") == 3.5
    assert h.now("congestion_counters_present")[dp] == 1.0
    assert h.now("info")[(*dp, "eth0", "0000:3b:00.0", "0", "Ethernet")] == 1.0
    assert h.now("link_rate_bytes_per_second")[dp] == GBPS100 / 8


async def test_roce_port_without_congestion_counters(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx, congestion=False)
    h = await harness().start()
    await h.cycle()
    await h.cycle()
    assert h.now("congestion_counters_present") == {("mlx5_0", "1"): 0.0}
    assert not h.now("ecn_marked_packets") and not h.now("cnp_sent_packets")
    assert h.now("transmit_bytes")  # the rest still flows


async def test_32bit_q_counter_wraps(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    fx.set("mlx5_0", "1", "out_of_buffer", 2**32 - 100)
    h = await harness().start()
    await h.cycle()
    assert fx.advance("mlx5_0", "1", "out_of_buffer", 300, bits=32) == 200
    await h.cycle()
    assert h.rate("rdma_transport_events", "mlx5_0", "1", "out_of_buffer") == 300
    assert h.value("rdma_transport_events", "mlx5_0", "1", "out_of_buffer") == 2**32 + 200


async def test_64bit_counter_wraps(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    fx.set("mlx5_0", "1", "np_cnp_sent", 2**64 - 10)
    h = await harness().start()
    await h.cycle()
    # Readings are floats: near 2**64 one ulp is 4096 counts, so use a delta well above it.
    assert fx.advance("mlx5_0", "1", "np_cnp_sent", 1 << 24) == (1 << 24) - 10
    await h.cycle()
    assert h.rate("cnp_sent_packets", "mlx5_0", "1") == pytest.approx(1 << 24, rel=1e-3)


async def test_ib_hca_xmit_wait_and_link_flap(fx: NicFixture, harness: MakeHarness) -> None:
    fx.add_pci("0000:1a:00.0", numa=0)
    fx.add_rdma_port("mlx5_0", pci="0000:1a:00.0", link_layer="InfiniBand", rate_gbps=400)
    h = await harness().start()
    await h.cycle()
    quarter = round(0.25 * 400e9 / 64)  # ticks of 8 bytes in a quarter second at 400G
    fx.advance("mlx5_0", "1", "port_xmit_wait", quarter, bits=32)
    await h.cycle()
    dp = ("mlx5_0", "1")
    assert h.now("xmit_wait_ratio")[dp] == pytest.approx(0.25, rel=1e-6)
    assert h.now("link_up")[dp] == 1.0
    fx.set_state("mlx5_0", "1", 1)
    fx.advance("mlx5_0", "1", "link_downed", 1)
    await h.cycle()
    assert h.now("link_up")[dp] == 0.0
    assert h.now("port_state")[dp] == 1.0 and h.now("port_physical_state")[dp] == 2.0
    assert h.value("link_downed", *dp) == 1.0
    assert h.rate("link_downed", *dp) == 0.5  # one flap since the counter last moved, 2 s ago
    assert not h.now("ethtool_up")  # no netdev: nothing asked


# -- PFC storm -------------------------------------------------------------------


async def test_pause_storm_from_duration_counters(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx, pfc=(3, 4))
    h = await harness().start()
    await h.cycle()
    for _ in range(5):
        fx.advance_pause("eth0", 3, 0.97, GBPS100)  # the switch holds priority 3 ~all the time
        fx.advance_pause("eth0", 4, 0.01, GBPS100)
        fx.advance_stat("eth0", "tx_pause_storm_warning_events", 1)
        await h.cycle()
    ratio = h.now("pfc_pause_ratio")
    assert ratio[("mlx5_0", "1", "3", "rx")] == pytest.approx(0.97)
    assert ratio[("mlx5_0", "1", "3", "rx")] > 0.9
    assert ratio[("mlx5_0", "1", "4", "rx")] == pytest.approx(0.01)
    assert ratio[("mlx5_0", "1", "3", "tx")] == 0.0
    assert not [k for k, v in ratio.items() if k[2] not in ("3",) and v > 0.05]
    frames = pause_frames_for(0.97, GBPS100)
    assert h.rate("pfc_pause_frames", "mlx5_0", "1", "3", "rx") == frames
    assert h.rate("pfc_pause_duration_seconds", "mlx5_0", "1", "3", "rx") == pytest.approx(0.97)
    assert h.rate("pause_storm_events", "mlx5_0", "1", "warning") == 1
    assert h.now("ethtool_up") == {("mlx5_0", "1"): 1.0}


async def test_pause_storm_estimated_from_frames(fx: NicFixture, harness: MakeHarness) -> None:
    """A driver without duration counters (ice names): ratio from frames x 65535 x 512 / rate."""
    roce_host(fx)
    fx.add_ethtool("eth0", ["rx_priority_3_xoff.nic", "rx_priority_5_xoff.nic", "rx_packets"])
    h = await harness().start()
    await h.cycle()
    for _ in range(3):
        fx.advance_stat("eth0", "rx_priority_3_xoff.nic", pause_frames_for(0.95, GBPS100))
        fx.advance_stat("eth0", "rx_priority_5_xoff.nic", 3)
        await h.cycle()
    ratio = h.now("pfc_pause_ratio")
    assert ratio[("mlx5_0", "1", "3", "rx")] == pytest.approx(0.95, abs=0.001)
    assert ratio[("mlx5_0", "1", "5", "rx")] < 0.002
    fx.advance_stat("eth0", "rx_priority_3_xoff.nic", 10 * pause_frames_for(1.0, GBPS100))
    await h.cycle()
    assert h.now("pfc_pause_ratio")[("mlx5_0", "1", "3", "rx")] == 1.0  # capped


async def test_bond_dual_port(fx: NicFixture, harness: MakeHarness) -> None:
    """RoCE LAG: one RDMA port over bond0 = two PFs; frames sum, ratio is the worst member."""
    fx.add_pci("0000:3b:00.0", numa=1, switch="sw1")
    fx.add_pci("0000:3b:00.1", numa=1, switch="sw1")
    fx.add_gpu("0000:3c:00.0", numa=1, switch="sw1")
    fx.add_netdev("enp59s0f0np0", pci="0000:3b:00.0")
    fx.add_netdev("enp59s0f1np1", pci="0000:3b:00.1")
    fx.add_bond("bond0", ("enp59s0f0np0", "enp59s0f1np1"))
    fx.add_rdma_port("mlx5_bond_0", pci="0000:3b:00.0", netdev="bond0", rate_gbps=200)
    for nd in ("enp59s0f0np0", "enp59s0f1np1"):
        fx.add_ethtool(nd, mlx5_ethtool_names((3,)))
    h = await harness().start()
    await h.cycle()
    fx.advance_pause("enp59s0f0np0", 3, 0.95, GBPS100)
    fx.advance_pause("enp59s0f1np1", 3, 0.10, GBPS100)
    fx.advance_stat("enp59s0f1np1", "rx_discards_phy", 40)
    await h.cycle()
    dp = ("mlx5_bond_0", "1")
    assert h.now("pfc_pause_ratio")[(*dp, "3", "rx")] == pytest.approx(0.95)
    both = pause_frames_for(0.95, GBPS100) + pause_frames_for(0.10, GBPS100)
    assert h.rate("pfc_pause_frames", *dp, "3", "rx") == both
    assert h.rate("drops", *dp, "rx_discards_phy") == 40
    assert h.now("info")[(*dp, "bond0", "0000:3b:00.0", "1", "Ethernet")] == 1.0
    assert h.now("gpu_locality_info") == {(*dp, "00000000:3C:00.0", "pcie_switch"): 1.0}
    # A member whose statistics vanish: no partial sum (it would read as a reset).
    (fx.ethtool_dir / "enp59s0f1np1").unlink()
    await h.cycle()
    assert h.now("ethtool_up")[dp] == 0.0
    assert not h.now("pfc_pause_frames")
    fx.add_ethtool("enp59s0f1np1", mlx5_ethtool_names((3,)))
    await h.cycle()
    assert h.now("ethtool_up")[dp] == 1.0


# -- faults ------------------------------------------------------------------------


async def test_hot_unplug_and_replug(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    fx.add_pci("0000:5e:00.0", numa=0)
    fx.add_rdma_port("mlx5_1", pci="0000:5e:00.0")
    h = await harness().start()
    await h.cycle()
    fx.advance("mlx5_1", "1", "np_cnp_sent", 100)
    await h.cycle()
    assert h.rate("cnp_sent_packets", "mlx5_1", "1") == 100
    fx.unplug("mlx5_1")
    fx.advance("mlx5_0", "1", "np_cnp_sent", 10)
    readings = await h.cycle()  # must not raise
    gone = [r for r in readings if r.labels[0] == "mlx5_1"]
    assert [(r.name, r.value) for r in gone] == [("fabricwatch_nic_link_up", 0.0)]
    assert h.value("cnp_sent_packets", "mlx5_0", "1") == 10
    assert h.now("link_up") == {("mlx5_0", "1"): 1.0, ("mlx5_1", "1"): 0.0}
    await h.cycle()
    fx.replug("mlx5_1")  # counters restart at 0
    fx.advance("mlx5_1", "1", "np_cnp_sent", 5)
    await h.cycle()
    assert h.now("cnp_sent_packets")[("mlx5_1", "1")] == 5
    assert h.now("link_up")[("mlx5_1", "1")] == 1.0
    assert h.rate("cnp_sent_packets", "mlx5_1", "1") is None  # new epoch: a reset, not a delta
    fx.advance("mlx5_1", "1", "np_cnp_sent", 70)
    await h.cycle()
    assert h.rate("cnp_sent_packets", "mlx5_1", "1") == 70


async def test_counter_file_disappears_and_returns(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    h = await harness().start()
    await h.cycle()
    fx.remove("mlx5_0", "1", "np_ecn_marked_roce_packets")
    await h.cycle()
    assert not h.now("ecn_marked_packets")
    assert h.now("cnp_sent_packets")  # the rest of the port is fine
    fx.set("mlx5_0", "1", "np_ecn_marked_roce_packets", 40)
    await h.cycle()
    fx.advance("mlx5_0", "1", "np_ecn_marked_roce_packets", 60)
    await h.cycle()
    assert h.rate("ecn_marked_packets", "mlx5_0", "1") == 60


async def test_garbage_is_contained(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    h = await harness().start()
    await h.cycle()
    fx.set("mlx5_0", "1", "np_cnp_sent", "0xdeadbeef")
    (fx.ethtool_dir / "eth0").write_text("NIC statistics:\n     rx_prio3_pause: lots\n")
    await h.cycle()
    assert h.now("read_errors") == {("mlx5_0", "1"): 1.0}
    assert h.now("ethtool_up") == {("mlx5_0", "1"): 0.0}
    assert not h.now("cnp_sent_packets") and h.now("ecn_marked_packets")
    fx.set("mlx5_0", "1", "np_cnp_sent", 10)
    fx.add_ethtool("eth0", mlx5_ethtool_names((3,)))
    await h.cycle()
    assert h.now("ethtool_up") == {("mlx5_0", "1"): 1.0}
    assert h.now("cnp_sent_packets") == {("mlx5_0", "1"): 10.0}


async def test_device_filters(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    fx.add_pci("0000:5e:00.0")
    fx.add_rdma_port("mlx5_1", pci="0000:5e:00.0")
    fx.add_pci("0000:5f:00.0")
    fx.add_rdma_port("ibp1", pci="0000:5f:00.0")
    h = await harness({"devices": ["mlx5_*"], "exclude": ["mlx5_1"]}).start()
    await h.cycle()
    assert set(h.now("link_up")) == {("mlx5_0", "1")}


# -- topology ----------------------------------------------------------------------


async def test_gpu_locality(fx: NicFixture, harness: MakeHarness) -> None:
    roce_host(fx)
    h = await harness().start()
    await h.cycle()
    assert h.now("gpu_locality_info") == {
        ("mlx5_0", "1", "00000000:3C:00.0", "pcie_switch"): 1.0,
        ("mlx5_0", "1", "00000000:3D:00.0", "host_bridge"): 1.0,
        ("mlx5_0", "1", "00000000:BB:00.0", "system"): 1.0,
    }
    h2 = await harness({"gpu_locality": False}).start()
    await h2.cycle()
    assert not h2.now("gpu_locality_info")


def test_locality_levels_and_bus_id() -> None:
    switch = ("pci0000:00", "0000:00:01.0", "0000:10:00.0")
    nic = PciFunction("0000:3b:00.0", (*switch, "0000:11:00.0", "0000:3b:00.0"), 0)
    near = PciFunction("0000:3c:00.0", (*switch, "0000:11:01.0", "0000:3c:00.0"), 0)
    phb = PciFunction("0000:3d:00.0", ("pci0000:00", "0000:00:02.0", "0000:3d:00.0"), 0)
    node = PciFunction("0000:40:00.0", ("pci0000:40", "0000:40:01.0", "0000:41:00.0"), 0)
    far = PciFunction("0000:bb:00.0", ("pci0000:80", "0000:80:01.0", "0000:bb:00.0"), 1)
    assert locality(nic, near) == "pcie_switch"
    assert locality(nic, phb) == "host_bridge"
    assert locality(nic, node) == "numa_node"
    assert locality(nic, far) == "system"
    assert nvml_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert nvml_bus_id("weird") == "weird"
