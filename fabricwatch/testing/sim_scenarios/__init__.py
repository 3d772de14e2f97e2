"""Scenario simulator with ground truth, for tests, the bench and the demo.

A :class:`Scenario` describes one node's telemetry over time: healthy
training with a compute/communication duty cycle, plus :class:`Injection`\\ s
of faults (every engine cause, and a hang with no evidence, ``unknown``) and
confounders (job restart, evaluation dips and phases, stragglers, collector
gaps, counter resets), with 10 % missing samples and switch counters that
refresh every other poll by default. It produces the ``docs/signals.md``
families as :class:`~fabricwatch.readings.Reading`\\ s, so the same engine runs
on them live (:func:`run_live`) and in replay (written as OpenMetrics).

Timestamps are whole milliseconds (``int_ms / 1000``), so a round trip
through OpenMetrics text or Prometheus reproduces them bit for bit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import MetricKind, Reading
from fabricwatch.store import SnapshotStore

FAULTS = (
    "pfc_storm",
    "ecn_congestion",
    "link_down",
    "nvlink_degraded",
    "gpu_fault",
    "checkpoint_write",
    "storage_latency",
    "unknown",
)
"""Injected faults that must become incidents (``unknown``: a hang with no evidence)."""
CONFOUNDERS = (
    "job_restart",
    "eval_dip",
    "eval_phase",
    "straggler",
    "collector_gap",
    "counter_reset",
)
"""Injected happenings that must not become incidents."""

COLLECTOR_OF: Mapping[str, str] = {
    name: (
        "nvml"
        if name.startswith(("fabricwatch_gpu_",))
        else "rdma"
        if name.startswith("fabricwatch_nic_")
        else "switch"
        if name.startswith("fabricwatch_switch_")
        else "storage"
    )
    for name in sig.SIGNAL_SPECS
}
"""Which simulated collector owns each family (they register separately, as live)."""

_OFFSET_MS = {"nvml": 50, "rdma": 100, "storage": 200, "switch": 300}


@dataclass(frozen=True, slots=True)
class Injection:
    """Something that happens to the node.

    Attributes:
        what: a fault (:data:`FAULTS`) or a confounder (:data:`CONFOUNDERS`).
        start: seconds after the scenario start.
        duration: seconds it lasts.
        magnitude: 0-1 severity knob (mapped to a realistic range per kind).
        target: GPU index, or collector index for gaps.
        variant: kind-specific choice (e.g. switch- vs NIC-side PFC storm).
        profile: ``checkpoint_write`` only: (seconds, work level 0-1) phases
            from the start (a stall that partly recovers and stalls again);
            empty = idle throughout. After the last phase the level is 0.
        write_rate: ``checkpoint_write`` only: bytes/s written while it
            lasts (0 = the kind's default range, set by ``magnitude``).
        write_s: ``checkpoint_write`` only: the writes end after this many
            seconds and the GPUs keep waiting (0 = writes throughout).
    """

    what: str
    start: float
    duration: float
    magnitude: float = 0.5
    target: int = 0
    variant: int = 0
    profile: tuple[tuple[float, float], ...] = ()
    write_rate: float = 0.0
    write_s: float = 0.0

    def level(self, t: float) -> float:
        """Work level of a profiled injection ``t`` seconds after its start."""
        end = 0.0
        for seconds, level in self.profile:
            end += seconds
            if t < end:
                return level
        return 0.0


@dataclass(frozen=True, slots=True)
class TruthIncident:
    """Ground truth of an injected fault, in scenario timestamps."""

    cause: str
    onset: float
    end: float
    culprits: tuple[str, ...]
    kind: str


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """The simulated node's hardware."""

    gpus: int = 8
    links_per_gpu: int = 1
    nic: str = "mlx5_0"
    nic_port: str = "1"
    switch: str = "leaf1"
    switch_port: str = "swp12"
    priority: str = "3"
    path: str = "ckpt"


@dataclass(slots=True)
class Scenario:
    """One node's simulated telemetry and its ground truth.

    Attributes:
        duration: seconds simulated.
        injections: faults and confounders.
        seed: all randomness derives from it (same seed, same readings).
        start_ts: timestamp of the first second (whole seconds).
        missing: probability that one sample of one series is missing.
        switch_refresh: switch counters change every this many seconds.
        families_off: groups a node lacks: ``switch``, ``congestion``,
            ``nvlink``, ``sm`` (no GPM), ``probe`` (no storage probe).
        switch_stale: > 0: each poll the switch port's counters are not
            refreshed with this probability (a zero delta; replaces the
            every-``switch_refresh`` rule).
        storage_base: > 0: the node's usual write rate in bytes/s (else
            2-10 MB/s, drawn from the seed).
    """

    duration: int
    injections: list[Injection] = field(default_factory=list)
    seed: int = 1
    start_ts: int = 1_700_000_000
    missing: float = 0.1
    switch_refresh: int = 2
    families_off: frozenset[str] = frozenset()
    node: NodeSpec = field(default_factory=NodeSpec)
    switch_stale: float = 0.0
    storage_base: float = 0.0

    def truth(self) -> list[TruthIncident]:
        """The incidents the engine should report."""
        n = self.node
        out: list[TruthIncident] = []
        for inj in self.normalized():
            if inj.what not in FAULTS:
                continue
            end = self.start_ts + inj.start + inj.duration
            # A collapsing NVLink degrades first; the stall (the incident)
            # begins when the collectives hang.
            onset = min(self.start_ts + inj.start + nvlink_collapse_lead(inj), end - 1)
            gpu = str(inj.target % n.gpus)
            culprits: tuple[str, ...]
            if inj.what == "pfc_storm":
                culprits = (
                    (f"switch:{n.switch}:{n.switch_port}:{n.priority}",)
                    if inj.variant % 2 == 0
                    else (f"nic:{n.nic}:{n.nic_port}:{n.priority}",)
                )
            elif inj.what in ("ecn_congestion", "link_down"):
                culprits = (f"nic:{n.nic}:{n.nic_port}", f"switch:{n.switch}:{n.switch_port}")
            elif inj.what == "nvlink_degraded":
                culprits = (f"gpu:{gpu}:link:{inj.variant % n.links_per_gpu}", f"gpu:{gpu}")
            elif inj.what == "gpu_fault":
                culprits = (f"gpu:{gpu}",)
            elif inj.what in ("checkpoint_write", "storage_latency"):
                culprits = (f"storage:{n.path}",)
            else:
                culprits = ("",)
            kind = "slowdown" if inj.what == "ecn_congestion" else "stall"
            out.append(TruthIncident(inj.what, float(onset), float(end), culprits, kind))
        return out

    def normalized(self) -> list[Injection]:
        """Injections on whole seconds (the simulator's resolution), by start."""
        return sorted(
            (
                replace(
                    i, start=float(math.ceil(i.start)), duration=float(max(1, round(i.duration)))
                )
                for i in self.injections
            ),
            key=lambda i: i.start,
        )

    def steps(self) -> Iterator[tuple[float, list[tuple[str, list[Reading]]]]]:
        """Per simulated second: the engine tick time and each collector's batch."""
        return _Sim(self).run()


def nvlink_collapse_lead(inj: Injection) -> int:
    """Seconds an NVLink throughput collapse precedes the hang it causes.

    ``nvlink_degraded`` variants ``3 (mod 4)`` show no link-down, no error
    burst and no XID: the link stays up while its throughput falls to
    ``0.4 * (1 - magnitude)`` of normal (less than half: -60 % down to ~0); its GPU and the
    others keep computing (slightly slower, waiting on it) for 2-5 s, then
    the collectives hang and every rank's SM activity and NVLink go to ~0
    (stalls-and-anchors.md §7, S5). Zero for every other injection.
    """
    if inj.what != "nvlink_degraded" or inj.variant % 4 != 3:
        return 0
    return 2 + int(3 * min(max(inj.magnitude, 0.0), 1.0))


class _Sim:
    """The generator behind :meth:`Scenario.steps` (one pass, deterministic)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed)  # noqa: S311 - simulation, not crypto
        r = self.rng
        n = sc.node
        self.gpus = [str(i) for i in range(n.gpus)]
        self.base_sm = r.uniform(0.65, 0.9)
        self.period = r.uniform(1.3, 3.0)
        self.phase = [r.uniform(0, 3) for _ in self.gpus]
        self.limit = 700.0
        self.idle_w = r.uniform(70, 110)
        self.nvl_bw = r.uniform(20e9, 40e9)
        self.nic_bw = r.uniform(8e9, 20e9)
        self.st_bytes = r.uniform(2e6, 10e6)
        if sc.storage_base > 0:
            self.st_bytes = sc.storage_base
        self.st_lat = r.uniform(3e-3, 6e-3)
        self.probe_lat = r.uniform(4e-3, 8e-3)
        self.ecn_base = r.uniform(0, 40)
        self.mem = r.uniform(30e9, 70e9)
        self.counters: dict[tuple[str, tuple[str, ...]], float] = {}
        self.exposed: dict[tuple[str, tuple[str, ...]], float] = {}
        self.job = 1
        self.off = sc.families_off

    # -- state per second --------------------------------------------------

    def run(self) -> Iterator[tuple[float, list[tuple[str, list[Reading]]]]]:
        sc = self.sc
        injections = sc.normalized()
        for k in range(sc.duration):
            active = [i for i in injections if i.start <= k < i.start + i.duration]
            batches = self._second(k, active)
            yield (sc.start_ts + k + 0.5, batches)

    def _second(self, k: int, active: list[Injection]) -> list[tuple[str, list[Reading]]]:
        sc = self.sc
        n = sc.node
        r = self.rng
        gpus = self.gpus
        sm = [0.0] * len(gpus)
        util_hang = 1.0
        act = 1.0  # shared multiplier on GPU work
        net = 1.0  # job traffic multiplier
        in_job = True
        pfc_sw = r.random() * 0.02 if r.random() < 0.999 else r.uniform(0.05, 0.3)
        pfc_nic = r.random() * 0.01
        ecn = self.ecn_base * (1 + r.random())
        xmit_wait = r.random() * 0.03
        link_up = 1.0
        downed = 0.0
        nvl_up: dict[tuple[str, str], float] = {}
        nvl_scale: dict[tuple[str, str], float] = {}
        nvl_err: dict[tuple[str, str], float] = {}
        xids: list[tuple[str, int]] = []
        unhealthy: set[str] = set()
        vanished: set[str] = set()
        st_bytes = self.st_bytes * (0.5 + r.random())
        st_lat = self.st_lat * (0.8 + 0.4 * r.random())
        probe_lat = self.probe_lat * (0.8 + 0.4 * r.random())
        probe_fail = False
        burst = 0.0
        gaps: set[str] = set()
        reset = False
        idle_gpu: set[str] = set()
        mode_util: float | None = None
        straggle: Injection | None = None
        for inj in active:
            t = k - inj.start
            m = inj.magnitude
            w = inj.what
            lag = 1 if t < 1 else 0  # GPUs stall one second after the fault
            if w == "pfc_storm":
                ratio = 0.85 + 0.15 * m
                if inj.variant % 2 == 0:
                    pfc_sw, pfc_nic = ratio, max(pfc_nic, 0.1 + 0.3 * r.random())
                else:
                    pfc_nic, pfc_sw = ratio, max(pfc_sw, 0.05 + 0.2 * r.random())
                net = 0.02
                act = 0.0 if not lag else act
                ecn *= 1 + 3 * r.random()
            elif w == "ecn_congestion":
                ecn = 2000 + 48000 * m * (0.7 + 0.6 * r.random())
                xmit_wait = 0.2 + 0.3 * m
                act = min(act, 0.65 - 0.25 * m)
                net = min(net, 0.7)
            elif w == "link_down":
                # variant 1: a flapping link (down 3-8 s, up 5-10 s, repeated)
                down = True
                if inj.variant % 2 == 1:
                    cyc = 15
                    down = (t % cyc) < 3 + 5 * m
                    if t % cyc == 0:
                        downed += 1
                elif t == 0:
                    downed += 1
                if down:
                    link_up = 0.0
                    net = 0.0
                    act = 0.0
            elif w == "nvlink_degraded" and inj.variant % 4 == 3:
                g = str(inj.target % n.gpus)
                nvl_scale[(g, str(inj.variant % n.links_per_gpu))] = 0.4 * (1 - m)
                if t < nvlink_collapse_lead(inj):
                    act = min(act, 0.85)
                else:
                    act = 0.0
                    net = 0.05
            elif w == "nvlink_degraded":
                g = str(inj.target % n.gpus)
                link = str(inj.variant % n.links_per_gpu)
                nvl_up[(g, link)] = 0.0
                if t < 3:
                    nvl_err[(g, link)] = 50 + 450 * m
                if t == 0 and inj.variant % 3 != 2:
                    xids.append((g, 74))
                act = 0.0 if not lag else act
                net = 0.05
            elif w == "gpu_fault":
                g = str(inj.target % n.gpus)
                code = (79, 48, 94, 119)[inj.variant % 4]
                if t == 0:
                    xids.append((g, code))
                if code == 79:
                    unhealthy.add(g)
                    if inj.variant % 8 >= 4:
                        vanished.add(g)
                idle_gpu.add(g)
                act = 0.0 if not lag else act
                net = 0.05
            elif w == "checkpoint_write":
                level = inj.level(t)
                act = min(act, level)
                net = min(net, max(0.02, level))
                mode_util = 0.0
                if not inj.write_s or t < inj.write_s:
                    rate = inj.write_rate or 0.3e9 + 2.7e9 * m
                    st_bytes = rate * (0.8 + 0.4 * r.random())
                    st_lat = self.st_lat * (1.5 + 2.5 * r.random())
                    if "burst" not in self.off:
                        burst = 1.0
            elif w == "storage_latency":
                act = 0.0
                net = 0.02
                mode_util = 0.0
                st_bytes = 20e6 + 130e6 * r.random()
                st_lat = self.st_lat * (15 + 85 * m) * (0.8 + 0.4 * r.random())
                probe_lat = self.probe_lat * (15 + 85 * m)
                probe_fail = probe_fail or (inj.variant % 3 == 0 and t >= 2)
            elif w == "unknown":
                act = 0.0
                net = 0.01
            elif w == "job_restart":
                # the old job ends, the node idles, a new job starts up idle
                gap = inj.duration * 0.4
                if t < gap:
                    in_job = False
                    act = 0.0
                    net = 0.0
                    mode_util = 0.0
                else:
                    act = 0.0 if t < inj.duration else act
                    net = 0.1
                    if t == math.ceil(gap):
                        self.job += 1
            elif w == "eval_dip":
                act = min(act, 0.01)
                net = min(net, 0.1)
                mode_util = 0.0
            elif w == "eval_phase":
                act = min(act, (0.2 + 0.15 * m) / self.base_sm)
                net = min(net, 0.05)
            elif w == "straggler":
                straggle = inj
            elif w == "collector_gap":
                gaps.add(("nvml", "rdma", "switch", "storage")[inj.target % 4])
            elif w == "counter_reset" and t == 0:
                reset = True
        if straggle is not None:
            step = 4 + 4 * straggle.magnitude
            wait = 1 + 2 * straggle.magnitude
            if (k - straggle.start) % step < wait:
                act = min(act, 0.02)
        ts_ms = {c: (sc.start_ts + k) * 1000 + off for c, off in _OFFSET_MS.items()}
        out: list[tuple[str, list[Reading]]] = []
        miss = sc.missing
        # --- GPUs --------------------------------------------------------
        rs: list[Reading] = []
        ts = ts_ms["nvml"] / 1000.0
        two_pi = 2 * math.pi
        for i, g in enumerate(gpus):
            if g in vanished:
                continue
            a = 0.0 if g in idle_gpu else act
            val = self.base_sm * (1 + 0.06 * math.sin(two_pi * (k + self.phase[i]) / self.period))
            val = max(0.0, min(1.0, val * a + (r.random() - 0.5) * 0.04 * a + 0.004 * r.random()))
            sm[i] = val
            if a < 0.05:
                util = 0.0 if mode_util == 0.0 or not in_job else util_hang
            else:
                util = min(1.0, 0.93 + 0.07 * r.random())
            power = self.idle_w + (self.limit * 0.92 - self.idle_w) * val / self.base_sm * 0.9
            power = min(self.limit, power * (0.97 + 0.06 * r.random()))
            if a < 0.05 and util > 0.5:
                power = self.idle_w * 1.4  # spinning NCCL kernels draw a little
            key = (g,)
            if "sm" not in self.off and r.random() >= miss:
                rs.append(Reading(sig.GPU_SM, key, val, ts=ts))
            if r.random() >= miss:
                rs.append(Reading(sig.GPU_UTIL, key, util, ts=ts))
            if r.random() >= miss:
                rs.append(Reading(sig.GPU_POWER, key, power, ts=ts))
            if r.random() >= miss:
                rs.append(Reading(sig.GPU_PROCS, key, 1.0 if in_job else 0.0, ts=ts))
            if k % 5 == i % 5 and r.random() >= miss:
                rs.append(Reading(sig.GPU_MEM, key, self.mem if in_job else 3e8, ts=ts))
            if k % 10 == i % 10:
                rs.append(Reading(sig.GPU_POWER_LIMIT, key, self.limit, ts=ts))
                rs.append(Reading(sig.GPU_HEALTHY, key, 0.0 if g in unhealthy else 1.0, ts=ts))
                if in_job:
                    rs.append(Reading(sig.GPU_JOB, (g, f"slurm:{self.job}"), 1.0, ts=ts))
            if "nvlink" not in self.off:
                for li in range(n.links_per_gpu):
                    link = str(li)
                    lk = (g, link)
                    up = nvl_up.get(lk, 1.0)
                    bw = self.nvl_bw * val / self.base_sm * (0.8 + 0.4 * r.random()) * up
                    bw *= nvl_scale.get(lk, 1.0)
                    self._count(rs, sig.NVLINK_TX, lk, bw, ts=ts, miss=miss)
                    self._count(
                        rs, sig.NVLINK_RX, lk, bw * (0.9 + 0.2 * r.random()), ts=ts, miss=miss
                    )
                    if k % 5 == 0 or lk in nvl_up:
                        rs.append(Reading(sig.NVLINK_UP, lk, up, ts=ts))
                    errs = nvl_err.get(lk, 0.0)
                    if k % 5 == 0 or errs:
                        for typ in ("crc", "replay", "recovery"):
                            self._count(
                                rs,
                                sig.NVLINK_ERRORS,
                                (*lk, typ),
                                errs if typ != "crc" else errs * 0.2,
                                ts=ts,
                                miss=0.0,
                            )
        for g, code in xids:
            self.counters[(sig.GPU_XID, (g, str(code)))] = (
                self.counters.get((sig.GPU_XID, (g, str(code))), 0.0) + 1.0
            )
        for (name, labels), v in self.counters.items():
            if name == sig.GPU_XID:
                rs.append(Reading(name, labels, v, ts=ts))
        if "nvml" not in gaps:
            out.append(("nvml", rs))
        # --- host NIC ------------------------------------------------------
        rs = []
        ts = ts_ms["rdma"] / 1000.0
        nk = (n.nic, n.nic_port)
        if reset:
            for ckey in list(self.counters):
                if ckey[0].startswith("fabricwatch_nic_"):
                    self.counters[ckey] = 0.0
        traffic = self.nic_bw * net * (0.8 + 0.4 * r.random()) * (1.0 if in_job else 0.01)
        self._count(rs, sig.NIC_TX_BYTES, nk, traffic, ts=ts, miss=miss)
        self._count(rs, sig.NIC_RX_BYTES, nk, traffic * (0.9 + 0.2 * r.random()), ts=ts, miss=miss)
        for direction, ratio in (("rx", pfc_nic), ("tx", pfc_nic * 0.2)):
            pk = (*nk, n.priority, direction)
            if r.random() >= miss:
                rs.append(Reading(sig.NIC_PFC_RATIO, pk, ratio, ts=ts))
            self._count(rs, sig.NIC_PFC_FRAMES, pk, ratio * 5960, ts=ts, miss=miss)
        if "congestion" not in self.off:
            self._count(rs, sig.NIC_ECN, nk, ecn, ts=ts, miss=miss)
            self._count(rs, sig.NIC_CNP_SENT, nk, ecn * 0.9, ts=ts, miss=miss)
            self._count(rs, sig.NIC_CNP_HANDLED, nk, ecn * 0.8, ts=ts, miss=miss)
            if r.random() >= miss:
                rs.append(Reading(sig.NIC_XMIT_WAIT, nk, xmit_wait, ts=ts))
        if r.random() >= miss or link_up < 1:
            rs.append(Reading(sig.NIC_LINK_UP, nk, link_up, ts=ts))
        self._count(rs, sig.NIC_LINK_DOWNED, nk, downed, ts=ts, miss=miss)
        if "rdma" not in gaps:
            out.append(("rdma", rs))
        # --- switch uplink -----------------------------------------------------
        if "switch" not in self.off:
            rs = []
            ts = ts_ms["switch"] / 1000.0
            sk = (n.switch, n.switch_port)
            if sc.switch_stale > 0:
                refresh = r.random() >= sc.switch_stale
            else:
                refresh = k % sc.switch_refresh == 0
            self._count(rs, sig.SW_RX_BYTES, sk, traffic, ts=ts, miss=miss, refresh=refresh)
            self._count(rs, sig.SW_TX_BYTES, sk, traffic, ts=ts, miss=miss, refresh=refresh)
            for direction, ratio in (("rx", pfc_sw), ("tx", pfc_sw * 0.3)):
                pk = (*sk, n.priority, direction)
                if r.random() >= miss:
                    rs.append(Reading(sig.SW_PFC_RATIO, pk, ratio, ts=ts))
                self._count(
                    rs, sig.SW_PFC_FRAMES, pk, ratio * 5960, ts=ts, miss=miss, refresh=refresh
                )
            if "congestion" not in self.off:
                self._count(
                    rs, sig.SW_ECN, (*sk, n.priority), ecn * 1.1, ts=ts, miss=miss, refresh=refresh
                )
            if r.random() >= miss or link_up < 1:
                rs.append(Reading(sig.SW_PORT_UP, sk, link_up, ts=ts))
            if "switch" not in gaps:
                out.append(("switch", rs))
        # --- storage -----------------------------------------------------------
        rs = []
        ts = ts_ms["storage"] / 1000.0
        pk1 = (n.path,)
        self._count(rs, sig.ST_WRITE_BYTES, pk1, st_bytes, ts=ts, miss=miss)
        if r.random() >= miss:
            rs.append(Reading(sig.ST_WRITE_LAT, pk1, st_lat, ts=ts))
        if "burst" not in self.off and r.random() >= miss:
            rs.append(Reading(sig.ST_WRITE_BURST, pk1, burst, ts=ts))
        if "probe" not in self.off:
            if r.random() >= miss:
                rs.append(Reading(sig.ST_PROBE_LAST, pk1, probe_lat, ts=ts))
            if probe_fail:
                fkey: tuple[str, tuple[str, ...]] = (sig.ST_PROBE_FAIL, (n.path, "timeout"))
                self.counters[fkey] = self.counters.get(fkey, 0.0) + 1.0
            for (name, labels), v in self.counters.items():
                if name == sig.ST_PROBE_FAIL:
                    rs.append(Reading(name, labels, v, ts=ts))
        if "storage" not in gaps:
            out.append(("storage", rs))
        return out

    def _count(
        self,
        rs: list[Reading],
        name: str,
        labels: tuple[str, ...],
        rate: float,
        *,
        ts: float,
        miss: float,
        refresh: bool = True,
    ) -> None:
        key = (name, labels)
        v = self.counters.get(key, 0.0) + rate
        self.counters[key] = v
        if refresh:
            self.exposed[key] = v
        if miss and self.rng.random() < miss:
            return
        rs.append(Reading(name, labels, float(round(self.exposed.get(key, 0.0))), ts=ts))


# -- real-episode shapes ---------------------------------------------------
#
# The real traces are not in the repository; these generators rebuild the
# shapes derived from them in ../shared/reference/stalls-and-anchors.md, with
# every documented number a parameter.


@dataclass(frozen=True, slots=True)
class CounterArtefacts:
    """Counter artefacts of the Zhejiang switch data (stalls-and-anchors.md §6, §7 N1).

    Attributes:
        zero_delta_ratio: share of polls whose port counters were not
            refreshed (38 %: ~1 s refresh; the rows alternate value / 0).
        short_gaps_per_hour: switch-collector gaps of ``short_gap_s`` (44 per
            port-hour).
        short_gap_s: their length range (2-5 s).
        long_gaps_per_hour: gaps of ``long_gap_s`` (one ~250 s in the hour).
        long_gap_s: their length. After any gap the first row holds the whole
            accumulated delta (the simulated counters keep counting while the
            collector is away).
    """

    zero_delta_ratio: float = 0.38
    short_gaps_per_hour: float = 44.0
    short_gap_s: tuple[float, float] = (2.0, 5.0)
    long_gaps_per_hour: float = 1.0
    long_gap_s: float = 250.0

    def gaps(self, rng: random.Random, duration: int) -> list[Injection]:
        """Switch-collector gaps over ``duration`` seconds (``target`` 2 = switch):
        the documented count per hour pro rata, at least one of each kind."""
        out: list[Injection] = []
        for per_hour, length in (
            (self.short_gaps_per_hour, self.short_gap_s),
            (self.long_gaps_per_hour, (self.long_gap_s, self.long_gap_s)),
        ):
            if per_hour <= 0:
                continue
            for _ in range(max(1, round(per_hour * duration / 3600.0))):
                gap = rng.uniform(*length)
                start = rng.uniform(0.0, max(duration - gap - 1.0, 0.0))
                out.append(Injection("collector_gap", start, gap, target=2))
        return out


@dataclass(frozen=True, slots=True)
class ZhejiangJobStall:
    """The 2024-05-23T16:07:52Z job stall (stalls-and-anchors.md §3, §7).

    A 128-port job fell from ~8.7 Tbit/s to < 0.2 Tbit/s: ~0 for 12-14 s,
    partial for 4 s, ~0 again for 6-9 s, recovered after ~28 s, while the
    storage leaves carried the hour's biggest burst (1.1-1.4 Tbit/s against
    a 0.07 Tbit/s median) and PFC/ECN stayed flat; other jobs ran on. The
    cause is documented as "job stall, likely storage/checkpoint
    (unconfirmed)": the expected cause here is ``checkpoint_write``.

    Per node, the storage rates are the cluster's spread over its servers
    (253): the burst keeps its documented 16-20x ratio to the median, the
    smallest per-node burst consistent with the data (if only the job's
    nodes wrote it, theirs was larger). The level of the partial phase is
    not documented (``partial_level`` is an assumption); the time between
    the second idle phase and "recovered after ~28 s" is partial too.
    """

    onset_utc: str = "2024-05-23T16:07:52Z"
    first_idle_s: tuple[float, float] = (12.0, 14.0)
    partial_s: float = 4.0
    partial_level: float = 0.4
    second_idle_s: tuple[float, float] = (6.0, 9.0)
    recovered_after_s: float = 28.0
    storage_burst_tbit_s: tuple[float, float] = (1.1, 1.4)
    storage_median_tbit_s: float = 0.07
    cluster_servers: int = 253
    artefacts: CounterArtefacts = field(default_factory=CounterArtefacts)


@dataclass(frozen=True, slots=True)
class LlamaCheckpoints:
    """The 4 checkpoint stalls of the Llama-2-7B log (stalls-and-anchors.md §3).

    Zhejiang ``taskinfo/20240429-0613-4/``: 32 A100, DeepSpeed ZeRO, a save
    every 500 steps; median iteration 45.8 s, the 4 iterations with a save
    78.7-79.8 s, i.e. ~33 s of stall each (spread evenly over the documented
    range here; the individual values are not documented). The rank-0 node
    writes weights (~10 s), model states (13.7 s, ~1 GB/s) and its optimizer
    shard (2.4 s) at the start of the stall, then waits; another node writes
    only its optimizer shard. The switch counters carry the §6 artefacts.

    ``spacing_s`` None is the real spacing (500 x 45.8 s = 6.4 h between
    saves); tests shorten it (the engine keeps no state across ~10 minutes).
    """

    median_iteration_s: float = 45.8
    save_iteration_s: tuple[float, float] = (78.7, 79.8)
    saves: int = 4
    steps_between_saves: int = 500
    weights_s: float = 10.0
    model_states_s: float = 13.7
    optimizer_shard_s: float = 2.4
    write_bytes_s: float = 1e9
    rank0: bool = True
    spacing_s: float | None = None
    artefacts: CounterArtefacts = field(default_factory=CounterArtefacts)

    def stalls(self) -> list[float]:
        """Seconds of stall of each save (save iteration - median iteration)."""
        lo, hi = self.save_iteration_s
        n = self.saves
        return [lo + (hi - lo) * i / max(n - 1, 1) - self.median_iteration_s for i in range(n)]


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def zhejiang_job_stall(
    seed: int = 1, shape: ZhejiangJobStall | None = None, *, lead_s: int = 900, tail_s: int = 300
) -> Scenario:
    """One node of the job through the 16:07:52Z stall (see :class:`ZhejiangJobStall`).

    The stall starts ``lead_s`` seconds in, at its real wall time.
    """
    shape = shape or ZhejiangJobStall()
    r = random.Random(seed)  # noqa: S311 - simulation, not crypto
    first = round(r.uniform(*shape.first_idle_s))
    second = round(r.uniform(*shape.second_idle_s))
    partial = round(shape.partial_s)
    total = max(round(shape.recovered_after_s), first + partial + second)
    tail = total - first - partial - second
    profile: tuple[tuple[int, float], ...] = (
        (first, 0.0),
        (partial, shape.partial_level),
        (second, 0.0),
    )
    if tail:
        profile += ((tail, shape.partial_level),)
    per_node = 1e12 / 8 / shape.cluster_servers
    duration = lead_s + total + tail_s
    inj = [
        Injection(
            "checkpoint_write",
            lead_s,
            total,
            profile=tuple((float(sec), lvl) for sec, lvl in profile),
            write_rate=r.uniform(*shape.storage_burst_tbit_s) * per_node,
        )
    ]
    inj += shape.artefacts.gaps(r, duration)
    return Scenario(
        duration=duration,
        injections=inj,
        seed=seed,
        start_ts=_utc(shape.onset_utc) - lead_s,
        switch_stale=shape.artefacts.zero_delta_ratio,
        storage_base=shape.storage_median_tbit_s * per_node,
    )


def llama_checkpoint_stalls(
    seed: int = 1, shape: LlamaCheckpoints | None = None, *, lead_s: int = 900
) -> Scenario:
    """One node of the Llama-2-7B run through its 4 saves (see :class:`LlamaCheckpoints`)."""
    shape = shape or LlamaCheckpoints()
    r = random.Random(seed)  # noqa: S311 - simulation, not crypto
    spacing = shape.spacing_s
    if spacing is None:
        spacing = shape.steps_between_saves * shape.median_iteration_s
    writes = (
        shape.weights_s + shape.model_states_s + shape.optimizer_shard_s
        if shape.rank0
        else shape.optimizer_shard_s
    )
    inj: list[Injection] = []
    stalls = shape.stalls()
    for i, stall in enumerate(stalls):
        start = lead_s + i * spacing
        inj.append(
            Injection(
                "checkpoint_write",
                start,
                round(stall),
                # Writing first, then waiting for the slowest rank; both idle.
                write_rate=shape.write_bytes_s,
                write_s=round(min(writes, stall)),
            )
        )
    duration = round(lead_s + (len(stalls) - 1) * spacing + max(stalls, default=0.0) + 300)
    inj += shape.artefacts.gaps(r, duration)
    return Scenario(
        duration=duration,
        injections=inj,
        seed=seed,
        switch_stale=shape.artefacts.zero_delta_ratio,
    )


def new_store(history: int = 600) -> SnapshotStore:
    """A snapshot store with every signal family registered by its simulated collector."""
    store = SnapshotStore(history=history)
    by_collector: dict[str, list[str]] = {}
    for name, coll in COLLECTOR_OF.items():
        by_collector.setdefault(coll, []).append(name)
    for coll, names in sorted(by_collector.items()):
        store.register(coll, [sig.SIGNAL_SPECS[nm] for nm in names])
    return store


def run_live(
    scenario: Scenario,
    settings: EngineSettings | None = None,
    *,
    node: str = "node1",
    db: IncidentDB | None = None,
    steps: Iterable[tuple[float, list[tuple[str, list[Reading]]]]] | None = None,
) -> list[IncidentTransition]:
    """Feed a scenario through a snapshot store into an engine, as the daemon would.

    ``steps`` replaces ``scenario.steps()`` (a multi-node harness rewrites them:
    the job's key, symptoms spread from other nodes)."""
    settings = settings or EngineSettings()
    store = new_store()
    engine = Engine(settings, store, node, db)
    out: list[IncidentTransition] = []
    last_expire = -math.inf
    for t, batches in scenario.steps() if steps is None else steps:
        for coll, readings in batches:
            store.ingest(coll, readings, now=t)
        if t - last_expire >= 60:
            store.expire(t)
            last_expire = t
        out.extend(engine.tick(t, t))
    return out


def flatten(scenario: Scenario) -> Iterable[Reading]:
    """All readings of a scenario in time order (for writing replay files)."""
    for _, batches in scenario.steps():
        for _, readings in batches:
            yield from readings


def counter_families() -> frozenset[str]:
    """Names of counter families (OpenMetrics writes them with ``_total``)."""
    return frozenset(n for n, s in sig.SIGNAL_SPECS.items() if s.kind is MetricKind.COUNTER)
