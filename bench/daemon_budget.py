"""The whole node daemon against its budget: 1 % of one core and 80 MiB RSS.

Usage (repository root)::

    .venv/bin/python bench/daemon_budget.py [--warmup 15] [--seconds 60] [--profile FILE]

Builds a simulated node of the DESIGN.md size - 8 H100 GPUs x 18 NVLinks
behind the NVML facade, 8 RoCE NIC ports (sysfs tree + ``ethtool -S`` dumps),
4 switch uplinks on a real SNMP agent (of a 32-port leaf, polled in node mode
through LLDP), 2 checkpoint paths on 2 NVMe devices (diskstats, mountinfo,
the default write+fsync probe) - and runs the REAL :class:`Daemon` on it at
real time: 1 s collector intervals, the engine ticking every 1 s, alerting on
with no sinks, ``/metrics`` scraped every 15 s like Prometheus would.

How the simulators' CPU is kept out of the daemon's figure:

* the SNMP agent and the Prometheus-like scraper run in a **child process**
  (this script with ``--child``): their CPU never lands in ours;
* the GPU simulator (which stands in for the NVML driver) and the writers of
  the sysfs / procfs files (which stand in for the kernel) run inside the
  daemon process, because the collectors call them synchronously (files are
  written just before they are read, so no reader sees a half-written file).
  Each of those calls is timed with the calling **thread's** CPU clock and
  subtracted from the process's CPU. That is exact for synchronous calls: a
  thread's CPU clock only advances while that thread runs the call.

The daemon's CPU = process CPU (all threads) over the window - simulator CPU.
Per-collector shares are the CPU of every step of the collector's supervisor
loop task once it has collected (``collect()`` runs inside it, as in the
daemon; each step timed with the event-loop thread's CPU clock, simulator calls
and ``store.ingest`` inside it subtracted), of the tasks it spawns and of its
sockets' callbacks, plus its ``store.ingest``; the engine's share is
``Engine.tick`` (its ingest subtracted) + its ingest. Everything else (event
loop, the tick loop, alerting's outbox scan, the HTTP server and its scrapes,
worker-thread hand-offs, NVML worker and event threads) is listed as the rest.
RSS is the whole process's, simulators included (they hold a few hundred
small objects and file paths).

Nothing is asserted; the figures are ratios to the DESIGN.md budget from this
one run. ``--profile FILE`` also writes a cProfile of the event-loop thread
over the window (timed by that thread's CPU clock) and prints the top
functions (that run's CPU figures include the profiler's overhead and are
marked as such).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import gc
import json
import math
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fabricwatch.clock import Clock
from fabricwatch.collector import Collector, CollectorEnv, CollectorFactory, Registry
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.collectors.gpu._types import GpuEvent, GpuSample
from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.collectors.nic._settings import NicSettings
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._settings import StorageSettings
from fabricwatch.config import parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.logs import configure_logging
from fabricwatch.outputs.exposition import generate_text
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.store import IngestResult, SnapshotStore
from fabricwatch.testing.sim_gpu import Activity, SimulatedGPUs
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names
from fabricwatch.testing.sim_snmp import SimAgent, SimPort, SimSwitch

# Appended, not prepended: PYTHONPATH must still choose the fabricwatch under test.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._results import add_results_option, write_results

T = TypeVar("T")

BUDGET_CPU = 0.01  # share of one core (DESIGN.md: under 1 %)
BUDGET_RSS_MIB = 80.0
NODE = "gpu-node-1"
GPUS = 8
GPU_MODEL = "H100"
NICS = 8
UPLINKS = 4
SWITCH_PORTS = 32
PRIORITY = 3
PID_BASE = 100000
JOB_ID = "4242"
LINK_GBPS = 400
SCRAPE_INTERVAL = 15.0
CKPT_DEVICES = (("ckpt0", "nvme8n1", 259, 8), ("ckpt1", "nvme9n1", 259, 9))
ROOT_DEVICE = ("nvme0n1", 259, 0)
DISK_FIELDS = 17  # diskstats fields after the name (kernel 5.5+)

_SYSFS_RATES = {  # per NIC port, per second
    "port_xmit_data": 4.5e9 / 4,
    "port_rcv_data": 4.4e9 / 4,
    "port_xmit_packets": 4.5e9 / 4096,
    "port_rcv_packets": 4.4e9 / 4096,
    "np_ecn_marked_roce_packets": 20.0,
    "np_cnp_sent": 18.0,
    "rp_cnp_handled": 16.0,
    "port_xmit_wait": 3000.0,
}
_ETHTOOL_RATES = {
    f"rx_prio{PRIORITY}_pause": 5.0,
    f"rx_prio{PRIORITY}_pause_duration": 300.0,
    f"tx_prio{PRIORITY}_pause": 1.0,
    f"tx_prio{PRIORITY}_pause_duration": 60.0,
    "rx_bytes": 4.4e9,
    "tx_bytes": 4.5e9,
}


# -- CPU accounting --------------------------------------------------------------------------

_BUCKET: contextvars.ContextVar[CpuBucket | None] = contextvars.ContextVar(
    "daemon_budget_bucket", default=None
)
"""The bucket that event-loop callbacks run in this context are charged to (tasks that a
collector spawns inherit it, as do transports it opens: their reader callbacks too)."""


class _Nested(threading.local):
    """CPU accumulated on this thread by calls timed on their own (simulators, which are
    not the daemon's, and ``store.ingest``, which has its own row): subtracted from the
    callback or timed call they ran inside, so no CPU lands in two rows."""

    sim = 0.0


class CpuBucket:
    """Thread-CPU seconds of timed calls, from any thread."""

    def __init__(self, nested: _Nested | None = None) -> None:
        # nested: this bucket's calls are subtracted from the callback they run in.
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._nested = nested

    def add(self, dt: float) -> None:
        with self._lock:
            self.seconds += dt
        if self._nested is not None:
            self._nested.sim += dt

    def timed(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` with its calling thread's CPU added to this bucket."""

        def run(*args: Any, **kw: Any) -> T:
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                self.add(time.thread_time() - t0)

        return run


@contextlib.contextmanager
def loop_accounting(nested: _Nested) -> Iterator[None]:
    """Charge every event-loop callback to the bucket of its context (if any).

    ``asyncio.events.Handle._run`` runs every callback of the loop: task steps
    (in the task's context), reader callbacks of sockets (in the context the
    transport was made in) and timers. Simulator CPU inside a callback is
    subtracted (it is counted as the simulator's).
    """
    original = asyncio.events.Handle._run
    clock = time.thread_time

    def run(self: asyncio.Handle) -> None:
        bucket = self._context.get(_BUCKET)  # type: ignore[attr-defined]
        if bucket is None:
            original(self)
            return
        s0 = nested.sim
        t0 = clock()
        try:
            original(self)
        finally:
            bucket.add(clock() - t0 - (nested.sim - s0))

    asyncio.events.Handle._run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]


