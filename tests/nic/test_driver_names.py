"""``ethtool -S`` dumps in each driver's layout, and counters pinned at their maximum.

Statistic names follow the drivers' string tables (torvalds/linux
drivers/net/ethernet/{mellanox/mlx5,broadcom/bnxt,intel/ice,intel/i40e,sfc},
drivers/net/ethernet/broadcom/tg3.c, Intel's out-of-tree i40e 2.x and ice
"unified" names, drivers/infiniband/hw/{irdma,efa}); values are made up.
Dumps start the way node_exporter's fixtures and a shell capture do
(``# ethtool -S <if>`` then ``NIC statistics:``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from fabricwatch.collectors.nic._ethtool import (
    LINK_PAUSE_DURATION_US,
    LINK_PAUSE_FRAMES,
    PAUSE_DURATION_US,
    PAUSE_FRAMES,
    Classifier,
    StatKey,
    classify,
    parse_ethtool_text,
)
from fabricwatch.errors import ParseError
from fabricwatch.testing.sim_nic import NicFixture, pause_frames_for

from .conftest import Harness
from .test_sysfs import expand_tsv

GBPS25 = 25e9
PINNED = 2**32 - 1


def _dump(netdev: str, lines: str) -> str:
    body = "".join(f"     {ln.strip()}\n" for ln in lines.strip().splitlines())
    return f"# ethtool -S {netdev}\nNIC statistics:\n{body}"


# driver -> (dump body, what must come out of it)
DUMPS: dict[str, tuple[str, dict[StatKey, int]]] = {
    "mlx5": (
        """
        rx_packets: 845320277
        rx_prio3_bytes: 220257077
        rx_prio3_pause: 1200
        rx_prio3_pause_duration: 400000
        rx_prio3_pause_transition: 600
        tx_prio3_pause: 7
        tx_prio3_pause_duration: 900
        rx_pause_ctrl_phy: 11
        tx_pause_ctrl_phy: 12
        rx_global_pause: 0
        rx_global_pause_duration: 0
        """,
        {
            StatKey(PAUSE_FRAMES, "3", "rx"): 1200,
            StatKey(PAUSE_DURATION_US, "3", "rx"): 400000,
            StatKey(PAUSE_FRAMES, "3", "tx"): 7,
            StatKey(PAUSE_DURATION_US, "3", "tx"): 900,
            # rx_global_pause wins over rx_pause_ctrl_phy for rx: never both.
            StatKey(LINK_PAUSE_FRAMES, "", "rx"): 0,
            StatKey(LINK_PAUSE_FRAMES, "", "tx"): 12,
            StatKey(LINK_PAUSE_DURATION_US, "", "rx"): 0,
        },
    ),
    "mlx5-global-pause-off": (
        """
        rx_pause_ctrl_phy: 11
        tx_pause_ctrl_phy: 12
        """,
        {StatKey(LINK_PAUSE_FRAMES, "", "rx"): 11, StatKey(LINK_PAUSE_FRAMES, "", "tx"): 12},
    ),
    "bnxt_en": (
        """
        rx_pfc_frames: 1300
        rx_pfc_ena_frames_pri3: 1300
        tx_pfc_ena_frames_pri3: 5
        pfc_pri3_rx_duration_us: 250000
        pfc_pri3_rx_transitions: 44
        pfc_pri3_tx_duration_us: 10
        rx_pause_frames: 2
        tx_pause_frames: 3
        rx_bytes_pri3: 99999
        """,
        {
            StatKey(PAUSE_FRAMES, "3", "rx"): 1300,
            StatKey(PAUSE_FRAMES, "3", "tx"): 5,
            StatKey(PAUSE_DURATION_US, "3", "rx"): 250000,
            StatKey(PAUSE_DURATION_US, "3", "tx"): 10,
            StatKey(LINK_PAUSE_FRAMES, "", "rx"): 2,
            StatKey(LINK_PAUSE_FRAMES, "", "tx"): 3,
        },
    ),
    "ice": (
        """
        rx_bytes.nic: 123
        link_xon_rx.nic: 9
        link_xoff_rx.nic: 4
        link_xoff_tx.nic: 6
        rx_priority_3_xon.nic: 77
        rx_priority_3_xoff.nic: 1400
        tx_priority_3_xoff.nic: 8
        """,
        {
            StatKey(PAUSE_FRAMES, "3", "rx"): 1400,
            StatKey(PAUSE_FRAMES, "3", "tx"): 8,
            StatKey(LINK_PAUSE_FRAMES, "", "rx"): 4,
            StatKey(LINK_PAUSE_FRAMES, "", "tx"): 6,
        },
    ),
    "ice-unified": (
        """
        port-rx-xon_events: 1
        port-rx-xoff_events: 4
        port-rx-xoff_prio-3_events: 1400
        port-tx-xoff_prio-3_events: 8
        """,
        {
            StatKey(PAUSE_FRAMES, "3", "rx"): 1400,
            StatKey(PAUSE_FRAMES, "3", "tx"): 8,
            StatKey(LINK_PAUSE_FRAMES, "", "rx"): 4,
        },
    ),
    "i40e-2.3.2-k": (
        """
        port.rx_bytes: 1234
        port.link_xon_rx: 1
        port.link_xoff_rx: 2
        port.link_xoff_tx: 3
        port.tx_priority_3_xon_tx: 5
        port.tx_priority_3_xoff_tx: 6
        port.rx_priority_3_xon_rx: 70
        port.rx_priority_3_xoff_rx: 1500
        port.rx_priority_3_xon_2_xoff: 9
        """,
        {
            StatKey(PAUSE_FRAMES, "3", "rx"): 1500,
            StatKey(PAUSE_FRAMES, "3", "tx"): 6,
            StatKey(LINK_PAUSE_FRAMES, "", "rx"): 2,
            StatKey(LINK_PAUSE_FRAMES, "", "tx"): 3,
        },
    ),
    "i40e-in-tree-old": (
        """
        port.tx_priority_3_xon: 5
        port.tx_priority_3_xoff: 6
        port.rx_priority_3_xon: 70
        port.rx_priority_3_xoff: 1500
        """,
        {StatKey(PAUSE_FRAMES, "3", "rx"): 1500, StatKey(PAUSE_FRAMES, "3", "tx"): 6},
    ),
    "sfc": (
        """
        port_rx_packets: 3045991334
        port_rx_pause: 21
        port_tx_pause: 22
        port_rx_control: 0
        """,
        {StatKey(LINK_PAUSE_FRAMES, "", "rx"): 21, StatKey(LINK_PAUSE_FRAMES, "", "tx"): 22},
    ),
    "tg3": (
        """
        rx_octets: 235787390409
        rx_xon_pause_rcvd: 3
        rx_xoff_pause_rcvd: 31
        rx_mac_ctrl_rcvd: 0
        rx_xoff_entered: 30
        tx_xon_sent: 1
        tx_xoff_sent: 32
        """,
        {StatKey(LINK_PAUSE_FRAMES, "", "rx"): 31, StatKey(LINK_PAUSE_FRAMES, "", "tx"): 32},
    ),
}


@pytest.mark.parametrize("driver", sorted(DUMPS))
def test_driver_dump_layout_classified(driver: str) -> None:
    body, want = DUMPS[driver]
    stats = parse_ethtool_text(_dump("ens1f0np0", body), driver)
    assert len(stats) == len(body.strip().splitlines())  # header and comment skipped
    got = {k: v for k, v in Classifier().select(stats) if k.kind in {*_PAUSE_KINDS}}
    assert got == want


_PAUSE_KINDS = (PAUSE_FRAMES, PAUSE_DURATION_US, LINK_PAUSE_FRAMES, LINK_PAUSE_DURATION_US)


def test_headers_comments_and_truncation() -> None:
    text = "# ethtool -S eth0\nNIC statistics:\n     rx_packets: 1\nStandard stats for eth0:\n"
    assert parse_ethtool_text(text) == {"rx_packets": 1}
    # A statistic with no value is still truncation, not a header.
    with pytest.raises(ParseError, match="unsigned integer"):
        parse_ethtool_text("NIC statistics:\n     rx_packets:\n")


def test_xon_and_transitions_are_not_pause_frames() -> None:
    for name in (
        "rx_priority_3_xon.nic",
        "port.rx_priority_3_xon_rx",
        "port.rx_priority_3_xon_2_xoff",
        "pfc_pri3_rx_transitions",
        "rx_prio3_pause_transition",
        "rx_pfc_frames",
        "rx_xoff_entered",
        "port.rx_priority_3_xoff_tx",  # direction mismatch: not a real name
    ):
        assert classify(name) is None, name


# name of the per-priority RX pause-frame counter, per frames-only driver
FRAME_NAMES = {
    "bnxt_en": "rx_pfc_ena_frames_pri3",
    "ice": "rx_priority_3_xoff.nic",
    "ice-unified": "port-rx-xoff_prio-3_events",
    "i40e-2.3.2-k": "port.rx_priority_3_xoff_rx",
    "i40e-in-tree-old": "port.rx_priority_3_xoff",
}


def _port(fx: NicFixture, names: list[str], speed_mbps: int = 25_000) -> None:
    fx.add_pci("0000:3b:00.0", numa=0)
    fx.add_netdev("eth0", pci="0000:3b:00.0", speed_mbps=speed_mbps)
    fx.add_rdma_port("rdma0", pci="0000:3b:00.0", netdev="eth0", rate_gbps=speed_mbps // 1000)
    fx.add_ethtool("eth0", names)


@pytest.mark.parametrize("driver", sorted(FRAME_NAMES))
async def test_frames_only_driver_reads_a_storm(
    driver: str, fx: NicFixture, harness: Callable[..., Harness]
) -> None:
    name = FRAME_NAMES[driver]
    _port(fx, [name, "rx_packets"])
    h = await harness().start()
    await h.cycle()
    for _ in range(3):
        fx.advance_stat("eth0", name, pause_frames_for(0.9, GBPS25))
        await h.cycle()
    assert h.now("pfc_pause_ratio")[("rdma0", "1", "3", "rx")] == pytest.approx(0.9, abs=0.002)
    assert h.rate("pfc_pause_frames", "rdma0", "1", "3", "rx") == pause_frames_for(0.9, GBPS25)


@pytest.mark.parametrize(
    ("driver", "name"),
    [
        ("sfc", "port_rx_pause"),
        ("tg3", "rx_xoff_pause_rcvd"),
        ("mlx5", "rx_pause_ctrl_phy"),
        ("bnxt_en", "rx_pause_frames"),
    ],
)
async def test_link_pause_drivers_read_a_storm(
    driver: str, name: str, fx: NicFixture, harness: Callable[..., Harness]
) -> None:
    _port(fx, [name])
    h = await harness().start()
    await h.cycle()
    for _ in range(3):
        fx.advance_stat("eth0", name, pause_frames_for(0.5, GBPS25))
        await h.cycle()
    assert h.now("link_pause_ratio")[("rdma0", "1", "rx")] == pytest.approx(0.5, abs=0.002)


async def test_pinned_ethtool_counter_is_flagged_not_zero(
    fx: NicFixture, harness: Callable[..., Harness]
) -> None:
    """bnxt's PFC frames pinned at 2^32-1 (a 32-bit hardware counter): no rate, a flag."""
    _port(fx, ["rx_pfc_ena_frames_pri3", "rx_pfc_ena_frames_pri4"])
    fx.set_stat("eth0", "rx_pfc_ena_frames_pri3", PINNED)
    h = await harness().start()
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            fx.advance_stat("eth0", "rx_pfc_ena_frames_pri4", 10)
            await h.cycle()
    assert h.now("counter_saturated") == {("rdma0", "1", "rx_pfc_ena_frames_pri3"): 1.0}
    ratio = h.now("pfc_pause_ratio")
    assert ("rdma0", "1", "3", "rx") not in ratio  # unknown, not 0
    assert ("rdma0", "1", "4", "rx") in ratio
    assert h.value("pfc_pause_frames", "rdma0", "1", "3", "rx") is None
    said = [e for e in logs if e["event"] == "nic_counter_saturated"]
    assert len(said) == 1 and said[0]["counter"] == "rx_pfc_ena_frames_pri3"
    # Cleared counters (driver reload) read again.
    fx.set_stat("eth0", "rx_pfc_ena_frames_pri3", 0)
    await h.cycle()
    fx.advance_stat("eth0", "rx_pfc_ena_frames_pri3", pause_frames_for(1.0, GBPS25))
    await h.cycle()
    assert h.now("pfc_pause_ratio")[("rdma0", "1", "3", "rx")] == pytest.approx(1.0, abs=0.002)
    assert not h.now("counter_saturated")


