"""The active probe with real files, real fsync and real failures."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricwatch import signals as fam
from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.storage import FACTORY
from fabricwatch.collectors.storage import _metrics as sc
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._probe import (
    PROBE_BUCKETS,
    Histogram,
    ProbeRunner,
    aligned_buffer,
    classify,
    probe_filename,
    write_probe,
)
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore

from .conftest import FakeClock, LoopFs


def _wait(cond: object, timeout: float = 20.0) -> None:
    """Poll ``cond()`` (bounded in time and count)."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.01) + 1):
        if cond():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    pytest.fail("condition not reached in time")


def _runner(directory: Path, **kw: object) -> ProbeRunner:
    args: dict[str, object] = {"size": 1 << 20, "interval": 1.0, "timeout": 5.0, "direct": False}
    args.update(kw)
    return ProbeRunner(directory, probe_filename("node", "t"), **args)  # type: ignore[arg-type]


def _finish(runner: ProbeRunner, clock: FakeClock) -> None:
    """Drive the runner until its current probe is harvested."""

    def done() -> bool:
        runner.poll(clock())
        return not runner.running

    _wait(done)


# --- pure pieces ---------------------------------------------------------------------


def test_histogram_buckets_are_cumulative_with_inf() -> None:
    h = Histogram()
    for v in (0.0005, 0.001, 0.003, 2.0, 61.0):
        h.observe(v)
    hv = h.value()
    assert hv.buckets[0] == (0.001, 2.0)  # le is inclusive
    assert dict(hv.buckets)[0.005] == 3.0
    assert dict(hv.buckets)[2.5] == 4.0
    assert hv.buckets[-2] == (60.0, 4.0)
    assert hv.buckets[-1] == (float("inf"), 5.0)
    assert hv.count == 5 and hv.sum == pytest.approx(63.0045)
    assert PROBE_BUCKETS[0] == 0.001 and PROBE_BUCKETS[-1] == 60.0


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, "enospc"),
        (errno.EDQUOT, "enospc"),
        (errno.EROFS, "erofs"),
        (errno.EIO, "eio"),
        (errno.EACCES, "permission"),
        (errno.EPERM, "permission"),
        (errno.ENOENT, "other"),
        (errno.EINVAL, "other"),
    ],
)
def test_classify(code: int, reason: str) -> None:
    assert classify(OSError(code, os.strerror(code))) == reason


def test_probe_filename_is_safe_and_stable() -> None:
    assert probe_filename("gpu-01", "ckpt") == ".fabricwatch-probe.gpu-01.ckpt"
    assert "/" not in probe_filename("a/b", "../x")


# --- real I/O ------------------------------------------------------------------------


def test_probe_on_a_temp_dir_reports_plausible_latency(tmp_path: Path) -> None:
    buf = aligned_buffer(1 << 20)
    res = write_probe(tmp_path, ".p", 3 << 20, buf, direct=False)
    assert res.reason is None, res.error
    assert 0 < res.open_s < 5 and 0 < res.write_s < 5 and 0 < res.fsync_s < 5
    assert res.latency == pytest.approx(res.open_s + res.write_s + res.fsync_s)
    assert res.unlink_s > 0
    assert res.free_bytes is not None and res.size_bytes is not None
    assert 0 < res.free_bytes <= res.size_bytes
    assert list(tmp_path.iterdir()) == []  # cleaned up


def test_probe_missing_directory_is_other(tmp_path: Path) -> None:
    res = write_probe(tmp_path / "nope", ".p", 4096, aligned_buffer(4096), direct=False)
    assert res.reason == "other" and "No such file" in res.error
    assert res.latency >= 0


def test_collector_probes_real_dir_and_exports(tmp_path: Path) -> None:
    """Through the collector and the store, with the real clock and /proc."""
    settings = build(
        FACTORY.settings,
        {"paths": [{"name": "ckpt", "path": str(tmp_path), "probe_interval": "100ms"}]},
    )
    c = FACTORY.build(settings, CollectorEnv(node="n1"))
    assert isinstance(c, StorageCollector)
    store = SnapshotStore()
    store.register(sc.NAME, c.metrics())

    async def run() -> None:
        await c.start()
        for _ in range(400):
            store.ingest(sc.NAME, await c.collect(), time.monotonic())
            hist = store.get(fam.ST_PROBE_HIST.name, ("ckpt",))
            if hist is not None and hist.histogram is not None and hist.histogram.count >= 3:
                break
            await asyncio.sleep(0.02)
        await c.close()

    asyncio.run(run())
    hist = store.get(fam.ST_PROBE_HIST.name, ("ckpt",))
    assert hist is not None and hist.histogram is not None and hist.histogram.count >= 3
    last = store.get(fam.ST_PROBE_LAST.name, ("ckpt",))
    assert last is not None and 0 < last.value < 5
    for reason in ("enospc", "erofs", "eio", "timeout", "permission", "other"):
        s = store.get(fam.ST_PROBE_FAIL.name, ("ckpt", reason))
        assert s is not None and s.value == 0
    phases = {s.labels[1]: s.value for s in store.family(sc.PROBE_PHASE.name)}
    assert set(phases) == {"open", "write", "fsync", "unlink"}
    assert all(v > 0 for v in phases.values())
    free = store.get(sc.FREE_BYTES.name, ("ckpt",))
    assert free is not None and free.value > 0
    info = {s.labels for s in store.family(sc.PATH_INFO.name)}
    assert len(info) == 1 and next(iter(info))[0] == "ckpt"
    assert not any(p.name.startswith(".fabricwatch-probe") for p in tmp_path.iterdir())