async def in_bucket(coro: Coroutine[Any, Any, T], bucket: CpuBucket) -> T:
    """Run ``coro`` in its own task whose context charges ``bucket``."""
    ctx = contextvars.copy_context()
    ctx.run(_BUCKET.set, bucket)
    return await asyncio.get_running_loop().create_task(coro, context=ctx)


class _TimedAwait:
    """Awaits a coroutine, adding the event-loop thread's CPU of each of its steps to a bucket.

    Only the coroutine's own steps are counted: while it is suspended other
    tasks run and their CPU is theirs.
    """

    __slots__ = ("_bucket", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, T], bucket: CpuBucket) -> None:
        self._coro = coro
        self._bucket = bucket

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self._coro.__await__()
        send: Any = None
        throw: BaseException | None = None
        clock = time.thread_time
        while True:
            t0 = clock()
            try:
                yielded = it.send(send) if throw is None else it.throw(throw)
            except StopIteration as stop:
                self._bucket.add(clock() - t0)
                return stop.value
            except BaseException:
                self._bucket.add(clock() - t0)
                raise
            self._bucket.add(clock() - t0)
            try:
                send = yield yielded
                throw = None
            except BaseException as exc:  # noqa: BLE001 - handed to the inner coroutine
                send = None
                throw = exc


class Measured:
    """A collector whose work is counted: ``start()`` runs in a task whose context charges
    the collector's bucket; ``collect()`` sets that bucket in the context of the task it
    is awaited in (the supervisor's loop task of this one collector), so from then on
    every step of that loop, the tasks ``collect()`` spawns (``asyncio.gather`` per
    target) and the reader callbacks of sockets it opens are charged to the collector.

    ``collect()`` runs in the supervisor's task, as in the daemon: a task per call made
    here would add the bench's own task creation and two loop iterations per cycle to
    the daemon's figure. The supervisor's bookkeeping of the collector's cycle is
    thereby in the collector's row (``store.ingest`` is subtracted there: it has its own
    row)."""

    def __init__(self, inner: Collector, bucket: CpuBucket) -> None:
        self._inner = inner
        self._bucket = bucket

    @property
    def name(self) -> str:
        """The inner collector's name."""
        return self._inner.name

    def metrics(self) -> Sequence[MetricSpec]:
        """The inner collector's families."""
        return self._inner.metrics()

    async def start(self) -> None:
        """Start the inner collector (its transports are made in the bucket's context)."""
        await in_bucket(self._inner.start(), self._bucket)

    async def collect(self) -> Sequence[Reading]:
        """The inner collector's readings; its CPU (and its loop task's) goes to the bucket."""
        if _BUCKET.get() is not self._bucket:
            _BUCKET.set(self._bucket)  # the calling task's context: later steps are charged
        return await self._inner.collect()

    async def close(self) -> None:
        """Close the inner collector."""
        await self._inner.close()


@dataclass
class Accounts:
    """Where the measured CPU went."""

    nested: _Nested = field(default_factory=_Nested)
    collect: dict[str, CpuBucket] = field(default_factory=dict)
    ingest: dict[str, CpuBucket] = field(default_factory=dict)
    sim: dict[str, CpuBucket] = field(default_factory=dict)
    engine: CpuBucket = field(default_factory=CpuBucket)
    alerting: CpuBucket = field(default_factory=CpuBucket)
    expire: CpuBucket = field(default_factory=CpuBucket)

    def bucket(self, table: dict[str, CpuBucket], name: str) -> CpuBucket:
        b = table.get(name)
        if b is None:
            nested = table is self.sim or table is self.ingest
            b = table[name] = CpuBucket(self.nested if nested else None)
        return b

    def snapshot(self) -> dict[str, float]:
        out = {
            "engine": self.engine.seconds,
            "alerting": self.alerting.seconds,
            "expire": self.expire.seconds,
        }
        for prefix, table in (
            ("collect", self.collect),
            ("ingest", self.ingest),
            ("sim", self.sim),
        ):
            for name, b in table.items():
                out[f"{prefix}:{name}"] = b.seconds
        return out


# -- the simulated node ----------------------------------------------------------------------


