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
Per-collector shares are the CPU of each ``collect()`` coroutine's own steps
(each step timed with the event-loop thread's CPU clock, simulator calls
inside it subtracted) plus its ``store.ingest``; the engine's share is
``Engine.tick`` + its ingest. Everything else (event loop, supervisor,
alerting's outbox scan, the HTTP server and its scrapes, NVML worker and event
threads) is listed as the rest. RSS is the whole process's, simulators
included (they hold a few hundred small objects and file paths).

Nothing is asserted; the figures are ratios to the DESIGN.md budget from this
one run. ``--profile FILE`` also writes a cProfile of the event-loop thread
over the window and prints the top functions (that run's CPU figures include
the profiler's overhead and are marked as such).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fabricwatch.clock import Clock
from fabricwatch.collector import Collector, CollectorEnv, CollectorFactory, Registry
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.gpu import Activity, GpuCollector, GpuSample, GpuSettings, SimulatedGPUs
from fabricwatch.collectors.gpu._types import GpuEvent
from fabricwatch.collectors.nic import NicCollector, NicSettings
from fabricwatch.collectors.nic._fixture import NicFixture, mlx5_ethtool_names
from fabricwatch.collectors.storage import StorageCollector, StorageSettings
from fabricwatch.collectors.switch.simagent import SimAgent, SimPort, SimSwitch
from fabricwatch.config import parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.logs import configure_logging
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.store import IngestResult, SnapshotStore

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


class CpuBucket:
    """Thread-CPU seconds of timed calls, from any thread."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def add(self, dt: float) -> None:
        with self._lock:
            self.seconds += dt

    def timed(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` with its calling thread's CPU added to this bucket."""

        def run(*args: Any, **kw: Any) -> T:
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                self.add(time.thread_time() - t0)

        return run


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
    """A collector whose ``collect()`` CPU is counted (the inner collector is the real one)."""

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
        """Start the inner collector."""
        await self._inner.start()

    async def collect(self) -> Sequence[Reading]:
        """The inner collector's readings; its CPU goes to the bucket."""
        result: Sequence[Reading] = await _TimedAwait(self._inner.collect(), self._bucket)
        return result

    async def close(self) -> None:
        """Close the inner collector."""
        await self._inner.close()


@dataclass
class Accounts:
    """Where the measured CPU went."""

    collect: dict[str, CpuBucket] = field(default_factory=dict)
    ingest: dict[str, CpuBucket] = field(default_factory=dict)
    sim: dict[str, CpuBucket] = field(default_factory=dict)
    engine: CpuBucket = field(default_factory=CpuBucket)
    alerting: CpuBucket = field(default_factory=CpuBucket)
    expire: CpuBucket = field(default_factory=CpuBucket)

    def bucket(self, table: dict[str, CpuBucket], name: str) -> CpuBucket:
        b = table.get(name)
        if b is None:
            b = table[name] = CpuBucket()
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

    def __init__(self, bucket: CpuBucket, clock: Callable[[], float]) -> None:
        super().__init__(GPU_MODEL, GPUS, clock)
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
        await self._inner.start()

    async def collect(self) -> Sequence[Reading]:
        """Write the source as of now, then collect (the write is simulator CPU)."""
        self._sync(time.monotonic())
        return await super().collect()


class Node:
    """Sysfs, procfs and GPU simulators of one DESIGN.md-sized node under ``root``."""

    def __init__(self, root: Path, acct: Accounts) -> None:
        self.root = root
        self.acct = acct
        self.sys_root = root / "sys"
        self.proc_root = root / "proc"
        self.ethtool_dir = root / "ethtool"
        self.state_dir = root / "state"
        self.t0 = time.monotonic()
        self.gpus = TimedGPUs(acct.bucket(acct.sim, "gpu"), time.monotonic)
        self.gpus.set_activity(None, Activity.BUSY)
        self.nic = NicFixture(self.sys_root, self.ethtool_dir)
        for i in range(NICS):
            pci = f"0000:{0x18 + 0x10 * i:02x}:00.0"
            self.nic.add_pci(pci, numa=i // 4)
            self.nic.add_netdev(f"eth{i}", pci=pci, speed_mbps=LINK_GBPS * 1000)
            self.nic.add_rdma_port(f"mlx5_{i}", pci=pci, netdev=f"eth{i}", rate_gbps=LINK_GBPS)
            self.nic.add_ethtool(f"eth{i}", mlx5_ethtool_names((PRIORITY,)))
        self.ckpt_dirs = [root / name for name, *_ in CKPT_DEVICES]
        for d in (self.proc_root / "self", self.state_dir, *self.ckpt_dirs):
            d.mkdir(parents=True, exist_ok=True)
        for i in range(GPUS):
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

    def sync_nic(self, now: float) -> None:
        """Write every port's counters as of ``now`` (in place, as sysfs reads them)."""
        t = now - self.t0
        for i in range(NICS):
            dev, netdev = f"mlx5_{i}", f"eth{i}"
            for name, rate in _SYSFS_RATES.items():
                v = int(rate * t)
                self.nic.set(dev, "1", name, v % (1 << 32) if name == "port_xmit_wait" else v)
            stats = self.nic._stats[netdev]  # one dump write per port, not one per statistic
            for name, rate in _ETHTOOL_RATES.items():
                stats[name] = int(rate * t)
            self.nic._flush(netdev)

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
        """The daemon's config document."""
        return {
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
                        {"name": "leaf1", "host": "127.0.0.1", "port": snmp_port, "timeout": 1.0}
                    ],
                    "mode": "node",
                },
            },
        }


