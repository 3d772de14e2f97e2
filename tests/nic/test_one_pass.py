"""The steady one-pass cycle gives exactly what the port-by-port cycle gives, through
every fault the port-by-port cycle handles, and hands back to it when anything moves."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.readings import Batch
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names

from .conftest import Clock, Harness

GBPS100 = 100e9
LO_RX = Path("/sys/class/net/lo/statistics/rx_bytes")


def _node(fx: NicFixture) -> None:
    """Two RoCE ports with driver statistics and one InfiniBand port without a netdev."""
    for i, dev in ((0, "mlx5_0"), (2, "mlx5_2")):
        pci = f"0000:{0x3B + i:02x}:00.0"
        fx.add_pci(pci, numa=0)
        fx.add_netdev(f"eth{i}", pci=pci)
        fx.add_rdma_port(dev, pci=pci, netdev=f"eth{i}", rate_gbps=100)
        fx.add_ethtool(f"eth{i}", mlx5_ethtool_names((3,)))
    fx.add_pci("0000:5e:00.0", numa=1)
    fx.add_rdma_port("mlx5_1", pci="0000:5e:00.0", link_layer="InfiniBand", rate_gbps=400)


def _traffic(fx: NicFixture, k: int) -> None:
    fx.advance("mlx5_0", "1", "port_xmit_data", 1000 * k + 1)
    fx.advance("mlx5_0", "1", "np_cnp_sent", 3)
    fx.advance("mlx5_2", "1", "out_of_sequence", 2, bits=32)
    if not 36 <= k <= 37:  # unplugged then
        fx.advance("mlx5_1", "1", "port_xmit_wait", 1 << 30, bits=32)  # wraps every 4th cycle
    fx.advance_pause("eth0", 3, 0.01 * (k % 7), GBPS100)
    fx.advance_pause("eth2", 3, 0.5, GBPS100, direction="tx")
    fx.advance_stat("eth2", "rx_discards_phy", k % 3)


def _fault(fx: NicFixture, k: int) -> None:
    """Cycle ``k``'s change beyond the traffic: each a case the full cycle handles."""
    steps: dict[int, Callable[[], object]] = {
        4: lambda: fx.set_state("mlx5_0", "1", 1),
        6: lambda: fx.set_state("mlx5_0", "1", 4),
        8: lambda: fx.set("mlx5_2", "1", "np_cnp_sent", "0xdeadbeef"),
        9: lambda: fx.set("mlx5_2", "1", "np_cnp_sent", 40),
        11: lambda: fx.set("mlx5_0", "1", "symbol_error", 65535),  # pinned at its maximum
        13: lambda: fx.set("mlx5_0", "1", "symbol_error", 0),
        15: lambda: fx.set("mlx5_2", "1", "out_of_buffer", "N/A (no PMA)"),
        16: lambda: fx.set("mlx5_2", "1", "out_of_buffer", ""),  # torn
        17: lambda: fx.set("mlx5_2", "1", "out_of_buffer", 12),
        19: lambda: fx.remove("mlx5_0", "1", "np_ecn_marked_roce_packets"),
        21: lambda: fx.set("mlx5_0", "1", "np_ecn_marked_roce_packets", 9),
        23: lambda: (fx.ethtool_dir / "eth0").write_text("NIC statistics:\n     rx_prio3_pau"),
        24: lambda: fx.add_ethtool("eth0", mlx5_ethtool_names((3,))),
        26: lambda: fx.set_stat("eth2", "rx_prio3_cong_discard", 2**32 - 1),  # pinned
        27: lambda: fx.set_stat("eth2", "rx_prio3_cong_discard", 5),
        29: lambda: fx.set_stat("eth0", "rx_prio5_pause", 1),  # another layout
        31: (fx.ethtool_dir / "eth2").unlink,
        33: lambda: fx.add_ethtool("eth2", mlx5_ethtool_names((3,))),
        35: lambda: fx.unplug("mlx5_1"),
        37: lambda: fx.replug("mlx5_1"),
        39: lambda: fx.set("mlx5_1", "1", "port_rcv_data", "12 34"),  # two numbers
        40: lambda: fx.set("mlx5_1", "1", "port_rcv_data", 77),
        42: lambda: _new_port_dir(fx),
    }
    step = steps.get(k)
    if step is not None:
        step()


def _new_port_dir(fx: NicFixture) -> None:
    """The port directory replaced under the device (which stays listed)."""
    shutil.rmtree(fx.port_path("mlx5_2", "1"))
    fx.add_rdma_port("mlx5_2", pci="0000:3d:00.0", netdev="eth2", rate_gbps=100)


def _shape(batch: Batch) -> tuple[list[Any], list[Any]]:
    cols = [
        (c.name, c.labels, list(c.values), c.epoch, list(c.epochs or ()), c.ts, c.source)
        for c in batch.columns
    ]
    return list(batch.readings), cols


async def _pair(
    fx: NicFixture, clock: Clock, extra: dict[str, Any] | None = None
) -> tuple[NicCollector, NicCollector]:
    table = {"gpu_locality": False, "rescan_interval": "7s", **(extra or {})}
    one, full = (Harness(fx, clock, table) for _ in range(2))
    await one.start()
    await full.start()
    full.collector._one_pass = False
    return one.collector, full.collector