class TimedGPUs(SimulatedGPUs):
    """The GPU simulator (the NVML driver's stand-in) with its CPU counted as simulator CPU."""

    def __init__(self, bucket: CpuBucket, clock: Callable[[], float], count: int) -> None:
        super().__init__(GPU_MODEL, count, clock)
        self._bucket = bucket

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        """The simulator's sample (timed)."""
        t0 = time.thread_time()
        try:
            return super().sample(index, fabric=fabric)
        finally:
            self._bucket.add(time.thread_time() - t0)

    def wait_events(self, timeout_ms: int) -> Sequence[GpuEvent]:
        """The simulator's event wait (timed)."""
        t0 = time.thread_time()
        try:
            return super().wait_events(timeout_ms)
        finally:
            self._bucket.add(time.thread_time() - t0)


class Synced(Measured):
    """Writes a file-backed source as of now, then runs the real collector on it.

    Unlike the demo's ``SyncedCollector`` nothing is re-stamped: at real time the
    microseconds between writing and reading do not matter, and a real daemon
    does no such per-reading work.
    """

    def __init__(self, inner: Collector, bucket: CpuBucket, sync: Callable[[float], None]) -> None:
        super().__init__(inner, bucket)
        self._sync = sync

    async def start(self) -> None:
        """Write the source once, then start the inner collector."""
        self._sync(time.monotonic())
        await in_bucket(self._inner.start(), self._bucket)

    async def collect(self) -> Sequence[Reading]:
        """Write the source as of now, then collect (the write is simulator CPU)."""
        self._sync(time.monotonic())
        return await super().collect()


def _sysfs_value(name: str, rate: float, t: float) -> int:
    """A sysfs counter's value ``t`` seconds in (``port_xmit_wait`` is 32 bits wide)."""
    v = int(rate * t)
    return v % (1 << 32) if name == "port_xmit_wait" else v


def _rewrite(fd: int, data: bytes) -> None:
    """Replace a file's contents in place (same inode: readers holding it open see it)."""
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))  # after the write: a reader never sees it empty