async def test_mlx4_port_xmit_wait_pinned_is_flagged(
    fx: NicFixture, harness: Callable[..., Harness]
) -> None:
    """mlx4's port_xmit_wait at 4294967295 used to read as a wait ratio of 0."""
    fx.add_pci("0000:1a:00.0", numa=0)
    fx.add_rdma_port("mlx4_0", pci="0000:1a:00.0", link_layer="InfiniBand", rate_gbps=56)
    fx.set("mlx4_0", "1", "port_xmit_wait", PINNED)
    h = await harness().start()
    for _ in range(3):
        await h.cycle()
    dp = ("mlx4_0", "1")
    assert dp not in h.now("xmit_wait_ratio")
    assert h.now("counter_saturated") == {(*dp, "port_xmit_wait"): 1.0}
    assert h.value("xmit_wait_ticks", *dp) is None


async def test_real_h100_tree_has_saturated_pma_counters(
    shared_data: Path, tmp_path: Path, harness: Callable[..., Harness]
) -> None:
    """The real H100 capture: excessive_buffer_overrun_errors (4 bit) at 15, mlx5_1's
    link_downed (8 bit) at 255. Both are pinned: flagged, and not exported as counters."""
    root = tmp_path / "h100"
    expand_tsv(shared_data / "host" / "gpud_h100_sys_class_infiniband.tsv", root)
    h = await harness({"ethtool": False, "ethtool_stats_dir": None}, sys_root=root).start()
    await h.cycle()
    sat = h.now("counter_saturated")
    assert ("mlx5_1", "1", "link_downed") in sat
    assert ("mlx5_0", "1", "excessive_buffer_overrun_errors") in sat
    assert ("mlx5_0", "1", "link_downed") not in sat
    assert h.value("link_downed", "mlx5_1", "1") is None
    assert h.value("link_downed", "mlx5_0", "1") is not None