# -- the child: SNMP agent + Prometheus-like scraper -----------------------------------------


def _switch() -> SimSwitch:
    ports = [
        SimPort(
            i + 1,
            f"swp{i + 1}",
            neighbour_name=NODE if i < UPLINKS else f"other-node-{i}",
            neighbour_port=f"eth{i}",
        )
        for i in range(SWITCH_PORTS)
    ]
    sw = SimSwitch(ports)
    for p in sw.ports:
        sw.set_rate(p.if_index, "rx_bytes", 2.5e9)
        sw.set_rate(p.if_index, "tx_bytes", 2.4e9)
        sw.pfc_storm(p.if_index, PRIORITY, "rx", 0.001)
    return sw


async def _child(http_port: int) -> None:
    agent = await SimAgent(_switch()).start("127.0.0.1", 0)
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
        t0 = time.thread_time()
        try:
            inner(*args)
        finally:
            acct.engine.add(time.thread_time() - t0)

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
    from prometheus_client import generate_latest

    web = daemon._web
    assert web is not None
    registry = web._registry
    body = generate_latest(registry)
    t0 = time.thread_time()
    for _ in range(n):
        generate_latest(registry)
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
    accounts: dict[str, float]
    threads: dict[str, float]
    series: int
    rss: float
    hwm: float
    rss_before_daemon: float
    collections: dict[str, int]
    scrape: tuple[float, int]


async def measure(
    snmp_port: int, http_port: int, warmup: float, seconds: float, profile: cProfile.Profile | None
) -> Window:
    """Run the daemon on a fresh simulated node; measure ``seconds`` after ``warmup``."""
    root = Path(tempfile.mkdtemp(prefix="fw-budget-"))
    daemon_task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        acct = Accounts()
        node = Node(root, acct)
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
        if not await _until(lambda: daemon.engine is not None and daemon.supervisor.ready(), 30):
            msg = "the daemon did not become ready"
            raise RuntimeError(msg)
        _timed_tick_parts(daemon, acct)
        await asyncio.sleep(warmup)
        states = {s.name: s.collections for s in daemon.supervisor.states}
        a0, th0 = acct.snapshot(), thread_cpu()
        c0 = time.process_time()
        w0 = time.monotonic()
        if profile is not None:
            profile.enable()
        await asyncio.sleep(seconds)
        if profile is not None:
            profile.disable()
        c1 = time.process_time()
        w1 = time.monotonic()
        a1, th1 = acct.snapshot(), thread_cpu()
        rss, hwm = rss_mib()
        scrape = scrape_cpu(daemon)
        down = [s.name for s in daemon.supervisor.states if not s.up]
        if down:
            print(f"WARNING: collectors down at the end: {down}")
        return Window(
            seconds=w1 - w0,
            process_cpu=c1 - c0,
            accounts={k: v - a0.get(k, 0.0) for k, v in a1.items()},
            threads={k: v - th0.get(k, 0.0) for k, v in th1.items()},
            series=len(daemon.store),
            rss=rss,
            hwm=hwm,
            rss_before_daemon=rss_before,
            scrape=scrape,
            collections={
                s.name: s.collections - states.get(s.name, 0) for s in daemon.supervisor.states
            },
        )
    finally:
        if daemon is not None and daemon_task is not None:
            daemon.request_stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(daemon_task, 20)
        shutil.rmtree(root, ignore_errors=True)


