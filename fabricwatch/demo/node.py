"""The simulated node: a switch on loopback SNMP, GPUs behind the NVML facade,
a NIC sysfs tree and a storage procfs tree, all driven by one :class:`Condition`.

Only the hardware is simulated. The daemon runs its real collectors on it:

* the switch collector talks SNMPv2c over UDP to :class:`SimAgent` on
  127.0.0.1 and finds the node's uplinks through the agent's LLDP table;
* the GPU collector reads :class:`DemoGPUs` through the NVML facade (the
  facade's thread pool, timeouts and event thread included);
* the NIC collector reads a sysfs tree written by :class:`NicFixture` (and
  ``ethtool -S`` dumps) under the daemon's ``sys_root``;
* the storage collector reads ``diskstats`` and ``self/mountinfo`` under the
  daemon's ``proc_root`` — the **simulated storage backend**: a real slow
  write path needs root (a throttled block device, dm-delay or FUSE), so the
  checkpoint device's counters are written here instead.

Counters of file-backed sources are integrated from rates on the daemon's
clock and written just before their collector reads them, as the kernel
computes sysfs and procfs values when they are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fabricwatch.clock import Clock
from fabricwatch.collector import Collector, CollectorEnv, CollectorFactory, Registry
from fabricwatch.collectors import builtin_registry
from fabricwatch.collectors.gpu._collector import GpuCollector
from fabricwatch.collectors.gpu._settings import GpuSettings
from fabricwatch.collectors.gpu._types import GpuSample
from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.collectors.nic._settings import NicSettings
from fabricwatch.collectors.storage._collector import StorageCollector
from fabricwatch.collectors.storage._settings import StorageSettings
from fabricwatch.demo.scenarios import (
    CKPT,
    GPUS,
    HEALTHY,
    NIC,
    NIC_PORT,
    NODE,
    PRIORITY,
    SWITCH,
    UPLINK,
    Condition,
    Work,
)
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.testing.sim_gpu import Activity, SimulatedGPUs
from fabricwatch.testing.sim_nic import NicFixture, mlx5_ethtool_names
from fabricwatch.testing.sim_snmp import SimAgent, SimSwitch, demo_switch

GPU_MODEL = "H100"
NIC_PCI = "0000:3b:00.0"
NETDEV = "eth0"
LINK_GBPS = 200
LINK_BPS = LINK_GBPS * 1e9
RDMA_BYTES_PER_SECOND = 18e9
"""Healthy RDMA traffic of the training job on the NIC port."""
SWITCH_BYTES_PER_SECOND = 2.5e9
PAUSE_QUANTUM_BITS = 65535 * 512
XMIT_WAIT_TICK_BYTES = 8.0
JOB_ID = "4242"
PID_BASE = 100000
CKPT_DEVICE = ("nvme9n1", 259, 9)
"""The checkpoint filer's NVMe-oF namespace as the simulated kernel names it."""
ROOT_DEVICE = ("nvme0n1", 259, 0)
WRITE_OP_BYTES = 256 * 1024


class _Integral:
    """A counter that grows at a rate set from time to time (exact across changes)."""

    __slots__ = ("rate", "t0", "v0")

    def __init__(self, now: float, start: float = 0.0) -> None:
        self.v0 = start
        self.t0 = now
        self.rate = 0.0

    def value(self, now: float) -> float:
        return self.v0 + self.rate * max(0.0, now - self.t0)

    def set_rate(self, rate: float, now: float) -> None:
        self.v0 = self.value(now)
        self.t0 = now
        self.rate = rate


