"""The storage collector end to end on fixture proc trees, through the snapshot store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fabricwatch import signals as fam
from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.storage import FACTORY
from fabricwatch.collectors.storage import _metrics as sc
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._settings import StorageSettings
from fabricwatch.config import parse_config
from fabricwatch.errors import ConfigError
from fabricwatch.readings import MetricKind, Reading
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore

from .conftest import FakeClock, ProcTree, data

FIELDS = (
    *("reads", "rmerged", "rsect", "rms", "writes", "wmerged", "wsect", "wms"),
    *("inflight", "ioms", "wioms", "disc", "dmerged", "dsect", "dms", "flush", "flms"),
)


def dline(major: int, minor: int, name: str, **v: int) -> str:
    """A 20-field diskstats line; unnamed counters are 0."""
    return f"{major:4d} {minor:7d} {name} " + " ".join(str(v.get(f, 0)) for f in FIELDS)


def settings(**kw: Any) -> StorageSettings:
    return build(StorageSettings, kw, prefix="collectors.storage")


class Harness:
    """A collector on a fixture proc tree, fed through a real SnapshotStore."""

    def __init__(self, proc: ProcTree, clock: FakeClock, sys_root: Path, **kw: Any) -> None:
        env = CollectorEnv(
            node="n1", proc_root=proc.root, sys_root=sys_root, monotonic=clock, wall=clock
        )
        c = FACTORY.build(settings(**kw), env)
        assert isinstance(c, StorageCollector)
        self.collector: StorageCollector = c
        self.store = SnapshotStore()
        self.store.register(sc.NAME, self.collector.metrics())
        self.clock = clock
        self.last: list[Reading] = []
        asyncio.run(self.collector.start())

    def cycle(self, advance: float = 1.0) -> list[Reading]:
        self.clock.advance(advance)
        self.last = list(asyncio.run(self.collector.collect()))
        res = self.store.ingest(sc.NAME, self.last, self.clock())
        assert res.rejected == 0, res.reasons
        return self.last

    def value(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, labels)
        return None if s is None else s.value

    def rate(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, labels)
        return None if s is None or s.rate is None else s.rate.per_second

    def labels(self, name: str) -> set[tuple[str, ...]]:
        return {s.labels for s in self.store.family(name)}

    def requests(self, path: str) -> tuple[float, float]:
        """(writes/s, bytes per write) of a checkpoint path."""
        ops = self.rate(fam.ST_WRITE_OPS.name, path)
        written = self.rate(fam.ST_WRITE_BYTES.name, path)
        assert ops is not None and written is not None
        return ops, written / ops


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    part = root / "dev" / "block" / "259:1"
    part.mkdir(parents=True)
    (part / "partition").write_text("1\n")
    return root


# --- settings and registry ---------------------------------------------------------


def test_registered_and_enabled_by_default() -> None:
    reg = builtin_registry()
    assert reg["storage"] is FACTORY
    cfg = parse_config({}, reg)
    s = cfg.collectors["storage"]
    assert isinstance(s, StorageSettings)
    assert s.enabled and s.paths == []


def test_settings_parse_paths_sizes_and_durations() -> None:
    s = settings(
        paths=[
            {
                "name": "ckpt",
                "path": "/mnt/ckpt",
                "probe_size": "4MiB",
                "probe_interval": "30s",
                "probe_timeout": "2m",
                "o_direct": True,
            }
        ],
        burst_factor=8,
        burst_min_rate="100MiB",
    )
    p = s.paths[0]
    assert (p.name, str(p.path), p.probe_size, p.probe_interval, p.probe_timeout) == (
        "ckpt",
        "/mnt/ckpt",
        4 << 20,
        30.0,
        120.0,
    )
    assert s.burst_factor == 8.0 and s.burst_min_rate == 100 << 20


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"paths": [{"name": "a", "path": "/x", "bogus": 1}]}, "collectors.storage.paths[0].bogus"),
        ({"paths": [{"name": "a"}]}, "absolute directory"),
        ({"paths": [{"name": "a b", "path": "/x"}]}, "name must be"),
        ({"paths": [{"name": "a", "path": "/x"}, {"name": "a", "path": "/y"}]}, "duplicate"),
        (
            {"paths": [{"name": "a", "path": "/x", "o_direct": True, "probe_size": 1000}]},
            "multiple of 4096",
        ),
        ({"paths": [{"name": "a", "path": "/x", "probe_timeout": "0s"}]}, "probe_timeout"),
        ({"device_exclude": "(("}, "not a valid regex"),
        ({"burst_window": 60, "baseline_window": 100}, "twice burst_window"),
        ({"burst_factor": "4"}, "burst_factor"),
    ],
)
def test_settings_are_strict(table: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        settings(**table)


def test_metric_specs_follow_the_conventions() -> None:
    names = [m.name for m in sc.METRICS]
    assert len(names) == len(set(names))
    for m in sc.METRICS:
        assert m.name.startswith("fabricwatch_storage_")
        assert "pid" not in m.labels and "ts" not in m.labels
    # The contract of docs/signals.md.
    contract = {
        "fabricwatch_storage_probe_latency_seconds": (MetricKind.HISTOGRAM, ("path",)),
        "fabricwatch_storage_probe_last_latency_seconds": (MetricKind.GAUGE, ("path",)),
        "fabricwatch_storage_probe_failures": (MetricKind.COUNTER, ("path", "reason")),
        "fabricwatch_storage_write_latency_seconds": (MetricKind.GAUGE, ("path",)),
        "fabricwatch_storage_write_bytes": (MetricKind.COUNTER, ("path",)),
        "fabricwatch_storage_write_burst": (MetricKind.GAUGE, ("path",)),
    }
    by_name = {m.name: m for m in sc.METRICS}
    for name, (kind, labels) in contract.items():
        assert (by_name[name].kind, by_name[name].labels) == (kind, labels), name


# --- block devices -----------------------------------------------------------------


def test_device_rates_latency_utilisation_and_flushes(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(
        dline(
            259,
            0,
            "nvme0n1",
            reads=10,
            writes=100,
            wsect=2000,
            wms=300,
            ioms=1000,
            flush=5,
            flms=10,
        )
    )
    h = Harness(proc, clock, sysfs)
    h.cycle()
    assert h.value(sc.DEV_WRITE_LATENCY.name, "nvme0n1") is None  # needs two samples
    proc.diskstats(
        dline(
            259,
            0,
            "nvme0n1",
            reads=10,
            writes=300,
            wsect=2000 + 4096 * 2,
            wms=300 + 800,
            ioms=1000 + 500,
            flush=9,
            flms=10 + 20,
            inflight=7,
        )
    )
    h.cycle(2.0)
    # 200 writes took 800 ms in total: 4 ms each.
    assert h.value(sc.DEV_WRITE_LATENCY.name, "nvme0n1") == pytest.approx(0.004)
    # 500 ms of I/O in 2 s.
    assert h.value(sc.DEV_UTIL.name, "nvme0n1") == pytest.approx(0.25)
    assert h.value(sc.DEV_FLUSH_LATENCY.name, "nvme0n1") == pytest.approx(0.005)
    assert h.value(sc.DEV_IN_FLIGHT.name, "nvme0n1") == 7
    # Rates come out of the store: 8192 sectors of 512 B in 2 s, 100 writes/s.
    assert h.rate(sc.DEV_WRITE_BYTES.name, "nvme0n1") == pytest.approx(4096 * 2 * 512 / 2)
    assert h.rate(sc.DEV_WRITES.name, "nvme0n1") == pytest.approx(100.0)
    assert h.rate(sc.DEV_WRITE_TIME.name, "nvme0n1") == pytest.approx(0.4)
    # Nothing written in the next interval: latency 0, not a stale value.
    proc.diskstats(
        dline(
            259,
            0,
            "nvme0n1",
            reads=10,
            writes=300,
            wsect=2000 + 4096 * 2,
            wms=1100,
            ioms=1500,
            flush=9,
            flms=30,
        )
    )
    h.cycle()
    assert h.value(sc.DEV_WRITE_LATENCY.name, "nvme0n1") == 0.0
    assert h.value(sc.DEV_UTIL.name, "nvme0n1") == 0.0


def test_32bit_millisecond_fields_wrap(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    near = 2**32 - 1000
    proc.diskstats(dline(8, 0, "sda", writes=10, wsect=80, wms=near, ioms=near))
    h = Harness(proc, clock, sysfs)
    h.cycle()
    proc.diskstats(dline(8, 0, "sda", writes=13, wsect=104, wms=500, ioms=200))
    h.cycle()
    # 1000 + 500 ms across the wrap for 3 writes; 1200 ms busy in 1 s clamps to 1.
    assert h.value(sc.DEV_WRITE_LATENCY.name, "sda") == pytest.approx(0.5)
    assert h.value(sc.DEV_UTIL.name, "sda") == 1.0
    assert h.rate(sc.DEV_WRITE_TIME.name, "sda") == pytest.approx(1.5)
    t = h.value(sc.DEV_WRITE_TIME.name, "sda")
    assert t is not None and t == pytest.approx((near + 1500) / 1000)


def test_formats_14_18_20_all_export(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    for fixture, flush in (
        ("diskstats-4.14.txt", False),
        ("diskstats-4.19.txt", False),
        ("diskstats-6.1.txt", True),
    ):
        proc.diskstats(data(fixture))
        h = Harness(proc, clock, sysfs)
        h.cycle()
        assert ("nvme0n1",) in h.labels(sc.DEV_WRITE_BYTES.name), fixture
        assert (("nvme0n1",) in h.labels(sc.DEV_FLUSHES.name)) is flush, fixture


def test_device_filters(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(data("diskstats-6.1.txt"))
    h = Harness(proc, clock, sysfs)
    h.cycle()
    # zram excluded by name, the partition by sysfs, idle loop1 because it never did I/O.
    assert h.labels(sc.DEV_WRITES.name) == {("loop0",), ("nvme0n1",), ("nvme1n1",), ("sda",)}
    h2 = Harness(
        proc, clock, sysfs, include_partitions=True, include_idle=True, device_exclude="^loop"
    )
    h2.cycle()
    assert h2.labels(sc.DEV_WRITES.name) == {
        ("nvme0n1p1",),
        ("nvme0n1",),
        ("nvme1n1",),
        ("sda",),
        ("zram0",),
    }


def test_hot_remove_and_add_never_gives_negative_or_spiky_rates(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    sda = dline(8, 0, "sda", writes=1000, wsect=10**9)
    sdb = dline(8, 16, "sdb", writes=5000, wsect=5 * 10**9)
    proc.diskstats(sda + "\n" + sdb + "\n")
    h = Harness(proc, clock, sysfs)
    h.cycle()
    proc.diskstats(sda + "\n")  # sdb pulled
    h.cycle()
    assert ("sdb",) not in {r.labels for r in h.last if r.name == sc.DEV_WRITES.name}
    # A new disk takes the name with small counters.
    proc.diskstats(sda + "\n" + dline(8, 16, "sdb", writes=3, wsect=24) + "\n")
    h.cycle()
    rate = h.rate(sc.DEV_WRITE_BYTES.name, "sdb")
    assert rate is None or 0 <= rate < 1e6
    proc.diskstats(sda + "\n" + dline(8, 16, "sdb", writes=13, wsect=104) + "\n")
    h.cycle()
    assert h.rate(sc.DEV_WRITE_BYTES.name, "sdb") == pytest.approx(80 * 512)
    assert h.rate(sc.DEV_WRITES.name, "sdb") == pytest.approx(10)
    # A different device number under the same name is a new device too.
    proc.diskstats(sda + "\n" + dline(8, 32, "sdb", writes=1, wsect=8) + "\n")
    h.cycle()
    rate = h.rate(sc.DEV_WRITES.name, "sdb")
    assert rate is None or 0 <= rate <= 1


# --- paths: block-backed and NFS -------------------------------------------------


def test_path_on_block_device_maps_and_reports(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(dline(259, 2, "nvme1n1", writes=100, wsect=1000, wms=100))
    h = Harness(
        proc,
        clock,
        sysfs,
        paths=[
            {"name": "ckpt", "path": "/scratch/ckpt/job1", "probe": False},
            {"name": "root", "path": "/var/ckpt", "probe": False},
        ],
    )
    h.cycle()
    assert h.collector.path_mount("ckpt") is not None
    assert ("ckpt", "/scratch", "xfs", "nvme1n1") in h.labels(sc.PATH_INFO.name)
    # The root file system's partition backs "root" even though partitions
    # are not exported per device (and it is absent from diskstats here).
    assert ("root", "/", "ext4", "/dev/nvme0n1p1") in h.labels(sc.PATH_INFO.name)
    proc.diskstats(dline(259, 2, "nvme1n1", writes=150, wsect=1000 + 20480, wms=100 + 1000))
    h.cycle(2.0)
    assert h.value(fam.ST_WRITE_LAT.name, "ckpt") == pytest.approx(0.02)
    assert h.rate(fam.ST_WRITE_BYTES.name, "ckpt") == pytest.approx(20480 * 512 / 2)
    assert h.value(fam.ST_WRITE_LAT.name, "root") is None


def test_path_reports_write_requests_so_request_size_is_known(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    """Writes completed per path: bytes / writes is the request size that
    tells a checkpoint's large writes from slow storage's small ones."""
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(dline(259, 2, "nvme1n1", writes=100, wsect=1000, wms=100))
    h = Harness(
        proc, clock, sysfs, paths=[{"name": "ckpt", "path": "/scratch/ckpt/job1", "probe": False}]
    )
    h.cycle()
    assert h.value(fam.ST_WRITE_OPS.name, "ckpt") == 100
    # 50 writes of 1 MiB each (2048 sectors) in 2 s.
    proc.diskstats(dline(259, 2, "nvme1n1", writes=150, wsect=1000 + 50 * 2048, wms=600))
    h.cycle(2.0)
    assert h.requests("ckpt") == pytest.approx((25, 1 << 20))


def test_path_write_requests_survive_a_truncated_diskstats_line(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    good = dline(259, 2, "nvme1n1", writes=100, wsect=1000, wms=100)
    proc.diskstats(good)
    h = Harness(
        proc, clock, sysfs, paths=[{"name": "ckpt", "path": "/scratch/ckpt/job1", "probe": False}]
    )
    h.cycle()
    # Cut mid-line: the device is skipped this cycle (no made-up count).
    proc.diskstats(good.rsplit(" ", 12)[0] + "\n")
    out = h.cycle()
    assert not [r for r in out if r.name == fam.ST_WRITE_OPS.name]
    proc.diskstats(dline(259, 2, "nvme1n1", writes=140, wsect=1000 + 40 * 8, wms=140))
    h.cycle()
    assert h.value(fam.ST_WRITE_OPS.name, "ckpt") == 140
    rate = h.rate(fam.ST_WRITE_OPS.name, "ckpt")
    assert rate is not None and rate > 0


def test_path_on_partition_is_tracked_but_not_exported_per_device(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(data("diskstats-6.1.txt"))
    h = Harness(proc, clock, sysfs, paths=[{"name": "r", "path": "/data", "probe": False}])
    h.cycle()
    assert ("nvme0n1p1",) not in h.labels(sc.DEV_WRITES.name)
    assert ("r", "/", "ext4", "nvme0n1p1") in h.labels(sc.PATH_INFO.name)
    assert h.value(fam.ST_WRITE_BYTES.name, "r") == 3312331440 * 512


def _bump_nfs(
    text: str,
    mount_line: str,
    op: str,
    *,
    d_ops: int,
    d_rtt: int,
    d_exe: int,
    d_server_write: int = 0,
    d_trans: int | None = None,
) -> str:
    """Add deltas to one op line (and the bytes line) of one mount."""
    out, in_mount = [], False
    for raw in text.splitlines():
        line = raw
        if line.startswith("device "):
            in_mount = line == mount_line
        elif in_mount and line.strip().startswith(op + ":"):
            key, rest = line.split(":", 1)
            v = [int(x) for x in rest.split()]
            v[0] += d_ops
            v[1] += d_ops if d_trans is None else d_trans
            v[6] += d_rtt
            v[7] += d_exe
            line = key + ": " + " ".join(map(str, v))
        elif in_mount and line.strip().startswith("bytes:"):
            v = [int(x) for x in line.split(":", 1)[1].split()]
            v[5] += d_server_write
            line = "\tbytes:\t" + " ".join(map(str, v))
        out.append(line)
    return "\n".join(out) + "\n"


V4 = "device filer-a.example:/vol/ckpt mounted on /mnt/ckpt4 with fstype nfs4 statvers=1.1"


def test_nfs_mount_per_op_and_path_latency(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(data("diskstats-6.1.txt"))
    text = data("mountstats-nfs.txt")
    proc.mountstats(text)
    h = Harness(
        proc, clock, sysfs, paths=[{"name": "ckpt", "path": "/mnt/ckpt4/run", "probe": False}]
    )
    h.cycle()
    assert ("ckpt", "/mnt/ckpt4", "nfs4", "filer-a.example:/vol/ckpt") in h.labels(
        sc.PATH_INFO.name
    )
    assert ("/mnt/ckpt4", "filer-a.example:/vol/ckpt", "4.1", "tcp") in h.labels(sc.NFS_INFO.name)
    assert ("/mnt/ckpt v3", "WRITE") in h.labels(sc.NFS_OPS.name)
    assert ("/mnt/ckpt4", "OPEN") not in h.labels(sc.NFS_OPS.name)  # not in nfs_ops
    text = _bump_nfs(
        text, V4, "WRITE", d_ops=400, d_rtt=2000, d_exe=8000, d_server_write=400 << 20, d_trans=403
    )
    proc.mountstats(text)
    h.cycle(2.0)
    # 400 WRITEs: 5 ms round trip, 20 ms execute each; 200 MiB/s to the server.
    assert h.value(sc.NFS_RTT.name, "/mnt/ckpt4", "WRITE") == pytest.approx(0.005)
    assert h.value(sc.NFS_EXECUTE.name, "/mnt/ckpt4", "WRITE") == pytest.approx(0.02)
    assert h.value(fam.ST_WRITE_LAT.name, "ckpt") == pytest.approx(0.02)
    assert h.rate(fam.ST_WRITE_BYTES.name, "ckpt") == pytest.approx((400 << 20) / 2)
    assert h.rate(sc.NFS_OPS.name, "/mnt/ckpt4", "WRITE") == pytest.approx(200)
    assert h.rate(sc.NFS_RETRANS.name, "/mnt/ckpt4", "WRITE") == pytest.approx(1.5)
    # No COMMIT in the interval: average 0, not a stale value.
    assert h.value(sc.NFS_EXECUTE.name, "/mnt/ckpt4", "COMMIT") == 0.0


def test_nfs_path_write_requests_are_its_write_operations(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    proc.diskstats(data("diskstats-6.1.txt"))
    text = data("mountstats-nfs.txt")
    proc.mountstats(text)
    path = [{"name": "ckpt", "path": "/mnt/ckpt4/run", "probe": False}]
    h = Harness(proc, clock, sysfs, paths=path)
    h.cycle()
    text = _bump_nfs(text, V4, "WRITE", d_ops=400, d_rtt=2000, d_exe=8000, d_server_write=100 << 20)
    proc.mountstats(text)
    h.cycle(2.0)
    assert h.requests("ckpt") == pytest.approx((200, 256 << 10))
    # WRITE left out of nfs_ops: no count at all, rather than a wrong one.
    h2 = Harness(proc, clock, sysfs, paths=path, nfs_ops=["READ"])
    h2.cycle()
    assert h2.labels(fam.ST_WRITE_OPS.name) == set()
    assert h2.labels(fam.ST_WRITE_BYTES.name) == {("ckpt",)}


def test_nfs_remount_is_a_reset_not_a_negative_rate(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    info = data("mountinfo.txt")
    proc.mountinfo(info)
    proc.diskstats(data("diskstats-6.1.txt"))
    text = data("mountstats-v1.0.txt").replace("/mnt/old", "/mnt/ckpt4")
    big = data("mountstats-nfs.txt")
    proc.mountstats(big)
    h = Harness(
        proc,
        clock,
        sysfs,
        remap_interval=1.0,
        paths=[{"name": "c", "path": "/mnt/ckpt4", "probe": False}],
    )
    h.cycle()
    # Remounted: new mount id, counters start again from small values.
    proc.mountinfo(info.replace("53 27 0:49", "99 27 0:77"))
    proc.mountstats(text)
    h.cycle()
    h.cycle()
    for name in (sc.NFS_OPS.name, sc.NFS_SENT.name):
        r = h.rate(name, "/mnt/ckpt4", "WRITE")
        assert r is None or r == 0.0
    r = h.rate(fam.ST_WRITE_BYTES.name, "c")
    assert r is None or r == 0.0
    assert h.value(sc.NFS_EXECUTE.name, "/mnt/ckpt4", "WRITE") == 0.0


def test_no_nfs_mounted_skips_mountstats(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    proc.mountinfo("27 1 259:1 / / rw - ext4 /dev/nvme0n1p1 rw\n")
    proc.diskstats(data("diskstats-6.1.txt"))
    # No mountstats file at all: not needed, so not an error.
    h = Harness(proc, clock, sysfs)
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "mountstats") == 1.0
    assert h.labels(sc.NFS_OPS.name) == set()


def test_unmounted_share_state_is_dropped(proc: ProcTree, clock: FakeClock, sysfs: Path) -> None:
    info = data("mountinfo.txt")
    proc.mountinfo(info)
    proc.diskstats(data("diskstats-6.1.txt"))
    proc.mountstats(data("mountstats-nfs.txt"))
    h = Harness(proc, clock, sysfs, remap_interval=1.0)
    h.cycle()
    h.cycle()
    tracked = len(h.collector._tracker)
    assert tracked == 2 * 3 * 3  # two mounts x WRITE/COMMIT/READ x rtt/exe/ops
    proc.mountinfo("\n".join(ln for ln in info.splitlines() if " - nfs" not in ln) + "\n")
    h.cycle()
    assert len(h.collector._tracker) == 0


# --- garbage, truncation, recovery ---------------------------------------------------


def test_garbage_and_missing_files_degrade_and_recover(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    good = data("diskstats-6.1.txt")
    proc.diskstats(good)
    proc.mountstats(data("mountstats-nfs.txt"))
    h = Harness(proc, clock, sysfs)
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "diskstats") == 1.0
    # Pure garbage: no device, source down, errors counted, no exception.
    proc.diskstats("\x00\x01garbage\nmore garbage\n")
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "diskstats") == 0.0
    assert h.value(sc.PARSE_ERRORS.name, "diskstats") == 2
    # Truncated mid-line: the complete lines still count.
    proc.diskstats(good[: good.index("nvme1n1") + 20])
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "diskstats") == 1.0
    assert ("nvme0n1",) in {r.labels for r in h.last if r.name == sc.DEV_WRITES.name}
    assert h.value(sc.PARSE_ERRORS.name, "diskstats") == 3
    # The file disappears (procfs root unmounted in a container).
    (proc.root / "diskstats").unlink()
    (proc.root / "self" / "mountstats").write_text("device x mounted\n\tWRITE: 1 2\n")
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "diskstats") == 0.0
    assert h.value(sc.SOURCE_UP.name, "mountstats") == 0.0
    # Back to normal.
    proc.diskstats(good)
    proc.mountstats(data("mountstats-nfs.txt"))
    h.cycle()
    h.cycle()
    assert h.value(sc.SOURCE_UP.name, "diskstats") == 1.0
    assert h.value(sc.SOURCE_UP.name, "mountstats") == 1.0
    assert h.rate(sc.DEV_WRITES.name, "nvme0n1") == 0.0


def test_missing_diskstats_and_no_paths_fails_start(tmp_path: Path) -> None:
    env = CollectorEnv(node="n", proc_root=tmp_path, sys_root=tmp_path)
    c = FACTORY.build(settings(), env)
    with pytest.raises(Exception, match="diskstats is missing"):
        asyncio.run(c.start())


# --- bursts through the collector ----------------------------------------------------


def test_checkpoint_burst_flagged_on_path_and_device(
    proc: ProcTree, clock: FakeClock, sysfs: Path
) -> None:
    proc.mountinfo(data("mountinfo.txt"))
    h = Harness(
        proc,
        clock,
        sysfs,
        burst_window=5,
        baseline_window=60,
        burst_factor=4,
        burst_min_rate="50MB",
        paths=[{"name": "ckpt", "path": "/scratch", "probe": False}],
    )
    sect = 0
    flags = []
    for i in range(120):
        rate = 2e9 if 80 <= i < 95 else 10e6  # a 15 s checkpoint at 2 GB/s
        sect += int(rate / 512)
        proc.diskstats(dline(259, 2, "nvme1n1", writes=1 + i * 10, wsect=sect) + "\n")
        h.cycle()
        flags.append(h.value(fam.ST_WRITE_BURST.name, "ckpt"))
        assert h.value(sc.DEV_BURST.name, "nvme1n1") == flags[-1]
    assert not any(flags[:80])
    assert all(flags[82:95])
    assert not any(flags[105:])
    base = h.value(sc.WRITE_BASELINE.name, "ckpt")
    assert base is not None and base == pytest.approx(10e6, rel=0.01)
    assert h.value(sc.WRITE_WINDOW.name, "ckpt") == pytest.approx(5 * 10e6, rel=0.01)