def test_hung_open_times_out_once_no_pile_up_then_recovers(tmp_path: Path) -> None:
    """A FIFO in place of the probe file: open() blocks until a reader appears."""
    clock = FakeClock()
    r = _runner(tmp_path, timeout=5.0, interval=1.0)
    fifo = tmp_path / r.filename
    os.mkfifo(fifo)
    r.poll(clock())
    assert r.running and r.threads_started == 1
    clock.advance(4.0)
    r.poll(clock())
    assert (r.state.stuck, r.state.failures["timeout"]) == (False, 0)
    clock.advance(2.0)
    r.poll(clock())
    assert (r.state.stuck, r.state.failures["timeout"]) == (True, 1)
    assert r.state.last_latency == 5.0
    assert r.state.histogram.count == 1
    for _ in range(5):  # many intervals later: still one thread, one timeout
        clock.advance(10.0)
        r.poll(clock())
    assert r.threads_started == 1 and r.state.failures["timeout"] == 1
    # Release: a reader drains the FIFO, the stuck probe finishes (fsync on a
    # FIFO fails, but that late result is not counted again) and unlinks it.
    drained = threading.Event()

    def drain() -> None:
        with open(fifo, "rb") as f:  # noqa: PTH123
            while f.read(1 << 16):
                pass
        drained.set()

    threading.Thread(target=drain, daemon=True).start()
    _finish(r, clock)
    assert drained.wait(10)
    assert not r.state.stuck
    assert sum(r.state.failures.values()) == 1
    # The next probe started as soon as the stuck one returned, on a regular file.
    assert r.threads_started == 2
    assert r.state.last is not None and r.state.last.reason is None
    assert r.state.last_latency is not None and r.state.last_latency < 5.0
    assert r.state.histogram.count == 2
    assert not fifo.exists()


# --- real failures on real file systems ---------------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, opts: str) -> Iterator[Path]:
    where.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if res.returncode != 0:
        pytest.skip(f"needs mount(2) of tmpfs (root): {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False, timeout=30)


def test_enospc_on_a_full_file_system(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", "size=256k") as d:
        res = write_probe(d, ".p", 1 << 20, aligned_buffer(1 << 20), direct=False)
        assert res.reason == "enospc", res
        assert not (d / ".p").exists()  # the partial file is gone


def test_erofs_on_a_read_only_mount(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as d:
        res = write_probe(d, ".p", 4096, aligned_buffer(4096), direct=False)
        assert res.reason == "erofs", res


@pytest.mark.integration
def test_permission_on_an_immutable_directory(loopfs: LoopFs) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr (e2fsprogs) to make a directory immutable")
    d = loopfs.mount / "immutable"
    d.mkdir(exist_ok=True)
    subprocess.run(["chattr", "+i", str(d)], check=True, timeout=30)
    try:
        res = write_probe(d, ".p", 4096, aligned_buffer(4096), direct=False)
    finally:
        subprocess.run(["chattr", "-i", str(d)], check=True, timeout=30)
    assert res.reason == "permission", res


@pytest.mark.integration
def test_o_direct_probe_on_ext4(loopfs: LoopFs) -> None:
    res = write_probe(loopfs.mount, ".pd", 1 << 20, aligned_buffer(1 << 20), direct=True)
    assert res.reason is None, res.error
    assert res.latency > 0


def test_o_direct_unsupported_is_reported_not_raised(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "t", "size=4m") as d:
        res = write_probe(d, ".p", 4096, aligned_buffer(4096), direct=True)
    # tmpfs has no O_DIRECT before Linux 6.6 (EINVAL); newer kernels accept it.
    assert res.reason in (None, "other")