class Node:
    """Sysfs, procfs and GPU simulators of one DESIGN.md-sized node under ``root``."""

    def __init__(self, root: Path, acct: Accounts, shape: Shape) -> None:
        self.root = root
        self.acct = acct
        self.shape = shape
        self.sys_root = root / "sys"
        self.proc_root = root / "proc"
        self.ethtool_dir = root / "ethtool"
        self.state_dir = root / "state"
        self.t0 = time.monotonic()
        self.gpus = TimedGPUs(acct.bucket(acct.sim, "gpu"), time.monotonic, max(1, shape.gpus))
        self.gpus.set_activity(None, Activity.BUSY)
        self.nic = NicFixture(self.sys_root, self.ethtool_dir)
        for i in range(shape.nics):
            pci = f"0000:{0x18 + 0x08 * i:02x}:00.0"
            self.nic.add_pci(pci, numa=i // 4)
            self.nic.add_netdev(f"eth{i}", pci=pci, speed_mbps=LINK_GBPS * 1000)
            self.nic.add_rdma_port(f"mlx5_{i}", pci=pci, netdev=f"eth{i}", rate_gbps=LINK_GBPS)
            self.nic.add_ethtool(f"eth{i}", mlx5_ethtool_names((PRIORITY,)))
        self.ckpt_dirs = [root / name for name, *_ in CKPT_DEVICES]
        for d in (self.proc_root / "self", self.state_dir, *self.ckpt_dirs):
            d.mkdir(parents=True, exist_ok=True)
        for i in range(shape.gpus):
            pid = self.proc_root / str(PID_BASE + i)
            pid.mkdir(parents=True, exist_ok=True)
            (pid / "cgroup").write_text(
                f"0::/system.slice/slurmstepd.scope/job_{JOB_ID}/step_0/user/task_{i}\n"
            )
        rname, rmajor, rminor = ROOT_DEVICE
        lines = [f"22 1 {rmajor}:{rminor} / / rw,relatime - ext4 /dev/{rname}p2 rw"]
        for n, (_, dev, major, minor) in enumerate(CKPT_DEVICES):
            mp = str(self.ckpt_dirs[n].resolve()).replace(" ", "\\040")
            lines.append(f"{35 + n} 22 {major}:{minor} / {mp} rw,relatime - xfs /dev/{dev} rw")
        (self.proc_root / "self" / "mountinfo").write_text("\n".join(lines) + "\n")
        self.sync_storage(time.monotonic())
        self.sync_nic(time.monotonic())
        # The files sync_nic rewrites every second, held open: the kernel writes sysfs
        # without any Python in the daemon's process, so the stand-in writes them with
        # two system calls each (no pathlib, no text layer). Its CPU is subtracted either
        # way; done through the fixture's per-file Python it was 15 ms/s, most of this
        # process's CPU, and evicted the daemon's working set from the caches just
        # before every NIC cycle, which the real kernel does not.
        self._nic_fds: list[tuple[int, str, float]] = []
        for i in range(shape.nics):
            dev = f"mlx5_{i}"
            subdirs = self.nic._devices[dev].ports["1"]
            for name, rate in _SYSFS_RATES.items():
                path = self.nic.port_path(dev, "1") / subdirs[name] / name
                self._nic_fds.append((os.open(path, os.O_WRONLY), name, rate))
        self._dump_fds = [
            os.open(self.ethtool_dir / f"eth{i}", os.O_WRONLY) for i in range(shape.nics)
        ]

    def close(self) -> None:
        """Close the files :meth:`sync_nic` keeps open."""
        for fd, *_ in self._nic_fds:
            os.close(fd)
        for fd in self._dump_fds:
            os.close(fd)
        self._nic_fds = []
        self._dump_fds = []

    def sync_nic(self, now: float) -> None:
        """Write every port's counters as of ``now`` (in place, as sysfs reads them)."""
        t = now - self.t0
        fds = getattr(self, "_nic_fds", None)
        if fds is None:  # the first write, while the node is built: through the fixture
            for i in range(self.shape.nics):
                dev = f"mlx5_{i}"
                for name, rate in _SYSFS_RATES.items():
                    self.nic.set(dev, "1", name, _sysfs_value(name, rate, t))
        else:
            for fd, name, rate in fds:
                _rewrite(fd, b"%d\n" % _sysfs_value(name, rate, t))
        for i in range(self.shape.nics):
            netdev = f"eth{i}"
            stats = self.nic._stats[netdev]  # one dump write per port, not one per statistic
            for name, rate in _ETHTOOL_RATES.items():
                stats[name] = int(rate * t)
            if fds is None:
                self.nic._flush(netdev)
            else:
                lines = ["NIC statistics:", *(f"     {k}: {v}" for k, v in stats.items())]
                _rewrite(self._dump_fds[i], ("\n".join(lines) + "\n").encode())

    def sync_storage(self, now: float) -> None:
        """Write ``diskstats`` as of ``now`` (steady checkpoint-less background I/O)."""
        t = now - self.t0
        lines = []
        devs = [(ROOT_DEVICE[0], ROOT_DEVICE[1], ROOT_DEVICE[2])]
        devs += [(dev, major, minor) for _, dev, major, minor in CKPT_DEVICES]
        for k, (name, major, minor) in enumerate(devs):
            ops = (30 + 10 * k) * t
            v = [0] * DISK_FIELDS
            v[0], v[2], v[3] = int(ops), int(ops * 64), int(ops * 0.2)
            v[4], v[6], v[7] = int(ops / 2), int(ops * 32), int(ops * 0.05)
            v[9], v[10], v[15], v[16] = int(8 * t), int(10 * t), int(2 * t), int(t)
            lines.append(f"{major:4d} {minor:7d} {name} " + " ".join(map(str, v)))
        path = self.proc_root / "diskstats"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(path)

    def registry(self) -> Registry:
        """Built-in factories, GPU/NIC/storage over this node, every collector measured."""
        reg = dict(builtin_registry())
        acct = self.acct
        sync_nic = acct.bucket(acct.sim, "nic").timed(self.sync_nic)
        sync_storage = acct.bucket(acct.sim, "storage").timed(self.sync_storage)

        def gpu(settings: GpuSettings, env: CollectorEnv) -> Collector:
            return Measured(
                GpuCollector(settings, env, self.gpus), acct.bucket(acct.collect, "gpu")
            )

        def nic(settings: NicSettings, env: CollectorEnv) -> Collector:
            inner = NicCollector(settings, env)
            # collect() runs collect_sync in the default executor: count that thread's CPU.
            worker = acct.bucket(acct.collect, "nic (thread)").timed(inner.collect_sync)
            setattr(inner, "collect_sync", worker)  # noqa: B010 - instance patch for measurement
            return Synced(inner, acct.bucket(acct.collect, "nic"), sync_nic)

        def storage(settings: StorageSettings, env: CollectorEnv) -> Collector:
            inner = StorageCollector(settings, env)
            return Synced(inner, acct.bucket(acct.collect, "storage"), sync_storage)

        def switch(settings: Any, env: CollectorEnv) -> Collector:
            return Measured(base_switch(settings, env), acct.bucket(acct.collect, "switch"))

        base_switch = reg["switch"].create
        creators: dict[str, Callable[[Any, CollectorEnv], Collector]] = {
            "gpu": gpu,
            "nic": nic,
            "storage": storage,
            "switch": switch,
        }
        for name, create in creators.items():
            base = reg[name]
            reg[name] = CollectorFactory(
                name=name, settings=base.settings, create=create, description=base.description
            )
        return reg

    def config(self, snmp_port: int, http_port: int) -> dict[str, Any]:
        """The daemon's config document (switch mode: only the switch collector)."""
        shape = self.shape
        doc: dict[str, Any] = {
            "daemon": {
                "node": NODE,
                "state_dir": str(self.state_dir),
                "proc_root": str(self.proc_root),
                "sys_root": str(self.sys_root),
                "tick": 1.0,
            },
            "web": {"listen": f"127.0.0.1:{http_port}"},
            "log": {"level": "warning", "format": "console"},
            "collectors": {
                "gpu": {"backend": "simulated", "simulated_model": GPU_MODEL},
                "nic": {"ethtool_stats_dir": str(self.ethtool_dir), "gpu_locality": False},
                "storage": {
                    "paths": [
                        {"name": name, "path": str(d)}
                        for (name, *_), d in zip(CKPT_DEVICES, self.ckpt_dirs, strict=True)
                    ],
                },
                "switch": {
                    "targets": [
                        {
                            "name": "leaf1",
                            "host": "127.0.0.1",
                            "port": snmp_port,
                            "timeout": 1.0 if shape.mode == "node" else 5.0,
                        }
                    ],
                    "mode": shape.mode,
                },
            },
        }
        if shape.mode == "switch":
            for name in ("gpu", "nic", "storage"):
                doc["collectors"][name] = {"enabled": False}
        if shape.history is not None:
            doc["store"] = {"history": shape.history}
        return doc


# -- the child: SNMP agent + Prometheus-like scraper -----------------------------------------


@dataclass(frozen=True)
class Shape:
    """What one measured daemon polls."""

    label: str
    gpus: int = GPUS
    nics: int = NICS
    uplinks: int = UPLINKS
    switch_ports: int = SWITCH_PORTS
    mode: str = "node"
    history: int | None = None  # None: the default config's

    def describe(self) -> str:
        if self.mode == "switch":
            return f"switch mode, one {self.switch_ports}-port switch (SNMP, all ports)"
        return (
            f"{self.gpus} x {GPU_MODEL} x 18 NVLinks, {self.nics} NIC ports, {self.uplinks} "
            f"switch uplinks (SNMP, {self.switch_ports}-port leaf), {len(CKPT_DEVICES)} "
            "storage paths"
        )


DESIGN = Shape("DESIGN node")
SCALING = (
    Shape("GPUs 4", gpus=4),
    DESIGN,
    Shape("GPUs 16", gpus=16),
    Shape("NIC ports 4", nics=4),
    Shape("NIC ports 16", nics=16),
    Shape("switch mode 64 ports", switch_ports=64, mode="switch"),
    Shape("switch mode 512 ports", switch_ports=512, mode="switch"),
)


def _switch(ports_n: int, uplinks: int) -> SimSwitch:
    ports = [
        SimPort(
            i + 1,
            f"swp{i + 1}",
            neighbour_name=NODE if i < uplinks else f"other-node-{i}",
            neighbour_port=f"eth{i}",
        )
        for i in range(ports_n)
    ]
    sw = SimSwitch(ports)
    for p in sw.ports:
        sw.set_rate(p.if_index, "rx_bytes", 2.5e9)
        sw.set_rate(p.if_index, "tx_bytes", 2.4e9)
        sw.pfc_storm(p.if_index, PRIORITY, "rx", 0.001)
    return sw


async def _child(http_port: int, ports_n: int, uplinks: int) -> None:
    agent = await SimAgent(_switch(ports_n, uplinks)).start("127.0.0.1", 0)
    print(agent.port, flush=True)
    url = f"http://127.0.0.1:{http_port}/metrics"
    loop = asyncio.get_running_loop()

    def scrape() -> None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
            resp.read()

    # Bounded: the parent kills us long before this ends.
    for _ in range(10_000):
        await asyncio.sleep(SCRAPE_INTERVAL)
        await loop.run_in_executor(None, scrape)


# -- the run ----------------------------------------------------------------------------------


def free_tcp_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            fields[k] = int(v.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (the child's agent and scraper)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """CPU seconds per live thread (by Python thread name) from /proc/self/task/*/schedstat."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        name = names.get(int(task.name), f"tid-{task.name}")
        key = name.rstrip("0123456789").rstrip("-_") or name
        out[key] = out.get(key, 0.0) + ns / 1e9
    return out


class GcClock:
    """A ``gc.callbacks`` hook: thread-CPU seconds spent in collections, and full ones."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
            return
        self.seconds += time.thread_time() - self._t0
        self.full += info.get("generation") == 2


def reference_cpu() -> float:
    """CPU seconds of a fixed pure-Python workload: how fast this machine ran just now."""
    t0 = time.thread_time()
    acc: dict[int, float] = {}
    for i in range(200_000):
        acc[i & 1023] = acc.get(i & 1023, 0.0) + i * 0.5
    return time.thread_time() - t0


def _timed_ingest(store: SnapshotStore, acct: Accounts) -> None:
    inner = store.ingest

    def ingest(collector: str, readings: Any, now: float) -> IngestResult:
        t0 = time.thread_time()
        try:
            return inner(collector, readings, now)
        finally:
            acct.bucket(acct.ingest, collector).add(time.thread_time() - t0)

    setattr(store, "ingest", ingest)  # noqa: B010 - instance patch for measurement


def _timed_engine(daemon: Daemon, acct: Accounts) -> None:
    inner: Callable[..., None] = daemon._engine_tick

    def tick(*args: Any) -> None:
        # The engine's store.ingest inside has its own row: not counted twice.
        s0 = acct.nested.sim
        t0 = time.thread_time()
        try:
            inner(*args)
        finally:
            acct.engine.add(time.thread_time() - t0 - (acct.nested.sim - s0))

    setattr(daemon, "_engine_tick", tick)  # noqa: B010 - instance patch for measurement


def _timed_tick_parts(daemon: Daemon, acct: Accounts) -> None:
    """Time the tick loop's other work: ``store.expire`` and ``alerting.collect``."""
    expire = acct.expire.timed(daemon.store.expire)
    setattr(daemon.store, "expire", expire)  # noqa: B010 - instance patch for measurement
    alerting = daemon.alerting
    assert alerting is not None
    inner = alerting.collect

    async def collect() -> Any:
        return await _TimedAwait(inner(), acct.alerting)

    setattr(alerting, "collect", collect)  # noqa: B010 - instance patch for measurement


def scrape_cpu(daemon: Daemon, n: int = 5) -> tuple[float, int]:
    """(CPU seconds of one /metrics render, its size in bytes), rendered here ``n`` times."""
    web = daemon._web
    assert web is not None
    registry = web._registry
    body = generate_text(registry)
    t0 = time.thread_time()
    for _ in range(n):
        generate_text(registry)
    return (time.thread_time() - t0) / n, len(body)


async def _until(cond: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.05)
    return cond()


@dataclass
class Window:
    """What one measured window saw."""

    seconds: float
    process_cpu: float
    child_cpu: float
    reference_cpu: float
    accounts: dict[str, float]
    threads: dict[str, float]
    series: int
    series_with_history: int
    history_points: int
    padded_points: int
    rss_early: float
    rss_end: float
    rss_steady: float
    hwm: float
    rss_before_daemon: float
    collections: dict[str, int]
    scrape: tuple[float, int]
    gc_seconds: float = 0.0
    gc_full: int = 0

    @property
    def sim(self) -> float:
        """Simulator CPU inside the daemon process (subtracted from it)."""
        return sum(v for k, v in self.accounts.items() if k.startswith("sim:"))

    @property
    def daemon_cpu(self) -> float:
        """The daemon's CPU seconds over the window."""
        return self.process_cpu - self.sim


async def measure(
    shape: Shape,
    *,
    snmp_port: int,
    http_port: int,
    child_pid: int,
    warmup: float,
    seconds: float,
    profile: cProfile.Profile | None,
) -> Window:
    """Run the daemon on a fresh simulated node; measure ``seconds`` after ``warmup``."""
    root = Path(tempfile.mkdtemp(prefix="fw-budget-"))
    daemon_task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    node: Node | None = None
    acct = Accounts()
    try:
        with loop_accounting(acct.nested):
            node = Node(root, acct, shape)
            registry = node.registry()
            doc = node.config(snmp_port, http_port)
            for name in registry:
                doc["collectors"].setdefault(name, {"enabled": False})
            config = parse_config(doc, registry, source="bench")
            configure_logging(config.log.level, config.log.format)
            rss_before, _ = rss_mib()
            daemon = Daemon(config, registry, config_path=None, clock=Clock())
            _timed_ingest(daemon.store, acct)
            _timed_engine(daemon, acct)
            daemon_task = asyncio.create_task(daemon.run())
            ready = await _until(
                lambda: (
                    daemon is not None and daemon.engine is not None and daemon.supervisor.ready()
                ),
                30,
            )
            if not ready:
                msg = "the daemon did not become ready"
                raise RuntimeError(msg)
            _timed_tick_parts(daemon, acct)
            await asyncio.sleep(warmup)
            # Steady state for /metrics too: the first render of a series caches its
            # text prefix (a scrape during the window would pay that once).
            scrape_cpu(daemon, 1)
            states = {s.name: s.collections for s in daemon.supervisor.states}
            ref = reference_cpu()
            gc_clock = GcClock()
            gc.callbacks.append(gc_clock)
            rss_early, _ = rss_mib()
            a0, th0 = acct.snapshot(), thread_cpu()
            k0 = proc_cpu(child_pid)
            c0 = time.process_time()
            w0 = time.monotonic()
            if profile is not None:
                profile.enable()
            await asyncio.sleep(seconds)
            if profile is not None:
                profile.disable()
            c1 = time.process_time()
            w1 = time.monotonic()
            gc.callbacks.remove(gc_clock)
            k1 = proc_cpu(child_pid)
            a1, th1 = acct.snapshot(), thread_cpu()
            rss_end, _ = rss_mib()
            store = daemon.store
            # Steady state: every history ring full. The rings are preallocated,
            # so filling them must not move RSS; what does move is measured here.
            padded = store.pad_history()
            rss_steady, hwm = rss_mib()
            with_history = [s for s in store if s.ring is not None]
            scrape = scrape_cpu(daemon)
            down = [s.name for s in daemon.supervisor.states if not s.up]
            if down:
                print(f"WARNING: collectors down at the end: {down}")
            return Window(
                seconds=w1 - w0,
                process_cpu=c1 - c0,
                child_cpu=k1 - k0,
                reference_cpu=ref,
                accounts={k: v - a0.get(k, 0.0) for k, v in a1.items()},
                threads={k: v - th0.get(k, 0.0) for k, v in th1.items()},
                series=len(store),
                series_with_history=len(with_history),
                history_points=sum(len(s.history) for s in with_history),
                padded_points=padded,
                rss_early=rss_early,
                rss_end=rss_end,
                rss_steady=rss_steady,
                hwm=hwm,
                rss_before_daemon=rss_before,
                scrape=scrape,
                gc_seconds=gc_clock.seconds,
                gc_full=gc_clock.full,
                collections={
                    s.name: s.collections - states.get(s.name, 0) for s in daemon.supervisor.states
                },
            )
    finally:
        if daemon is not None and daemon_task is not None:
            daemon.request_stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(daemon_task, 20)
        if node is not None:
            node.close()
        shutil.rmtree(root, ignore_errors=True)


def _row(name: str, cpu: float, secs: float, note: str = "") -> None:
    share = cpu / secs
    print(
        f"  {name:<40} {share * 100:7.3f} % of a core  {share / BUDGET_CPU:7.1%} of budget"
        f"  {cpu / secs * 1e3:7.3f} ms/s {note}"
    )


def parts(w: Window) -> dict[str, float]:
    """The window's CPU by part, ms/s."""
    secs = w.seconds
    a = w.accounts
    out: dict[str, float] = {}
    names = sorted({k.split(":", 1)[1] for k in a if k.startswith(("ingest:", "collect:"))})
    names = sorted({n.removesuffix(" (thread)") for n in names} - {"engine", "alerting"})
    for name in names:
        out[f"{name}: collect + ingest"] = (
            a.get(f"collect:{name}", 0.0)
            + a.get(f"collect:{name} (thread)", 0.0)
            + a.get(f"ingest:{name}", 0.0)
        )
    out["engine: tick + ingest"] = a.get("engine", 0.0) + a.get("ingest:engine", 0.0)
    out["store.expire"] = a.get("expire", 0.0)
    out["alerting: collect + ingest"] = a.get("alerting", 0.0) + a.get("ingest:alerting", 0.0)
    scrape_each, _ = w.scrape
    out[f"/metrics render every {SCRAPE_INTERVAL:g} s"] = scrape_each / SCRAPE_INTERVAL * secs
    rest = "rest (event loop, tick loop, HTTP, thread hand-offs, GPU threads)"
    out[rest] = w.daemon_cpu - sum(out.values())
    return {k: v / secs * 1e3 for k, v in out.items()}


def report(shape: Shape, w: Window, *, profiled: bool) -> None:
    """Print one window's figures."""
    secs = w.seconds
    tag = " (PROFILED: cProfile overhead included, not comparable)" if profiled else ""
    print()
    print(
        f"{shape.label}: {shape.describe()}; 1 s polling, engine + alerting on, "
        f"/metrics every {SCRAPE_INTERVAL:g} s"
    )
    print(f"window {secs:.1f} s after warm-up; collections {w.collections}{tag}")
    print(
        f"series in the store: {w.series}, {w.series_with_history} with history "
        f"({w.history_points} points once full; {w.padded_points} padded to fill the rings)"
    )
    _row("DAEMON CPU (process - simulators)", w.daemon_cpu, secs)
    _row(
        "  of all that, garbage collection",
        w.gc_seconds,
        secs,
        f"({w.gc_full} full collections)",
    )
    print("  of which (collectors: their tasks, spawned tasks and socket callbacks):")
    for name, ms in parts(w).items():
        collector = name.split(":", 1)[0]
        ingest = w.accounts.get(f"ingest:{collector}")
        note = "" if ingest is None else f"(ingest {ingest / secs * 1e3:.3f} ms/s)"
        _row(name, ms * secs / 1e3, secs, note)
    print("  threads (schedstat, simulators NOT subtracted):")
    for name, cpu in sorted(w.threads.items(), key=lambda kv: -kv[1]):
        if cpu > 0:
            _row(f"  thread {name}", cpu, secs)
    print("  simulators (not in the daemon's figure):")
    for k, v in sorted(w.accounts.items()):
        if k.startswith("sim:"):
            _row(f"  {k} (in process)", v, secs)
    _row("  SNMP agent + scraper (child process)", w.child_cpu, secs)
    print(
        f"  RSS early {w.rss_early:.1f} MiB, at the end {w.rss_end:.1f} MiB, "
        f"history full {w.rss_steady:.1f} MiB ({w.rss_steady / BUDGET_RSS_MIB:.1%} of 80 MiB), "
        f"peak {w.hwm:.1f} MiB; before the daemon was built: {w.rss_before_daemon:.1f} MiB"
    )


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def run_shape(
    shape: Shape,
    runs: int,
    warmup: float,
    seconds: float,
    profile: cProfile.Profile | None,
    *,
    no_gc_freeze: bool = False,
) -> list[Window]:
    """``runs`` fresh daemons on one shape, each in a fresh process (RSS is per process:
    a second daemon in the same interpreter would start from the first one's heap)."""
    if profile is not None:
        return _run_here(shape, runs, warmup, seconds, profile)
    out: list[Window] = []
    for _ in range(runs):
        job = {
            "shape": asdict(shape),
            "warmup": warmup,
            "seconds": seconds,
            "no_gc_freeze": no_gc_freeze,
        }
        proc = subprocess.run(
            [sys.executable, __file__, "--run", json.dumps(job)],
            capture_output=True,
            text=True,
            timeout=warmup + seconds + 180,
            check=False,
        )
        sys.stdout.write(proc.stderr)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            msg = f"measurement run failed ({proc.returncode}): {proc.stdout[-2000:]}"
            raise RuntimeError(msg)
        sys.stdout.write("\n".join(lines[:-1]) + ("\n" if len(lines) > 1 else ""))
        out.append(Window(**json.loads(lines[-1])))
    return out


def _run_here(
    shape: Shape, runs: int, warmup: float, seconds: float, profile: cProfile.Profile | None
) -> list[Window]:
    """``runs`` daemons in this process against one child (agent + scraper)."""
    http_port = free_tcp_port()
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            json.dumps([http_port, shape.switch_ports, shape.uplinks]),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    out: list[Window] = []
    try:
        assert child.stdout is not None
        snmp_port = int(child.stdout.readline())
        for _ in range(runs):
            out.append(
                asyncio.run(
                    measure(
                        shape,
                        snmp_port=snmp_port,
                        http_port=http_port,
                        child_pid=child.pid,
                        warmup=warmup,
                        seconds=seconds,
                        profile=profile,
                    )
                )
            )
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
    return out


def summary(shape: Shape, ws: Sequence[Window]) -> dict[str, Any]:
    """min / median / max over runs of one shape, as ratios to the budgets."""
    cpu = [w.daemon_cpu / w.seconds for w in ws]
    rss = [w.rss_steady for w in ws]
    sim = [w.sim / w.seconds for w in ws]
    ref = [w.reference_cpu for w in ws]
    med = sorted(ws, key=lambda w: w.daemon_cpu / w.seconds)[len(ws) // 2]
    return {
        "shape": shape.label,
        "describe": shape.describe(),
        "runs": len(ws),
        "cpu_ms_s": {"min": min(cpu) * 1e3, "median": _median(cpu) * 1e3, "max": max(cpu) * 1e3},
        "cpu_ratio": _median(cpu) / BUDGET_CPU,
        "cpu_ratio_min": min(cpu) / BUDGET_CPU,
        "rss_early_mib": _median([w.rss_early for w in ws]),
        "rss_steady_mib": {"min": min(rss), "median": _median(rss), "max": max(rss)},
        "rss_steady_ratio": _median(rss) / BUDGET_RSS_MIB,
        "sim_ms_s": {"min": min(sim) * 1e3, "median": _median(sim) * 1e3, "max": max(sim) * 1e3},
        "child_ms_s": _median([w.child_cpu / w.seconds for w in ws]) * 1e3,
        "reference_spread": max(ref) / min(ref) if min(ref) > 0 else math.inf,
        "series": med.series,
        "series_with_history": med.series_with_history,
        "parts_ms_s": parts(med),
    }


def print_summary(s: dict[str, Any]) -> None:
    """One shape's min/median line."""
    c, r, sim = s["cpu_ms_s"], s["rss_steady_mib"], s["sim_ms_s"]
    print(
        f"\n{s['shape']} ({s['runs']} runs): daemon CPU min {c['min']:.2f} / median "
        f"{c['median']:.2f} ms/s = {s['cpu_ratio']:.2f}x of the 10 ms/s budget "
        f"(min {s['cpu_ratio_min']:.2f}x); RSS history full min {r['min']:.1f} / median "
        f"{r['median']:.1f} MiB = {s['rss_steady_ratio']:.2f}x of 80 MiB "
        f"(early {s['rss_early_mib']:.1f} MiB)"
    )
    print(
        f"  simulators in process min {sim['min']:.2f} / median {sim['median']:.2f} / max "
        f"{sim['max']:.2f} ms/s (excluded); SNMP agent + scraper child {s['child_ms_s']:.2f} "
        f"ms/s; reference workload spread across runs {s['reference_spread']:.2f}x "
        "(CPU noise of the shared machine)"
    )


def main() -> None:
    """Parse arguments; run the child or the measurement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window")
    ap.add_argument("--runs", type=int, default=3, help="runs of the DESIGN node (min/median)")
    ap.add_argument(
        "--scaling-seconds",
        type=float,
        default=20.0,
        help="measured window of each scaling-table run (0: no scaling table)",
    )
    ap.add_argument("--profile", type=Path, default=None, help="write a cProfile here")
    ap.add_argument(
        "--shape",
        default=None,
        choices=[s.label for s in SCALING],
        help="measure only this shape of the scaling table (--runs runs; for iterating)",
    )
    ap.add_argument(
        "--json", action="store_true", help="print the headline ratios as one JSON line last"
    )
    add_results_option(ap)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--no-gc-freeze", action="store_true", help="A/B: the daemon without gc.freeze()"
    )
    args = ap.parse_args()
    if args.run is not None:
        job = json.loads(args.run)
        if job.get("no_gc_freeze"):
            # A/B of the daemon's gc.freeze() after start-up (measurement only).
            setattr(gc, "freeze", lambda: None)  # noqa: B010 - patched for the A/B run only
        (w,) = _run_here(Shape(**job["shape"]), 1, job["warmup"], job["seconds"], None)
        print(json.dumps(asdict(w)))
        return
    if args.child is not None:
        http_port, ports_n, uplinks = json.loads(args.child)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_child(http_port, ports_n, uplinks))
        return
    # The loop thread's CPU clock, not wall time: on a shared machine wall time
    # charges a function for every moment the thread was preempted inside it.
    prof = cProfile.Profile(time.thread_time) if args.profile is not None else None
    shape = DESIGN if args.shape is None else next(s for s in SCALING if s.label == args.shape)
    windows = run_shape(
        shape, args.runs, args.warmup, args.seconds, prof, no_gc_freeze=args.no_gc_freeze
    )
    for w in windows:
        report(shape, w, profiled=prof is not None)
    head = summary(shape, windows)
    print_summary(head)
    table: list[dict[str, Any]] = []
    if args.scaling_seconds > 0 and shape == DESIGN:
        for shape in SCALING:
            if shape == DESIGN:
                table.append(head)
                continue
            ws = run_shape(shape, 1, min(args.warmup, 10.0), args.scaling_seconds, None)
            report(shape, ws[0], profiled=False)
            table.append(summary(shape, ws))
        print("\nscaling (one run each, except the DESIGN node's median):")
        print(f"  {'shape':<24} {'CPU ms/s':>9} {'x budget':>9} {'RSS MiB':>8} {'x budget':>9}")
        for s in table:
            print(
                f"  {s['shape']:<24} {s['cpu_ms_s']['median']:9.2f} {s['cpu_ratio']:9.2f} "
                f"{s['rss_steady_mib']['median']:8.1f} {s['rss_steady_ratio']:9.2f}"
            )
    print(
        "\nbudget (DESIGN.md): CPU < 1 % of one core (10 ms/s), RSS < 80 MiB at steady state "
        "(history full); switch mode: a 512-port switch < 10 % of a core. CPU figures are CPU "
        "time on a shared 2-core machine: compare them as ratios within this run."
    )
    if prof is not None:
        prof.dump_stats(str(args.profile))
        print()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    write_results(args.results, {"design": head, "scaling": table})
    if args.json:
        print(
            json.dumps(
                {"cpu_ratio": head["cpu_ratio"], "rss_steady_ratio": head["rss_steady_ratio"]}
            )
        )


if __name__ == "__main__":
    main()