def _row(name: str, cpu: float, secs: float, note: str = "") -> None:
    share = cpu / secs
    print(
        f"  {name:<34} {share * 100:7.3f} % of a core  {share / BUDGET_CPU:7.1%} of budget"
        f"  {cpu / secs * 1e3:7.3f} ms/s {note}"
    )


def report(w: Window, *, profiled: bool) -> dict[str, float]:
    """Print the window's figures; return the headline numbers."""
    secs = w.seconds
    a = w.accounts
    sim = sum(v for k, v in a.items() if k.startswith("sim:"))
    daemon = w.process_cpu - sim
    tag = " (PROFILED: cProfile overhead included, not comparable)" if profiled else ""
    print()
    print(
        f"node daemon, {GPUS} x {GPU_MODEL} x 18 NVLinks, {NICS} NIC ports, {UPLINKS} switch "
        f"uplinks (SNMP, {SWITCH_PORTS}-port leaf), {len(CKPT_DEVICES)} storage paths; "
        f"1 s polling, engine + alerting on, /metrics every {SCRAPE_INTERVAL:g} s"
    )
    print(f"window {secs:.1f} s after warm-up; collections {w.collections}{tag}")
    print(f"series in the store: {w.series}")
    print()
    _row("DAEMON CPU (process - simulators)", daemon, secs)
    print("  of which:")
    names = sorted(
        {k.split(":", 1)[1] for k in a if k.startswith("ingest:")} - {"engine", "alerting"}
    )
    shared = 0.0
    for name in names:
        own = a.get(f"collect:{name}", 0.0) + a.get(f"collect:{name} (thread)", 0.0)
        ing = a.get(f"ingest:{name}", 0.0)
        shared += own + ing
        _row(
            f"{name}: collect + ingest",
            own + ing,
            secs,
            f"(collect {own / secs * 1e3:.3f} + ingest {ing / secs * 1e3:.3f} ms/s)",
        )
    for key, label in (("engine", "engine: tick + ingest"), ("expire", "store.expire")):
        shared += a.get(key, 0.0)
        _row(label, a.get(key, 0.0), secs)
    scrape_each, scrape_bytes = w.scrape
    scrape = scrape_each / SCRAPE_INTERVAL * secs
    alerting = a.get("alerting", 0.0) + a.get("ingest:alerting", 0.0)
    shared += scrape + alerting
    _row("alerting: collect + ingest", alerting, secs)
    _row(
        f"/metrics render every {SCRAPE_INTERVAL:g} s",
        scrape,
        secs,
        f"({scrape_each * 1e3:.1f} ms per scrape, {scrape_bytes / 1024:.0f} KiB)",
    )
    _row("rest (event loop, supervisor, HTTP, threads)", daemon - shared, secs)
    print("  threads (schedstat, simulators NOT subtracted):")
    for name, cpu in sorted(w.threads.items(), key=lambda kv: -kv[1]):
        if cpu > 0:
            _row(f"  thread {name}", cpu, secs)
    print("  excluded simulator CPU:")
    for k, v in sorted(a.items()):
        if k.startswith("sim:"):
            _row(f"  {k}", v, secs)
    print()
    print(
        f"  RSS {w.rss:6.1f} MiB ({w.rss / BUDGET_RSS_MIB:6.1%} of the 80 MiB budget), "
        f"peak {w.hwm:.1f} MiB ({w.hwm / BUDGET_RSS_MIB:.1%}); before the daemon was built "
        f"(interpreter, imports, simulators): {w.rss_before_daemon:.1f} MiB"
    )
    print("budget (DESIGN.md): CPU < 1 % of one core, RSS < 80 MiB")
    return {"cpu_ratio": daemon / secs / BUDGET_CPU, "rss_ratio": w.hwm / BUDGET_RSS_MIB}


def main() -> None:
    """Parse arguments; run the child or the measurement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window")
    ap.add_argument("--profile", type=Path, default=None, help="write a cProfile here")
    ap.add_argument("--json", type=Path, default=None, help="write the headline ratios here")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_child(args.child))
        return
    prof = cProfile.Profile() if args.profile is not None else None
    http_port = free_tcp_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", str(http_port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        snmp_port = int(child.stdout.readline())
        window = asyncio.run(measure(snmp_port, http_port, args.warmup, args.seconds, prof))
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
    head = report(window, profiled=prof is not None)
    if prof is not None:
        prof.dump_stats(str(args.profile))
        print()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    if args.json is not None:
        args.json.write_text(json.dumps(head) + "\n")


if __name__ == "__main__":
    main()
