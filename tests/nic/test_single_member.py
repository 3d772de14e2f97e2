"""A port with one netdev emits its driver statistics straight into the columns; a
bond sums its members first. The same statistics give the same series either way."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fabricwatch.readings import Batch
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names

from .conftest import Clock, Harness

GBPS100 = 100e9


def _node(root: Path, *, bond: bool) -> NicFixture:
    fx = NicFixture(root / "sys", root / "ethtool")
    fx.add_pci("0000:3b:00.0", numa=0)
    fx.add_netdev("eth0", pci="0000:3b:00.0")
    netdev = "eth0"
    if bond:
        fx.add_netdev("eth1", pci="0000:3b:00.0")
        fx.add_bond("bond0", ("eth0", "eth1"))
        fx.add_ethtool("eth1", mlx5_ethtool_names((3,)))  # all zero: adds nothing to the sums
        netdev = "bond0"
    fx.add_rdma_port("mlx5_0", pci="0000:3b:00.0", netdev=netdev, rate_gbps=100)
    fx.add_ethtool("eth0", mlx5_ethtool_names((3,)))
    return fx


def _steps(fx: NicFixture, k: int) -> None:
    """Cycle ``k``'s change to eth0: traffic, pauses, a pinned counter, a reset, a
    layout change and a garbage dump."""
    if k in (1, 2, 3, 6, 7, 9, 10):
        fx.advance_pause("eth0", 3, 0.2 * k, GBPS100)
        fx.advance_stat("eth0", "rx_discards_phy", 7 * k)
        fx.advance_stat("eth0", "rx_prio3_marked", 3)
    elif k == 4:
        fx.set_stat("eth0", "rx_prio3_cong_discard", 2**32 - 1)  # pinned at its maximum
    elif k == 5:
        for name in mlx5_ethtool_names((3,)):
            fx.set_stat("eth0", name, 0)  # counters cleared: a reset
    elif k == 8:
        fx.set_stat("eth0", "rx_prio5_pause", 9)  # a new name: another layout
    elif k == 11:
        (fx.ethtool_dir / "eth0").write_text("NIC statistics:\n     rx_prio3_pau")  # torn


def _ethtool_series(batch: Batch) -> list[tuple[str, tuple[str, ...], float]]:
    """The series of the summed driver statistics (pause ratios are per member: a bond's
    idle member gives a 0 ratio where a lone netdev just reset has none)."""
    out = [
        (c.name, labels, value)
        for c in batch.columns
        for labels, value in zip(c.labels, c.values, strict=True)
        if c.name.startswith(("fabricwatch_nic_pfc", "fabricwatch_nic_link_pause"))
        or c.name.startswith(("fabricwatch_nic_priority", "fabricwatch_nic_pause_storm"))
        or (
            c.name == "fabricwatch_nic_drops"
            and labels[-1] in ("rx_discards_phy", "tx_discards_phy")
        )
        or c.name == "fabricwatch_nic_link_down_events"
    ]
    return sorted(out)


def test_single_member_equals_bond_sums(tmp_path: Path) -> None:
    async def run(bond: bool) -> list[list[tuple[str, tuple[str, ...], float]]]:
        fx = _node(tmp_path / ("bond" if bond else "one"), bond=bond)
        clock = Clock()
        h = await Harness(fx, clock, {"gpu_locality": False}).start()
        got = []
        for k in range(13):
            _steps(fx, k)
            clock.tick()
            batch = h.collector.collect_sync()
            assert isinstance(batch, Batch)
            got.append(_ethtool_series(batch))
        await h.collector.close()
        return got

    one, bonded = asyncio.run(run(False)), asyncio.run(run(True))
    assert one == bonded
    assert one[11] == []  # a garbage dump: no driver statistics that cycle
    assert len(one[9]) > len(one[3])  # the new name's series
