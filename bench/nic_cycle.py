"""CPU cost of one NIC collection cycle (8 ports, ~60 sysfs counters each) vs ``cat``.

Run: ``.venv/bin/python bench/nic_cycle.py [cycles] [--results FILE]``

Builds a fixture tree of 8 ConnectX RoCE ports (21 ``counters/`` + 29
``hw_counters/`` + state/rate files each, congestion counters included) in a
temporary directory, then measures in this one process:

* ``collector``  one ``collect_sync()`` (sysfs only) — the thing we ship;
* ``+ store``    the same plus ``SnapshotStore.ingest`` (what the daemon pays);
* ``+ ethtool``  plus ``ethtool -S`` dumps of 8 netdevs parsed from text (demo path);
* ``python open/read/close``  a naive per-file read of the same files;
* ``cat``        one ``cat`` process reading the same files (user+sys of the child).

and, when this machine has an interface with driver statistics, the ioctl
against the ``ethtool -S`` program for that interface. Figures are ratios
against ``cat`` from the same run; the budget (DESIGN.md) is the whole node
daemon under 1 % of one core at 1 s polling, for 8 NICs among everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.collectors.nic._ethtool import IoctlEthtool
from fabricwatch.collectors.nic._settings import NicSettings
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

PORTS = 8
BUDGET_CPU_PER_S = 0.01  # the whole daemon: 1 % of one core


def build_tree(root: Path) -> tuple[NicFixture, list[str]]:
    fx = NicFixture(root / "sys", root / "ethtool")
    for i in range(PORTS):
        pci = f"0000:{0x18 + 0x10 * i:02x}:00.0"
        fx.add_pci(pci, numa=i // 4, switch=f"sw{i}")
        fx.add_gpu(f"0000:{0x19 + 0x10 * i:02x}:00.0", numa=i // 4, switch=f"sw{i}")
        fx.add_netdev(f"eth{i}", pci=pci)
        fx.add_rdma_port(f"mlx5_{i}", pci=pci, netdev=f"eth{i}", rate_gbps=400)
        fx.add_ethtool(f"eth{i}", mlx5_ethtool_names((3,)))
    files = sorted(
        str(p)
        for p in (root / "sys" / "class" / "infiniband").rglob("*")
        if p.is_file()
        and p.parent.name in ("counters", "hw_counters", "1")
        and p.name != "lifespan"
    )
    return fx, files


def cpu_per_call(fn: Callable[[], object], n: int) -> float:
    fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n


def cat_cpu(files: list[str], n: int) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n


def main() -> None:
    ap = argparse.ArgumentParser(description="NIC collector cycle CPU cost vs cat")
    ap.add_argument("cycles", type=int, nargs="?", default=300)
    add_results_option(ap)
    args = ap.parse_args()
    cycles: int = args.cycles
    with tempfile.TemporaryDirectory(prefix="nicbench-") as tmp:
        fx, files = build_tree(Path(tmp))
        clock = [0.0]

        def mono() -> float:
            return clock[0]

        def tick(fn: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                clock[0] += 1.0  # one second per cycle, as the daemon polls
                return fn()

            return run

        def make(ethtool: bool) -> NicCollector:
            table: dict[str, object] = {"ethtool": False}
            if ethtool:
                table = {"ethtool_stats_dir": str(fx.ethtool_dir)}
            s = build(NicSettings, table)
            c = NicCollector(s, CollectorEnv(sys_root=fx.sys_root, monotonic=mono))
            asyncio.run(c.start())
            return c

        plain = make(ethtool=False)
        store = SnapshotStore()
        store.register("nic", plain.metrics())
        with_et = make(ethtool=True)
        n_readings = len(plain.collect_sync())

        def with_store() -> None:
            store.ingest("nic", plain.collect_sync(), clock[0])

        def naive() -> None:
            for f in files:
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.read(fd, 128)
                finally:
                    os.close(fd)

        t_cat = cat_cpu(files, max(20, cycles // 5))
        rows = [
            ("collector", "collector (sysfs)", cpu_per_call(tick(plain.collect_sync), cycles)),
            ("collector_store", "collector + store", cpu_per_call(tick(with_store), cycles)),
            (
                "collector_ethtool",
                "collector + ethtool dumps",
                cpu_per_call(tick(with_et.collect_sync), cycles),
            ),
            ("python_read", "python open/read/close", cpu_per_call(naive, cycles)),
            ("cat", "cat (child user+sys)", t_cat),
        ]
        print(f"NIC cycle: {PORTS} ports, {len(files)} sysfs files, {n_readings} readings/cycle")
        print(f"{'what':30} {'ms/cycle':>9} {'x cat':>7} {'% core @1Hz':>12}")
        for _, name, t in rows:
            print(f"{name:30} {t * 1e3:9.3f} {t / t_cat:7.2f} {t * 100:11.3f}%")
        print("budget: whole node daemon < 1 % of one core at 1 s polling (DESIGN.md)")
    figures: dict[str, object] = {
        "cycles": cycles,
        "ports": PORTS,
        "files": len(files),
        "readings": n_readings,
        "budget_cpu_share": BUDGET_CPU_PER_S,
        "rows": {
            key: {"cpu_ms_per_cycle": t * 1e3, "cat_ratio": t / t_cat, "cpu_share": t}
            for key, _, t in rows
        },
    }

    ioctl = ethtool_ioctl(cycles)
    if ioctl is not None:
        figures["ethtool_ioctl_ratio"] = ioctl
    write_results(args.results, figures)


def ethtool_ioctl(cycles: int) -> float | None:
    """Our ioctl against the ``ethtool -S`` program on this machine's first
    interface with driver statistics (``None`` when there is none)."""
    names = sorted(p.name for p in Path("/sys/class/net").iterdir())
    ifname = next((n for n in names if _has_stats(n)), None)
    if not ifname or not shutil.which("ethtool"):
        return None
    reader = IoctlEthtool()
    t_ioctl = cpu_per_call(lambda: reader.stats(ifname), cycles)
    t_bin = _child_cpu(["ethtool", "-S", ifname], max(20, cycles // 5))
    print(
        f"ethtool ioctl on {ifname} ({len(reader.stats(ifname))} stats): "
        f"{t_ioctl * 1e6:.1f} us vs 'ethtool -S' {t_bin * 1e6:.1f} us "
        f"(ratio {t_ioctl / t_bin:.3f})"
    )
    reader.close()
    return t_ioctl / t_bin


def _has_stats(name: str) -> bool:
    reader = IoctlEthtool()
    try:
        return bool(reader.stats(name))
    except Exception:  # noqa: BLE001 - any failure just means "not this one"
        return False
    finally:
        reader.close()


def _child_cpu(argv: list[str], n: int) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n


if __name__ == "__main__":
    main()