def _open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def _count_full_cycles(c: NicCollector) -> list[int]:
    calls = [0]
    inner = c._full_cycle

    def counted() -> Batch:
        calls[0] += 1
        return inner()

    c._full_cycle = counted  # type: ignore[method-assign]
    return calls


def test_one_pass_equals_port_by_port_through_faults(fx: NicFixture, clock: Clock) -> None:
    _node(fx)

    async def run() -> None:
        one, full = await _pair(fx, clock)
        fulls = _count_full_cycles(one)
        for k in range(46):
            _traffic(fx, k)
            _fault(fx, k)
            clock.tick()
            a, b = one.collect_sync(), full.collect_sync()
            assert _shape(a) == _shape(b), f"cycle {k}"
        # Most cycles took the one pass; each fault (and each rescan) cost one full cycle.
        assert fulls[0] < 40
        await one.close()
        await full.close()

    asyncio.run(run())


@pytest.mark.parametrize("extra", [{}, {"max_open_files": 60}])
def test_one_pass_with_few_descriptors_and_a_name_given_twice(
    fx: NicFixture, clock: Clock, extra: dict[str, Any]
) -> None:
    """Ports partly over the descriptor budget, and a dump that names a statistic twice:
    the same as port by port (those ports stay on the full cycle)."""
    _node(fx)
    dump = fx.ethtool_dir / "eth2"

    async def run() -> None:
        one, full = await _pair(fx, clock, extra)
        fulls = _count_full_cycles(one)
        for k in range(12):
            _traffic(fx, k)
            if k == 4:
                text = dump.read_text()
                dump.write_text(text + "     rx_prio3_pause: 77\n")  # the same name again
            if k == 8:
                fx.add_ethtool("eth2", mlx5_ethtool_names((3,)))
            clock.tick()
            a, b = one.collect_sync(), full.collect_sync()
            assert _shape(a) == _shape(b), f"cycle {k}"
        # Over the budget nothing takes the one pass; within it the doubled name does
        # (same names, its last value): full cycles only for the first and the rescan.
        assert fulls[0] == (12 if extra else 2)
        await one.close()
        await full.close()

    asyncio.run(run())


def test_steady_cycles_take_the_one_pass(fx: NicFixture, clock: Clock) -> None:
    _node(fx)

    async def run() -> None:
        fds = _open_fds()
        one, full = await _pair(fx, clock)
        fulls = _count_full_cycles(one)
        for k in range(6):  # within one rescan interval
            _traffic(fx, k)
            clock.tick()
            one.collect_sync()
        assert fulls[0] == 1  # the first cycle reads port by port and builds the layout
        await one.close()
        await full.close()
        assert _open_fds() == fds  # the port directories too

    asyncio.run(run())


@pytest.fixture
def enodev_on() -> Iterator[set[int]]:
    """Descriptors whose ``os.pread`` fails with ENODEV, as a removed sysfs attribute's does."""
    gone: set[int] = set()
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        if fd in gone:
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
        return real(fd, n, offset)

    os.pread = pread
    try:
        yield gone
    finally:
        os.pread = real


def test_enodev_on_a_held_file_drops_and_reopens_the_port(
    fx: NicFixture, clock: Clock, enodev_on: set[int]
) -> None:
    """A device reset under held descriptors: the port reads as down that cycle, then comes
    back through fresh descriptors with a new epoch, the same in both cycles."""
    _node(fx)

    async def run() -> None:
        one, full = await _pair(fx, clock)
        for k in range(8):
            _traffic(fx, k)
            if k == 3:
                for c in (one, full):
                    held = c._ports[("mlx5_1", "1")].reader.held()
                    assert held is not None
                    enodev_on.update(held.counter_fds[:1])
            clock.tick()
            a, b = one.collect_sync(), full.collect_sync()
            enodev_on.clear()  # the reopened files may get the same numbers
            assert _shape(a) == _shape(b), f"cycle {k}"
            up = {r.labels: r.value for r in a.readings if r.name == "fabricwatch_nic_link_up"}
            assert up[("mlx5_1", "1")] == (0.0 if k == 3 else 1.0)
        assert one._ports[("mlx5_1", "1")].epoch == 1
        assert one._layout is not None  # back on the one pass
        await one.close()
        await full.close()

    asyncio.run(run())


@pytest.mark.skipif(not LO_RX.exists(), reason="no /sys/class/net/lo here")
def test_held_sysfs_attribute_rereads_fresh_values() -> None:
    """What the one pass relies on: a sysfs attribute kept open and read with
    ``pread(fd, n, 0)`` is regenerated by the kernel at every read."""
    fd = os.open(LO_RX, os.O_RDONLY)
    try:
        before = int(os.pread(fd, 128, 0))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
            rx.bind(("127.0.0.1", 0))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                for _ in range(8):
                    tx.sendto(b"x" * 1000, rx.getsockname())
        after = int(os.pread(fd, 128, 0))
        assert after >= before + 8000
    finally:
        os.close(fd)
