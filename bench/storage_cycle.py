"""CPU cost of one storage collection cycle vs ``cat``, and the probe's own overhead.

Run: ``.venv/bin/python bench/storage_cycle.py [cycles] [--results FILE]``

Builds a fixture procfs of a GPU node (8 NVMe drives with partitions, an md
RAID, loop devices; 40 mounts of which 2 are NFS checkpoint targets with the
full NFSv3 / NFSv4.1 per-op tables) and measures, in this one process:

* ``collector``   one ``collect()`` with 2 configured paths (probes off);
* ``+ store``     the same plus ``SnapshotStore.ingest`` (what the daemon pays);
* ``python read`` reading the same three files with open/read/close;
* ``cat``         one ``cat`` process reading the same files (user+sys of the child);

then the same cycle on this machine's real ``/proc``, and the probe: CPU of
one 1 MiB write+fsync+unlink probe (process CPU) against ``dd ... conv=fsync``
writing the same 1 MiB (child CPU). Figures are ratios from the same run; the
budget (DESIGN.md) is the whole daemon under 1 % of one core at 1 s polling
with 2 storage paths among everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.storage import FACTORY
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._metrics import NAME
from fabricwatch.collectors.storage._probe import aligned_buffer, write_probe
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

BUDGET_CPU_PER_S = 0.01  # the whole daemon: 1 % of one core
PROBES = 20
FIXTURE = "25 block devices, 40 mounts, 2 NFS mounts with full per-op tables, 2 paths"
NFS_OPS_V3 = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
]
NFS_OPS_V4 = [
    "NULL",
    "READ",
    "WRITE",
    "COMMIT",
    "OPEN",
    "OPEN_CONFIRM",
    "OPEN_NOATTR",
    "OPEN_DOWNGRADE",
    "CLOSE",
    "SETATTR",
    "FSINFO",
    "RENEW",
    "SETCLIENTID",
    "SETCLIENTID_CONFIRM",
    "LOCK",
    "LOCKT",
    "LOCKU",
    "ACCESS",
    "GETATTR",
    "LOOKUP",
    "LOOKUP_ROOT",
    "REMOVE",
    "RENAME",
    "LINK",
    "SYMLINK",
    "CREATE",
    "PATHCONF",
    "STATFS",
    "READLINK",
    "READDIR",
    "SERVER_CAPS",
    "DELEGRETURN",
    "GETACL",
    "SETACL",
    "FS_LOCATIONS",
    "RELEASE_LOCKOWNER",
    "SECINFO",
    "FSID_PRESENT",
    "EXCHANGE_ID",
    "CREATE_SESSION",
    "DESTROY_SESSION",
    "SEQUENCE",
    "GET_LEASE_TIME",
    "RECLAIM_COMPLETE",
    "LAYOUTGET",
    "GETDEVICEINFO",
    "LAYOUTCOMMIT",
    "LAYOUTRETURN",
    "SECINFO_NO_NAME",
    "TEST_STATEID",
    "FREE_STATEID",
    "GETDEVICELIST",
    "BIND_CONN_TO_SESSION",
    "DESTROY_CLIENTID",
    "SEEK",
    "ALLOCATE",
    "DEALLOCATE",
    "LAYOUTSTATS",
    "CLONE",
    "COPY",
    "OFFLOAD_CANCEL",
    "LOOKUPP",
    "LAYOUTERROR",
]


def _dline(major: int, minor: int, name: str, k: int) -> str:
    vals = [k * 101, 3, k * 8000, k * 7, k * 2003, 9, k * 99000, k * 31, 1, k * 17, k * 40]
    vals += [k, 0, k * 8, 1, k * 3, k * 2]
    return f"{major:4d} {minor:7d} {name} " + " ".join(map(str, vals))


def _mountstats_block(dev: str, mnt: str, fstype: str, ops: list[str], k: int) -> str:
    vers = "3" if fstype == "nfs" else "4.1"
    lines = [
        f"device {dev} mounted on {mnt} with fstype {fstype} statvers=1.1",
        f"\topts:\trw,vers={vers},rsize=1048576,wsize=1048576,hard,proto=tcp,timeo=600,"
        "retrans=2,sec=sys,addr=10.0.0.5",
        "\tage:\t1000",
        "\tcaps:\tcaps=0x3fcf,wtmult=4096,dtsize=1048576,bsize=0,namlen=255",
        "\tsec:\tflavor=1,pseudoflavor=1",
        "\tevents:\t" + " ".join(str(k * i) for i in range(27)),
        f"\tbytes:\t{k} {k * 1000} 0 0 {k} {k * 1000} 1 {k}",
        f"\tRPC iostats version: 1.1  p/v: 100003/{vers[0]} (nfs)",
        "\txprt:\ttcp 0 1 1 0 9 1995542 1995542 0 3312331 0 64 0 0",
        "\tper-op statistics",
    ]
    lines += [f"\t{op:>12}: {k} {k} 0 {k * 140} {k * 120} 1 {k * 3} {k * 4} 0" for op in ops]
    return "\n".join(lines) + "\n\n"


def write_proc(root: Path, k: int) -> None:
    (root / "self").mkdir(parents=True, exist_ok=True)
    disk = []
    for i in range(8):
        disk.append(_dline(259, i * 2, f"nvme{i}n1", k + i))
        disk.append(_dline(259, i * 2 + 1, f"nvme{i}n1p1", k + i))
    disk.append(_dline(9, 0, "md0", k))
    disk += [_dline(7, i, f"loop{i}", 0) for i in range(8)]
    (root / "diskstats").write_text("\n".join(disk) + "\n")
    mounts = [
        "27 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw",
        "41 27 9:0 / /raid rw,noatime shared:30 - xfs /dev/md0 rw",
        "52 27 0:48 / /mnt/ckpt rw,relatime shared:40 - nfs 10.0.0.5:/ckpt rw,vers=3,addr=10.0.0.5",
        "53 27 0:49 / /mnt/ckpt4 rw,relatime shared:41 - nfs4 10.0.0.6:/ckpt rw,vers=4.1",
    ]
    mounts += [
        f"{100 + i} 27 0:{100 + i} / /run/k8s/pod{i}/volume rw - tmpfs tmpfs rw" for i in range(36)
    ]
    (root / "self" / "mountinfo").write_text("\n".join(mounts) + "\n")
    stats = ["device /dev/nvme0n1p1 mounted on / with fstype ext4\n"]
    stats.append(_mountstats_block("10.0.0.5:/ckpt", "/mnt/ckpt", "nfs", NFS_OPS_V3, k))
    stats.append(_mountstats_block("10.0.0.6:/ckpt", "/mnt/ckpt4", "nfs4", NFS_OPS_V4, k))
    stats += [
        f"device tmpfs mounted on /run/k8s/pod{i}/volume with fstype tmpfs\n" for i in range(36)
    ]
    (root / "self" / "mountstats").write_text("".join(stats))


def cpu() -> float:
    return time.process_time()


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cycle_cost(
    proc_root: Path, paths: list[dict[str, object]], cycles: int, rewrite: bool
) -> tuple[float, float]:
    settings = build(FACTORY.settings, {"paths": paths})
    c = FACTORY.build(settings, CollectorEnv(node="bench", proc_root=proc_root))
    assert isinstance(c, StorageCollector)
    store = SnapshotStore()
    store.register(NAME, c.metrics())
    loop = asyncio.new_event_loop()
    loop.run_until_complete(c.start())
    alone = 0.0
    with_store = 0.0
    for i in range(cycles):
        if rewrite:
            write_proc(proc_root, 1000 + i * 7)
        t0 = cpu()
        readings = loop.run_until_complete(c.collect())
        t1 = cpu()
        store.ingest(NAME, readings, time.monotonic())
        t2 = cpu()
        alone += t1 - t0
        with_store += t2 - t0
    loop.run_until_complete(c.close())
    loop.close()
    return alone / cycles, with_store / cycles


def probe_cost(tmp: str) -> tuple[float, float, float]:
    """(probe CPU s, probe wall s, ``dd conv=fsync`` child CPU s), each per 1 MiB probe."""
    buf = aligned_buffer(1 << 20)
    t0, w0 = cpu(), time.perf_counter()
    for i in range(PROBES):
        res = write_probe(Path(tmp), f".p{i}", 1 << 20, buf, direct=False)
        assert res.reason is None, res.error
    probe_cpu = (cpu() - t0) / PROBES
    probe_wall = (time.perf_counter() - w0) / PROBES
    c0 = child_cpu()
    for i in range(PROBES):
        subprocess.run(
            [
                "dd",
                "if=/dev/zero",
                f"of={tmp}/dd{i}",
                "bs=1M",
                "count=1",
                "conv=fsync",
                "status=none",
            ],
            check=True,
        )
    return probe_cpu, probe_wall, (child_cpu() - c0) / PROBES


def main() -> None:
    ap = argparse.ArgumentParser(description="storage collector cycle CPU cost vs cat")
    ap.add_argument("cycles", type=int, nargs="?", default=300)
    add_results_option(ap)
    args = ap.parse_args()
    cycles: int = args.cycles
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        write_proc(root, 1000)
        files = [root / "diskstats", root / "self" / "mountinfo", root / "self" / "mountstats"]
        paths: list[dict[str, object]] = [
            {"name": "ckpt", "path": "/mnt/ckpt4/run", "probe": False},
            {"name": "local", "path": "/raid/ckpt", "probe": False},
        ]
        coll, coll_store = cycle_cost(root, paths, cycles, rewrite=True)
        t0 = cpu()
        for _ in range(cycles):
            for f in files:
                with f.open("rb") as fh:
                    fh.read()
        py = (cpu() - t0) / cycles
        reps = max(20, cycles // 5)
        c0 = child_cpu()
        for _ in range(reps):
            subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        cat = (child_cpu() - c0) / reps
        real, real_store = cycle_cost(
            Path("/proc"), [{"name": "tmp", "path": tmp, "probe": False}], cycles, rewrite=False
        )
        probe_cpu, probe_wall, dd = probe_cost(tmp)

    def us(x: float) -> str:
        return f"{x * 1e6:9.1f} us"

    print(f"storage collection cycle, {cycles} cycles (fixture: {FIXTURE})")
    print(f"  cat (child user+sys)   {us(cat)}   1.00x")
    print(f"  python open/read/close {us(py)}   {py / cat:5.2f}x")
    print(f"  collector              {us(coll)}   {coll / cat:5.2f}x")
    print(f"  collector + store      {us(coll_store)}   {coll_store / cat:5.2f}x")
    print(f"  real /proc (this host) {us(real)}   {real / cat:5.2f}x   (+ store {us(real_store)})")
    share = coll_store / 1.0 * 100
    print(
        f"  at 1 s polling: {share:.3f} % of one core "
        f"(budget: whole daemon < 1 %; storage uses {share / 1.0 * 100:.1f} % of it)"
    )
    print(f"probe, 1 MiB write + fsync + unlink, {PROBES} runs")
    print(f"  dd conv=fsync (child)  {us(dd)}   1.00x")
    print(
        f"  probe (process CPU)    {us(probe_cpu)}   {probe_cpu / dd:5.2f}x   "
        f"(wall {probe_wall * 1e3:.2f} ms)"
    )
    print(
        f"  at a 10 s probe interval per path, 2 paths: "
        f"{2 * probe_cpu / 10 * 100:.4f} % of one core"
    )
    rows = {"cat": cat, "python_read": py, "collector": coll, "collector_store": coll_store}
    rows |= {"real_proc": real, "real_proc_store": real_store}
    write_results(args.results, figures(cycles, len(files), rows, (probe_cpu, probe_wall, dd)))


def figures(
    cycles: int, files: int, rows: dict[str, float], probe: tuple[float, float, float]
) -> dict[str, object]:
    """What ``main`` printed, for ``--results``: CPU s per cycle by row, and the probe's."""
    cat, coll_store = rows["cat"], rows["collector_store"]
    probe_cpu, probe_wall, dd = probe
    return {
        "cycles": cycles,
        "describe": FIXTURE,
        "files": files,
        "budget_cpu_share": BUDGET_CPU_PER_S,
        "cpu_share": coll_store,
        "budget_ratio": coll_store / BUDGET_CPU_PER_S,
        "rows": {k: {"us_per_cycle": t * 1e6, "cat_ratio": t / cat} for k, t in rows.items()},
        "probe": {
            "runs": PROBES,
            "dd_us": dd * 1e6,
            "cpu_us": probe_cpu * 1e6,
            "dd_ratio": probe_cpu / dd,
            "wall_ms": probe_wall * 1e3,
            "cpu_share_2_paths_10_s": 2 * probe_cpu / 10,
        },
    }


if __name__ == "__main__":
    main()