async def test_irdma_and_efa_hw_counters(fx: NicFixture, harness: Callable[..., Harness]) -> None:
    fx.add_pci("0000:5e:00.0", numa=0)
    fx.add_rdma_port("irdma0", pci="0000:5e:00.0", rate_gbps=100, congestion=False)
    fx.add_pci("0000:9e:00.0", numa=1)
    fx.add_rdma_port("efa_0", pci="0000:9e:00.0", rate_gbps=100, congestion=False)
    hw = fx.port_path("irdma0") / "hw_counters"
    for name, value in (("RxECNMrkd", 5), ("cnpSent", 6), ("cnpHandled", 7), ("cnpIgnored", 0)):
        (hw / name).write_text(f"{value}\n")
    hw = fx.port_path("efa_0") / "hw_counters"
    for name, value in (("rx_drops", 3), ("retrans_timeout_events", 2), ("tx_bytes", 9)):
        (hw / name).write_text(f"{value}\n")
    h = await harness().start()
    await h.cycle()
    assert h.value("ecn_marked_packets", "irdma0", "1") == 5.0
    assert h.value("cnp_sent_packets", "irdma0", "1") == 6.0
    assert h.value("cnp_handled_packets", "irdma0", "1") == 7.0
    assert h.now("congestion_counters_present")[("irdma0", "1")] == 1.0
    assert h.value("drops", "efa_0", "1", "rx_drops") == 3.0
    assert h.value("rdma_transport_events", "efa_0", "1", "retrans_timeout_events") == 2.0
