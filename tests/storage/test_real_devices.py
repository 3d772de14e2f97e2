"""Real block I/O: a loop device's diskstats, throttled writes and a frozen file system.

The loop device carries an ext4 file system (``loopfs`` fixture); writes are
slowed for real with the cgroup v1 blkio throttle and blocked for real with
``fsfreeze`` (writers wait until the file system is thawed).
"""

from __future__ import annotations

import asyncio
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.storage import FACTORY
from fabricwatch.collectors.storage import _metrics as sc
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._probe import aligned_buffer, write_probe
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore

from .conftest import LoopFs, blkio_throttle

pytestmark = pytest.mark.integration


class Live:
    """The collector on the real /proc, driven on a real clock through a store."""

    def __init__(self, paths: list[dict[str, object]]) -> None:
        settings = build(FACTORY.settings, {"paths": paths, "burst_min_rate": 1})
        c = FACTORY.build(settings, CollectorEnv(node="t"))
        assert isinstance(c, StorageCollector)
        self.c = c
        self.store = SnapshotStore()
        self.store.register(sc.NAME, c.metrics())
        asyncio.run(c.start())

    def cycle(self) -> None:
        readings = asyncio.run(self.c.collect())
        self.store.ingest(sc.NAME, readings, time.monotonic())

    def until(self, cond: Callable[[], bool], timeout: float = 30.0, step: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / step) + 1):
            self.cycle()
            if cond():
                return
            if time.monotonic() > deadline:
                break
            time.sleep(step)
        pytest.fail("condition not reached in time")

    def value(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, labels)
        return None if s is None else s.value

    def rate(self, name: str, *labels: str) -> float:
        s = self.store.get(name, labels)
        return 0.0 if s is None or s.rate is None else s.rate.per_second


def _write_direct(path: Path, total: int, chunk: int = 1 << 20) -> None:
    buf = mmap.mmap(-1, chunk)
    buf.write(os.urandom(chunk))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        for _ in range(total // chunk):
            os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_loop_device_writes_show_in_diskstats_metrics(loopfs: LoopFs) -> None:
    live = Live([{"name": "loop", "path": str(loopfs.mount), "probe": False}])
    live.cycle()
    mount = live.c.path_mount("loop")
    assert mount is not None and mount.dev == loopfs.dev and mount.fstype == "ext4"
    time.sleep(0.05)
    _write_direct(loopfs.mount / "data.bin", 16 << 20)
    live.cycle()
    # Rates come out of the store, per device and per path.
    assert live.rate(sc.DEV_WRITE_BYTES.name, loopfs.name) > 0
    assert live.rate(sc.DEV_WRITES.name, loopfs.name) > 0
    assert live.rate(fam.ST_WRITE_BYTES.name, "loop") > 0
    lat = live.value(sc.DEV_WRITE_LATENCY.name, loopfs.name)
    assert lat is not None and lat > 0
    assert live.value(fam.ST_WRITE_LAT.name, "loop") == lat
    written = live.store.get(sc.DEV_WRITE_BYTES.name, (loopfs.name,))
    assert written is not None and written.value >= 16 << 20
    assert (
        "loop",
        str(loopfs.mount),
        "ext4",
        loopfs.name,
    ) in {s.labels for s in live.store.family(sc.PATH_INFO.name)}
    (loopfs.mount / "data.bin").unlink()


def test_throttled_device_raises_probe_latency(loopfs: LoopFs) -> None:
    size = 256 << 10
    buf = aligned_buffer(size)
    fast = write_probe(loopfs.mount, ".fast", size, buf, direct=True)
    assert fast.reason is None, fast.error
    rate = 128 << 10  # bytes/s: 256 KiB should take about 2 s
    with blkio_throttle(loopfs.dev, rate):
        slow = write_probe(loopfs.mount, ".slow", size, buf, direct=True)
    assert slow.reason is None, slow.error
    # A lower bound the throttle itself implies (with slack for its burst
    # allowance), not a machine-speed figure.
    assert slow.latency >= 0.5 * size / rate
    assert slow.latency > 5 * fast.latency
    assert slow.write_s + slow.fsync_s > slow.open_s


def test_frozen_file_system_times_out_then_recovers(loopfs: LoopFs) -> None:
    d = loopfs.mount / "ckpt"
    d.mkdir(exist_ok=True)
    live = Live(
        [
            {
                "name": "ckpt",
                "path": str(d),
                "probe_size": "64KiB",
                "probe_interval": "100ms",
                "probe_timeout": "500ms",
            }
        ]
    )
    runner = live.c.probe_runner("ckpt")
    assert runner is not None

    def completed_ok() -> bool:
        last = runner.state.last
        return runner.state.completed >= 2 and last is not None and last.reason is None

    live.until(completed_ok)
    healthy = live.value(fam.ST_PROBE_LAST.name, "ckpt")
    assert healthy is not None and healthy < 0.5
    loopfs.freeze()
    try:
        live.until(lambda: live.value(sc.PROBE_STUCK.name, "ckpt") == 1.0)
        assert live.value(fam.ST_PROBE_FAIL.name, "ckpt", "timeout") == 1
        assert live.value(fam.ST_PROBE_LAST.name, "ckpt") == 0.5
        started = runner.threads_started
        # Many probe intervals pass: collect() keeps returning, nothing piles up.
        t_end = time.monotonic() + 1.0
        for _ in range(200):
            live.cycle()
            if time.monotonic() > t_end:
                break
            time.sleep(0.02)
        assert runner.threads_started == started
        assert live.value(fam.ST_PROBE_FAIL.name, "ckpt", "timeout") == 1
        assert live.value(sc.PROBE_STUCK.name, "ckpt") == 1.0
    finally:
        loopfs.thaw()
    live.until(lambda: live.value(sc.PROBE_STUCK.name, "ckpt") == 0.0)
    done = runner.state.completed
    live.until(lambda: runner.state.completed >= done + 2)
    last = live.value(fam.ST_PROBE_LAST.name, "ckpt")
    assert last is not None and last < 0.5
    assert live.value(fam.ST_PROBE_FAIL.name, "ckpt", "timeout") == 1
    hist = live.store.get(fam.ST_PROBE_HIST.name, ("ckpt",))
    assert hist is not None and hist.histogram is not None
    # The timeout landed in the 0.5 s bucket; healthy probes below it.
    assert dict(hist.histogram.buckets)[0.5] == hist.histogram.count
    assert not any(p.name.startswith(".fabricwatch-probe") for p in d.iterdir())