class _Rates:
    """Named integrals on one clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._c: dict[str, _Integral] = {}

    def set(self, name: str, rate: float) -> None:
        now = self._clock()
        c = self._c.get(name)
        if c is None:
            c = self._c[name] = _Integral(now)
        c.set_rate(rate, now)

    def bump(self, name: str, n: float) -> None:
        """Add ``n`` events at once."""
        now = self._clock()
        c = self._c.get(name)
        if c is None:
            c = self._c[name] = _Integral(now)
        c.v0 = c.value(now) + n
        c.t0 = now

    def get(self, name: str, now: float) -> int:
        c = self._c.get(name)
        return 0 if c is None else int(c.value(now))

    def rate(self, name: str) -> float:
        c = self._c.get(name)
        return 0.0 if c is None else c.rate


class DemoGPUs(SimulatedGPUs):
    """:class:`SimulatedGPUs` that can also run slower than full speed.

    A network slowdown leaves a GPU busy but doing less work: SM, tensor and
    DRAM activity and the power above idle scale with the load. NVLink
    counters keep the simulator's rates (no engine rule reads their level).
    """

    def __init__(self, model: str, count: int, clock: Callable[[], float]) -> None:
        super().__init__(model, count, clock)
        self._load = [1.0] * count

    def set_load(self, load: float) -> None:
        """Share of full-speed work every GPU does (1.0 = full speed)."""
        self._load = [max(0.0, min(1.0, load))] * self.count

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        """The simulator's sample, scaled by the GPU's load."""
        s = super().sample(index, fabric=fabric)
        load = self._load[index]
        if load >= 1.0:
            return s

        def scaled(v: float | None) -> float | None:
            return None if v is None else v * load

        idle = self.profile.idle_watts
        power = s.power_watts
        return dataclasses.replace(
            s,
            sm_active=scaled(s.sm_active),
            sm_occupancy=scaled(s.sm_occupancy),
            tensor_active=scaled(s.tensor_active),
            dram_active=scaled(s.dram_active),
            power_watts=None if power is None else idle + (power - idle) * load,
        )


class SyncedCollector:
    """A real collector over a file-backed simulated source, read at one instant per cycle.

    Before each cycle the source is written as of now, and the inner
    collector's clock reads that same instant for the whole cycle (its
    readings are stamped with it): at ``--speed 10`` a few real milliseconds
    between writing and reading would otherwise skew every rate by ten times
    as much. Real sysfs has no such gap; the demo's files must not invent one.
    """

    def __init__(
        self,
        build: Callable[[CollectorEnv], Collector],
        env: CollectorEnv,
        sync: Callable[[float], None],
    ) -> None:
        self._clock = env.monotonic
        self._at = env.monotonic()
        self._sync = sync
        self._inner = build(dataclasses.replace(env, monotonic=self.sample_time))

    def sample_time(self) -> float:
        """The instant the source was last written (the inner collector's clock)."""
        return self._at

    @property
    def name(self) -> str:
        """The inner collector's name."""
        return self._inner.name

    def metrics(self) -> Sequence[MetricSpec]:
        """The inner collector's families."""
        return self._inner.metrics()

    def _write(self) -> float:
        self._at = self._clock()
        self._sync(self._at)
        return self._at

    async def start(self) -> None:
        """Write the source once, then start the inner collector."""
        self._write()
        await self._inner.start()

    async def collect(self) -> Sequence[Reading]:
        """Write the source as of now, collect, and stamp the readings with that instant."""
        at = self._write()
        readings = await self._inner.collect()
        return [r if r.ts is not None else r._replace(ts=at) for r in readings]

    async def close(self) -> None:
        """Close the inner collector."""
        await self._inner.close()


class SimulatedNode:
    """Every simulated part of one GPU node, under ``root`` and on ``clock``.

    Call :meth:`start` (binds the SNMP agent) before building the daemon's
    config, :meth:`apply` to change the node's condition, :meth:`close` at the end.
    """

    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        mono = clock.monotonic
        self.sys_root = root / "sys"
        self.proc_root = root / "proc"
        self.ethtool_dir = root / "ethtool"
        self.state_dir = root / "state"
        self.ckpt_dir = root / CKPT
        for d in (self.proc_root / "self", self.state_dir, self.ckpt_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.switch: SimSwitch = demo_switch(4, node=NODE, clock=mono)
        self.agent = SimAgent(self.switch)
        self.gpus = DemoGPUs(GPU_MODEL, GPUS, mono)
        self.nic = NicFixture(self.sys_root, self.ethtool_dir)
        self._nic_rates = _Rates(mono)
        self._disk_rates = _Rates(mono)
        self.condition: Condition | None = None
        self._build_nic()
        self._build_proc()
        self.apply(HEALTHY)

    # -- construction ---------------------------------------------------------

    def _build_nic(self) -> None:
        fx = self.nic
        fx.add_pci(NIC_PCI, numa=0)
        fx.add_netdev(NETDEV, pci=NIC_PCI, speed_mbps=LINK_GBPS * 1000)
        fx.add_rdma_port(NIC, NIC_PORT, pci=NIC_PCI, rate_gbps=LINK_GBPS, netdev=NETDEV)
        fx.add_ethtool(NETDEV, mlx5_ethtool_names((PRIORITY,)))

    def _build_proc(self) -> None:
        for i in range(GPUS):
            pid = self.proc_root / str(PID_BASE + i)
            pid.mkdir(parents=True, exist_ok=True)
            (pid / "cgroup").write_text(
                f"0::/system.slice/slurmstepd.scope/job_{JOB_ID}/step_0/user/task_{i}\n",
                encoding="utf-8",
            )
        ckpt = str(self.ckpt_dir.resolve()).replace(" ", "\\040")
        name, major, minor = CKPT_DEVICE
        rname, rmajor, rminor = ROOT_DEVICE
        (self.proc_root / "self" / "mountinfo").write_text(
            f"22 1 {rmajor}:{rminor} / / rw,relatime - ext4 /dev/{rname}p2 rw\n"
            f"35 22 {major}:{minor} / {ckpt} rw,relatime - xfs /dev/{name} rw,attr2\n",
            encoding="utf-8",
        )
        self._disk_rates.set(f"{rname}.reads", 30.0)
        self._disk_rates.set(f"{rname}.read_sectors", 30.0 * 64)
        self._disk_rates.set(f"{rname}.read_ms", 30.0 * 0.2)
        self._disk_rates.set(f"{rname}.writes", 12.0)
        self._disk_rates.set(f"{rname}.write_sectors", 12.0 * 32)
        self._disk_rates.set(f"{rname}.write_ms", 12.0 * 0.05)
        self._disk_rates.set(f"{rname}.io_ms", 8.0)
        self.sync_storage(self.clock.monotonic())

    async def start(self) -> None:
        """Bind the SNMP agent on 127.0.0.1 (a free port)."""
        await self.agent.start("127.0.0.1", 0)

    @property
    def snmp_port(self) -> int:
        """The agent's UDP port."""
        return self.agent.port

    def close(self) -> None:
        """Stop answering SNMP and release waiters on the simulated GPUs."""
        self.agent.close()
        self.gpus.shutdown()

    # -- the scenario's knobs --------------------------------------------------

    def apply(self, cond: Condition) -> None:
        """Make the node's hardware show ``cond`` from now on (only changes are applied)."""
        old = self.condition
        self.condition = cond
        if old is None or (old.work, old.load) != (cond.work, cond.load):
            self._apply_gpus(cond)
        if old is None or old.nvlink_down != cond.nvlink_down:
            before = set(old.nvlink_down) if old is not None else set()
            after = set(cond.nvlink_down)
            for gpu, link in sorted(after - before):
                self.gpus.drop_nvlink(gpu, link)
            for gpu, link in sorted(before - after):
                self.gpus.restore_nvlink(gpu, link)
        self._apply_switch(cond)
        self._apply_nic(cond, old)
        self._apply_storage(cond)

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Raise an XID event on one GPU (through the NVML event path)."""
        self.gpus.inject_xid(gpu, xid)

    def _apply_gpus(self, cond: Condition) -> None:
        g = self.gpus
        if cond.work is Work.WAIT:
            for i in range(GPUS):
                g.set_activity(i, Activity.IDLE, pids=(PID_BASE + i,))
            g.set_load(1.0)
        elif cond.work is Work.HUNG:
            g.set_activity(None, Activity.HUNG)
            g.set_load(1.0)
        else:
            g.set_activity(None, Activity.BUSY)
            g.set_load(cond.load if cond.work is Work.SLOW else 1.0)

    def _apply_switch(self, cond: Condition) -> None:
        sw = self.switch
        sw.pfc_storm(UPLINK, PRIORITY, "rx", cond.uplink_pause)
        sw.pfc_storm(UPLINK, PRIORITY, "tx", cond.uplink_pause * 0.02)
        sw.set_rate(UPLINK, "rx_bytes", SWITCH_BYTES_PER_SECOND * cond.traffic)
        sw.set_rate(UPLINK, "tx_bytes", SWITCH_BYTES_PER_SECOND * 0.96 * cond.traffic)
        sw.set_up(UPLINK, cond.link_up)

    def _apply_nic(self, cond: Condition, old: Condition | None) -> None:
        r = self._nic_rates
        data = RDMA_BYTES_PER_SECOND * cond.traffic
        r.set("port_xmit_data", data / 4)
        r.set("port_rcv_data", data * 0.98 / 4)
        r.set("port_xmit_packets", data / 4096)
        r.set("port_rcv_packets", data * 0.98 / 4096)
        r.set("np_ecn_marked_roce_packets", cond.ecn_rate)
        r.set("np_cnp_sent", cond.ecn_rate * 0.9)
        r.set("rp_cnp_handled", cond.ecn_rate * 0.8)
        r.set("port_xmit_wait", cond.xmit_wait * LINK_BPS / (XMIT_WAIT_TICK_BYTES * 8))
        if old is not None and old.link_up and not cond.link_up:
            r.bump("link_downed", 1)
        for direction, ratio in (("rx", cond.nic_pause), ("tx", cond.nic_pause * 0.2)):
            r.set(f"{direction}_prio{PRIORITY}_pause", ratio * LINK_BPS / PAUSE_QUANTUM_BITS)
            r.set(f"{direction}_prio{PRIORITY}_pause_duration", ratio * 1e6)
        r.set("rx_bytes", data * 0.98)
        r.set("tx_bytes", data)
        if old is None or old.link_up != cond.link_up:
            self.nic.set_state(NIC, NIC_PORT, 4 if cond.link_up else 1)

    def _apply_storage(self, cond: Condition) -> None:
        r = self._disk_rates
        name = CKPT_DEVICE[0]
        ops = cond.ckpt_write_rate / WRITE_OP_BYTES
        r.set(f"{name}.writes", ops)
        r.set(f"{name}.write_sectors", cond.ckpt_write_rate / 512)
        r.set(f"{name}.write_ms", ops * cond.ckpt_latency * 1000)
        r.set(f"{name}.io_ms", min(1000.0, ops * cond.ckpt_latency * 1000))
        r.set(f"{name}.flushes", 2.0)
        r.set(f"{name}.flush_ms", 2.0 * cond.ckpt_latency * 1000)

    # -- file-backed sources, written when read ----------------------------------

    _SYSFS = (
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
        "rp_cnp_handled",
        "link_downed",
    )
    _ETHTOOL = (
        f"rx_prio{PRIORITY}_pause",
        f"rx_prio{PRIORITY}_pause_duration",
        f"tx_prio{PRIORITY}_pause",
        f"tx_prio{PRIORITY}_pause_duration",
        "rx_bytes",
        "tx_bytes",
    )

    def sync_nic(self, now: float) -> None:
        """Write the NIC's counters as of ``now`` (sysfs and the ethtool dump)."""
        r = self._nic_rates
        for name in self._SYSFS:
            self.nic.set(NIC, NIC_PORT, name, r.get(name, now))
        # port_xmit_wait is a 32-bit PMA counter: it wraps, as on real HCAs.
        self.nic.set(NIC, NIC_PORT, "port_xmit_wait", r.get("port_xmit_wait", now) % (1 << 32))
        for name in self._ETHTOOL:
            self.nic.set_stat(NETDEV, name, r.get(name, now))

    def sync_storage(self, now: float) -> None:
        """Write ``diskstats`` as of ``now``."""
        r = self._disk_rates
        lines = []
        for name, major, minor in (ROOT_DEVICE, CKPT_DEVICE):
            v = [r.get(f"{name}.{f}", now) for f in _DISK_FIELDS]
            # in_flight is a gauge: the queue a slow device builds up.
            v[_IN_FLIGHT] = round(r.rate(f"{name}.write_ms") / 1000)
            lines.append(f"{major:4d} {minor:7d} {name} " + " ".join(str(x) for x in v))
        path = self.proc_root / "diskstats"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(path)

    # -- the daemon's view of this node --------------------------------------------

    def registry(self) -> Registry:
        """The built-in registry with GPU, NIC and storage factories over this node.

        The switch factory is the built-in one: its config points it at this
        node's SNMP agent. Each factory builds the real collector class.
        """
        reg = dict(builtin_registry())

        def gpu(settings: GpuSettings, env: CollectorEnv) -> Collector:
            return GpuCollector(settings, env, self.gpus)

        def nic(settings: NicSettings, env: CollectorEnv) -> Collector:
            return SyncedCollector(lambda e: NicCollector(settings, e), env, self.sync_nic)

        def storage(settings: StorageSettings, env: CollectorEnv) -> Collector:
            return SyncedCollector(lambda e: StorageCollector(settings, e), env, self.sync_storage)

        for name, create in (("gpu", gpu), ("nic", nic), ("storage", storage)):
            base = reg[name]
            reg[name] = CollectorFactory(
                name=name,
                settings=base.settings,
                create=create,
                description=f"{base.description} (demo: simulated hardware)",
                default_enabled=True,
            )
        return reg

    def config_table(self, *, listen: str, alerting: dict[str, Any] | None) -> dict[str, Any]:
        """The daemon's config document (as parsed TOML) for this node."""
        doc: dict[str, Any] = {
            "daemon": {
                "node": NODE,
                "state_dir": str(self.state_dir),
                "proc_root": str(self.proc_root),
                "sys_root": str(self.sys_root),
                "tick": 1.0,
                "shutdown_timeout": 10.0,
            },
            "web": {"listen": listen},
            "log": {"level": "error", "format": "console"},
            "engine": {"resolve_hold": 10.0},
            "collectors": {
                "gpu": {"backend": "simulated", "simulated_model": GPU_MODEL},
                "nic": {
                    "ethtool_stats_dir": str(self.ethtool_dir),
                    "gpu_locality": False,
                    "xmit_wait_tick_bytes": XMIT_WAIT_TICK_BYTES,
                },
                "storage": {
                    "paths": [{"name": CKPT, "path": str(self.ckpt_dir), "probe": False}],
                    "include_partitions": False,
                },
                "switch": {
                    "targets": [
                        {
                            "name": SWITCH,
                            "host": "127.0.0.1",
                            "port": self.snmp_port,
                            "timeout": 1.0,
                            "retries": 1,
                            "client": "native",
                        }
                    ],
                    "mode": "node",
                },
            },
        }
        if alerting is not None:
            doc["alerting"] = alerting
        return doc


_DISK_FIELDS = (
    "reads",
    "reads_merged",
    "read_sectors",
    "read_ms",
    "writes",
    "writes_merged",
    "write_sectors",
    "write_ms",
    "in_flight",
    "io_ms",
    "weighted_io_ms",
    "discards",
    "discards_merged",
    "discard_sectors",
    "discard_ms",
    "flushes",
    "flush_ms",
)
_IN_FLIGHT = _DISK_FIELDS.index("in_flight")
