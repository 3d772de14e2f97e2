"""One handler per injection kind, and the per-second node state they shape.

Each simulated second starts from healthy noise (:meth:`Second.healthy`);
every active injection's handler then adjusts it, in start order, and the
simulator turns the result into readings. A handler draws from the
scenario's one random stream, so the order of its draws is part of the
seed's meaning: add a kind by adding a handler and a :data:`KINDS` entry,
never by drawing in another handler.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fabricwatch.testing.sim_scenarios._model import Injection, NodeSpec, nvlink_collapse_lead


@dataclass(frozen=True, slots=True)
class Traits:
    """The simulated node's constants, drawn once from the scenario's seed.

    Attributes:
        node: the hardware.
        off: family groups the node lacks (``Scenario.families_off``).
        base_sm: SM activity of healthy training.
        period: seconds of the compute/communication duty cycle.
        phase: each GPU's offset in that cycle.
        limit: GPU power limit (W).
        idle_w: GPU idle power (W).
        nvl_bw: NVLink bytes/s per link at full work.
        nic_bw: RDMA bytes/s at full traffic.
        st_bytes: usual storage write rate (bytes/s).
        st_lat: usual storage write latency (s).
        probe_lat: usual storage probe latency (s).
        st_req: usual bytes per write request (small: logs, metrics, page-cache
            flushes of 16-100 KiB; derived, not drawn, so seeds keep their meaning).
        ecn_base: usual ECN marks/s.
        mem: GPU memory used by the job (bytes).
    """

    node: NodeSpec
    off: frozenset[str]
    base_sm: float
    period: float
    phase: tuple[float, ...]
    limit: float
    idle_w: float
    nvl_bw: float
    nic_bw: float
    st_bytes: float
    st_lat: float
    probe_lat: float
    ecn_base: float
    mem: float
    st_req: float = 64e3

    @classmethod
    def draw(
        cls, r: random.Random, node: NodeSpec, off: frozenset[str], storage_base: float
    ) -> Traits:
        """Draw the constants (this order of draws is the seed's meaning)."""
        base_sm = r.uniform(0.65, 0.9)
        period = r.uniform(1.3, 3.0)
        phase = tuple(r.uniform(0, 3) for _ in range(node.gpus))
        idle_w = r.uniform(70, 110)
        nvl_bw = r.uniform(20e9, 40e9)
        nic_bw = r.uniform(8e9, 20e9)
        st_bytes = r.uniform(2e6, 10e6)
        if storage_base > 0:
            st_bytes = storage_base
        st_lat = r.uniform(3e-3, 6e-3)
        probe_lat = r.uniform(4e-3, 8e-3)
        ecn_base = r.uniform(0, 40)
        mem = r.uniform(30e9, 70e9)
        return cls(
            node=node,
            off=off,
            base_sm=base_sm,
            period=period,
            phase=phase,
            limit=700.0,
            idle_w=idle_w,
            nvl_bw=nvl_bw,
            nic_bw=nic_bw,
            st_bytes=st_bytes,
            st_lat=st_lat,
            probe_lat=probe_lat,
            ecn_base=ecn_base,
            mem=mem,
            st_req=16e3 * (1.0 + st_bytes / 2e6),
        )


Link = tuple[str, str]
"""(GPU index, NVLink index)."""


@dataclass(slots=True)
class Second:
    """The node's condition during one simulated second.

    Attributes:
        pfc_sw: switch port PFC pause ratio.
        pfc_nic: host NIC PFC pause ratio.
        ecn: ECN marks/s.
        xmit_wait: share of time the NIC waited to transmit.
        st_bytes: storage bytes/s written.
        st_lat: storage write latency (s).
        probe_lat: storage probe latency (s).
        st_req: bytes per write request (0: the node's usual ``Traits.st_req``).
        act: multiplier on every GPU's work (0 = stalled).
        net: multiplier on the job's RDMA traffic.
        in_job: a job runs (processes, memory, job label).
        mode_util: 0.0: a stalled GPU reports no utilization (idle, not a
            hung collective spinning at ~100 %); None: it does.
        link_up: the NIC port and its switch port are up (1.0) or down.
        downed: link-down events this second.
        nvl_up: NVLinks that are down (0.0).
        nvl_scale: NVLinks whose throughput is scaled.
        nvl_err: NVLink error counts added this second.
        xids: (GPU, XID) events this second.
        unhealthy: GPUs NVML reports unhealthy.
        vanished: GPUs NVML no longer reports.
        idle_gpu: GPUs doing no work whatever ``act`` says.
        probe_fail: the storage probe timed out.
        burst: storage write-burst gauge.
        gaps: collectors that deliver nothing this second.
        reset: the NIC counters restart from zero.
        straggler: the last active straggler and seconds since its start.
        jobs_started: new jobs that started this second.
    """

    pfc_sw: float
    pfc_nic: float
    ecn: float
    xmit_wait: float
    st_bytes: float
    st_lat: float
    probe_lat: float
    act: float = 1.0
    net: float = 1.0
    in_job: bool = True
    mode_util: float | None = None
    link_up: float = 1.0
    downed: float = 0.0
    nvl_up: dict[Link, float] = field(default_factory=dict)
    nvl_scale: dict[Link, float] = field(default_factory=dict)
    nvl_err: dict[Link, float] = field(default_factory=dict)
    xids: list[tuple[str, int]] = field(default_factory=list)
    unhealthy: set[str] = field(default_factory=set)
    vanished: set[str] = field(default_factory=set)
    idle_gpu: set[str] = field(default_factory=set)
    probe_fail: bool = False
    burst: float = 0.0
    gaps: set[str] = field(default_factory=set)
    reset: bool = False
    straggler: tuple[Injection, float] | None = None
    jobs_started: int = 0
    st_req: float = 0.0

    @classmethod
    def healthy(cls, r: random.Random, traits: Traits) -> Second:
        """A healthy second's noise (this order of draws is the seed's meaning)."""
        # Rare short pause bursts on a healthy switch port.
        pfc_sw = r.random() * 0.02 if r.random() < 0.999 else r.uniform(0.05, 0.3)
        pfc_nic = r.random() * 0.01
        ecn = traits.ecn_base * (1 + r.random())
        xmit_wait = r.random() * 0.03
        st_bytes = traits.st_bytes * (0.5 + r.random())
        st_lat = traits.st_lat * (0.8 + 0.4 * r.random())
        probe_lat = traits.probe_lat * (0.8 + 0.4 * r.random())
        return cls(pfc_sw, pfc_nic, ecn, xmit_wait, st_bytes, st_lat, probe_lat)

    def stall_after_first_second(self, t: float) -> None:
        """The GPUs stall one second after the fault began."""
        if t >= 1:
            self.act = 0.0

    def finish(self) -> None:
        """Apply what depends on every injection of the second (the straggler's waits)."""
        if self.straggler is None:
            return
        inj, t = self.straggler
        step = 4 + 4 * inj.magnitude
        wait = 1 + 2 * inj.magnitude
        if t % step < wait:
            self.act = min(self.act, 0.02)


Handler = Callable[[Second, Injection, float, random.Random, Traits], None]
"""Adjusts a second for one active injection ``t`` seconds after its start."""
Culprits = Callable[[Injection, NodeSpec], tuple[str, ...]]
"""The culprit keys a fault's incident may name (the first is the exact one)."""


def _gpu(inj: Injection, n: NodeSpec) -> str:
    return str(inj.target % n.gpus)


# -- faults -------------------------------------------------------------------


def _pfc_storm(s: Second, inj: Injection, t: float, r: random.Random, _tr: Traits) -> None:
    """Variant even: the switch port pauses the NIC; odd: the NIC pauses the switch."""
    ratio = 0.85 + 0.15 * inj.magnitude
    if inj.variant % 2 == 0:
        s.pfc_nic = max(s.pfc_nic, 0.1 + 0.3 * r.random())
        s.pfc_sw = ratio
    else:
        s.pfc_sw = max(s.pfc_sw, 0.05 + 0.2 * r.random())
        s.pfc_nic = ratio
    s.net = 0.02
    s.stall_after_first_second(t)
    s.ecn *= 1 + 3 * r.random()


def _pfc_culprits(inj: Injection, n: NodeSpec) -> tuple[str, ...]:
    if inj.variant % 2 == 0:
        return (f"switch:{n.switch}:{n.switch_port}:{n.priority}",)
    return (f"nic:{n.nic}:{n.nic_port}:{n.priority}",)


def _ecn_congestion(s: Second, inj: Injection, _t: float, r: random.Random, _tr: Traits) -> None:
    """Marks and transmit waits rise; the job slows down without stalling."""
    m = inj.magnitude
    s.ecn = 2000 + 48000 * m * (0.7 + 0.6 * r.random())
    s.xmit_wait = 0.2 + 0.3 * m
    s.act = min(s.act, 0.65 - 0.25 * m)
    s.net = min(s.net, 0.7)


def _link_down(s: Second, inj: Injection, t: float, _r: random.Random, _tr: Traits) -> None:
    """Variant odd: a flapping link (down 3-8 s of every 15 s); even: down throughout."""
    down = True
    if inj.variant % 2 == 1:
        cycle = 15
        down = (t % cycle) < 3 + 5 * inj.magnitude
        if t % cycle == 0:
            s.downed += 1
    elif t == 0:
        s.downed += 1
    if down:
        s.link_up = 0.0
        s.net = 0.0
        s.act = 0.0


def _port_culprits(_inj: Injection, n: NodeSpec) -> tuple[str, ...]:
    return (f"nic:{n.nic}:{n.nic_port}", f"switch:{n.switch}:{n.switch_port}")


def _nvlink_degraded(s: Second, inj: Injection, t: float, _r: random.Random, tr: Traits) -> None:
    """Variants 3 (mod 4): throughput collapse, then a hang; others: the link goes down."""
    n = tr.node
    lk = (_gpu(inj, n), str(inj.variant % n.links_per_gpu))
    if inj.variant % 4 == 3:
        s.nvl_scale[lk] = 0.4 * (1 - inj.magnitude)
        if t < nvlink_collapse_lead(inj):
            s.act = min(s.act, 0.85)
        else:
            s.act = 0.0
            s.net = 0.05
        return
    s.nvl_up[lk] = 0.0
    if t < 3:
        s.nvl_err[lk] = 50 + 450 * inj.magnitude
    if t == 0 and inj.variant % 3 != 2:
        s.xids.append((lk[0], 74))
    s.stall_after_first_second(t)
    s.net = 0.05


def _nvlink_culprits(inj: Injection, n: NodeSpec) -> tuple[str, ...]:
    gpu = _gpu(inj, n)
    return (f"gpu:{gpu}:link:{inj.variant % n.links_per_gpu}", f"gpu:{gpu}")


def _gpu_fault(s: Second, inj: Injection, t: float, _r: random.Random, tr: Traits) -> None:
    """An XID by variant (79 fell off the bus: unhealthy, and gone for variants 4-7)."""
    g = _gpu(inj, tr.node)
    code = (79, 48, 94, 119)[inj.variant % 4]
    if t == 0:
        s.xids.append((g, code))
    if code == 79:
        s.unhealthy.add(g)
        if inj.variant % 8 >= 4:
            s.vanished.add(g)
    s.idle_gpu.add(g)
    s.stall_after_first_second(t)
    s.net = 0.05


def _gpu_culprits(inj: Injection, n: NodeSpec) -> tuple[str, ...]:
    return (f"gpu:{_gpu(inj, n)}",)


CHECKPOINT_REQUEST_BYTES = float(1 << 20)
"""A checkpoint's writes: large sequential buffers the block layer merges up to
``max_sectors_kb`` (NFS: ``wsize``), 1 MiB on most devices."""


def _checkpoint_write(s: Second, inj: Injection, t: float, r: random.Random, tr: Traits) -> None:
    """The GPUs wait (at the profile's work level) while the node writes fast."""
    level = inj.level(t)
    s.act = min(s.act, level)
    s.net = min(s.net, max(0.02, level))
    s.mode_util = 0.0
    if not inj.write_s or t < inj.write_s:
        rate = inj.write_rate or 0.3e9 + 2.7e9 * inj.magnitude
        s.st_bytes = rate * (0.8 + 0.4 * r.random())
        s.st_lat = tr.st_lat * (1.5 + 2.5 * r.random())
        s.st_req = CHECKPOINT_REQUEST_BYTES  # large sequential writes, merged
        if "burst" not in tr.off:
            s.burst = 1.0


def _storage_latency(s: Second, inj: Injection, t: float, r: random.Random, tr: Traits) -> None:
    """Writes take 15-100x longer; variants 0 (mod 3) also time the probe out."""
    m = inj.magnitude
    s.act = 0.0
    s.net = 0.02
    s.mode_util = 0.0
    s.st_bytes = 20e6 + 130e6 * r.random()
    s.st_lat = tr.st_lat * (15 + 85 * m) * (0.8 + 0.4 * r.random())
    s.probe_lat = tr.probe_lat * (15 + 85 * m)
    s.probe_fail = s.probe_fail or (inj.variant % 3 == 0 and t >= 2)


def _storage_culprits(_inj: Injection, n: NodeSpec) -> tuple[str, ...]:
    return (f"storage:{n.path}",)


def _unknown(s: Second, _inj: Injection, _t: float, _r: random.Random, _tr: Traits) -> None:
    """A hang with no evidence."""
    s.act = 0.0
    s.net = 0.01


def _no_culprit(_inj: Injection, _n: NodeSpec) -> tuple[str, ...]:
    return ("",)


# -- confounders -------------------------------------------------------------------


def _job_restart(s: Second, inj: Injection, t: float, _r: random.Random, _tr: Traits) -> None:
    """The old job ends, the node idles, a new job starts up idle."""
    gap = inj.duration * 0.4
    if t < gap:
        s.in_job = False
        s.act = 0.0
        s.net = 0.0
        s.mode_util = 0.0
        return
    if t < inj.duration:
        s.act = 0.0
    s.net = 0.1
    if t == math.ceil(gap):
        s.jobs_started += 1


def _eval_dip(s: Second, _inj: Injection, _t: float, _r: random.Random, _tr: Traits) -> None:
    """A short evaluation or logging pause."""
    s.act = min(s.act, 0.01)
    s.net = min(s.net, 0.1)
    s.mode_util = 0.0


def _eval_phase(s: Second, inj: Injection, _t: float, _r: random.Random, tr: Traits) -> None:
    """A long evaluation phase at low SM activity."""
    s.act = min(s.act, (0.2 + 0.15 * inj.magnitude) / tr.base_sm)
    s.net = min(s.net, 0.05)


def _straggler(s: Second, inj: Injection, t: float, _r: random.Random, _tr: Traits) -> None:
    """Another node is slow: this one idles periodically (see :meth:`Second.finish`)."""
    s.straggler = (inj, t)


def _collector_gap(s: Second, inj: Injection, _t: float, _r: random.Random, _tr: Traits) -> None:
    """Collector ``target % 4`` (nvml, rdma, switch, storage) delivers nothing."""
    s.gaps.add(("nvml", "rdma", "switch", "storage")[inj.target % 4])


def _counter_reset(s: Second, _inj: Injection, t: float, _r: random.Random, _tr: Traits) -> None:
    """The NIC's counters restart from zero (a driver reload)."""
    if t == 0:
        s.reset = True


@dataclass(frozen=True, slots=True)
class Kind:
    """An injection kind.

    Attributes:
        apply: its effect on a second.
        culprits: a fault's culprit keys; None for a confounder (no incident).
        incident: a fault's incident kind (``stall`` or ``slowdown``).
    """

    apply: Handler
    culprits: Culprits | None = None
    incident: str = "stall"


KINDS: Mapping[str, Kind] = {
    "pfc_storm": Kind(_pfc_storm, _pfc_culprits),
    "ecn_congestion": Kind(_ecn_congestion, _port_culprits, "slowdown"),
    "link_down": Kind(_link_down, _port_culprits),
    "nvlink_degraded": Kind(_nvlink_degraded, _nvlink_culprits),
    "gpu_fault": Kind(_gpu_fault, _gpu_culprits),
    "checkpoint_write": Kind(_checkpoint_write, _storage_culprits),
    "storage_latency": Kind(_storage_latency, _storage_culprits),
    "unknown": Kind(_unknown, _no_culprit),
    "job_restart": Kind(_job_restart),
    "eval_dip": Kind(_eval_dip),
    "eval_phase": Kind(_eval_phase),
    "straggler": Kind(_straggler),
    "collector_gap": Kind(_collector_gap),
    "counter_reset": Kind(_counter_reset),
}
"""Every injection kind by name (an injection of another name does nothing)."""

FAULTS = tuple(name for name, kind in KINDS.items() if kind.culprits is not None)
"""Injected faults that must become incidents (``unknown``: a hang with no evidence)."""
CONFOUNDERS = tuple(name for name, kind in KINDS.items() if kind.culprits is None)
"""Injected happenings that must not become incidents."""
