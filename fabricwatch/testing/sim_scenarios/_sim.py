"""A scenario and the simulator that turns it into readings, second by second."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from fabricwatch.engine import signals as sig
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios._kinds import KINDS, Second, Traits
from fabricwatch.testing.sim_scenarios._model import (
    Injection,
    NodeSpec,
    TruthIncident,
    nvlink_collapse_lead,
)

_OFFSET_MS = {"nvml": 50, "rdma": 100, "storage": 200, "switch": 300}
_LAST = max(_OFFSET_MS, key=_OFFSET_MS.__getitem__)

Step = tuple[float, list[tuple[str, list[Reading]]]]
"""The engine tick time of one simulated second and each collector's batch."""


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
            ``nvlink``, ``sm`` (no GPM), ``probe`` (no storage probe),
            ``burst`` (no storage write-burst gauge), ``write_ops`` (no
            storage write-request counts).
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
        out: list[TruthIncident] = []
        for inj in self.normalized():
            kind = KINDS.get(inj.what)
            if kind is None or kind.culprits is None:
                continue
            end = self.start_ts + inj.start + inj.duration
            # A collapsing NVLink degrades first; the stall (the incident)
            # begins when the collectives hang.
            onset = min(self.start_ts + inj.start + nvlink_collapse_lead(inj), end - 1)
            culprits = kind.culprits(inj, self.node)
            out.append(TruthIncident(inj.what, float(onset), float(end), culprits, kind.incident))
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

    def steps(self) -> Iterator[Step]:
        """Per simulated second: the engine tick time and each collector's batch."""
        return _Sim(self).run()


class _Sim:
    """The generator behind :meth:`Scenario.steps` (one pass, deterministic).

    All randomness comes from one stream in a fixed order: the node's traits,
    then per second the healthy noise, each active injection's handler (in
    start order), and the collectors (GPUs, NIC, switch, storage).
    """

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed)  # noqa: S311 - simulation, not crypto
        self.traits = Traits.draw(self.rng, sc.node, sc.families_off, sc.storage_base)
        self.gpus = [str(i) for i in range(sc.node.gpus)]
        self.counters: dict[tuple[str, tuple[str, ...]], float] = {}
        self.exposed: dict[tuple[str, tuple[str, ...]], float] = {}
        self.job = 1

    def run(self) -> Iterator[Step]:
        sc = self.sc
        injections = sc.normalized()
        for k in range(sc.duration):
            active = [i for i in injections if i.start <= k < i.start + i.duration]
            # The engine ticks once the round is in (as the daemon's does,
            # Supervisor.settled): at the last collector's sample time.
            yield (self._ts(k, _LAST), self._second(k, active))

    def _second(self, k: int, active: list[Injection]) -> list[tuple[str, list[Reading]]]:
        r = self.rng
        s = Second.healthy(r, self.traits)
        for inj in active:
            kind = KINDS.get(inj.what)
            if kind is not None:
                kind.apply(s, inj, k - inj.start, r, self.traits)
        s.finish()
        self.job += s.jobs_started
        batches = [("nvml", self._gpus(k, s))]
        if s.reset:
            self._reset_nic()
        traffic = (
            self.traits.nic_bw * s.net * (0.8 + 0.4 * r.random()) * (1.0 if s.in_job else 0.01)
        )
        batches.append(("rdma", self._nic(k, s, traffic)))
        if "switch" not in self.traits.off:
            batches.append(("switch", self._switch(k, s, traffic)))
        batches.append(("storage", self._storage(k, s)))
        # A collector's gap hides its batch; the node (and the draws) carry on.
        return [(coll, rs) for coll, rs in batches if coll not in s.gaps]

    def _ts(self, k: int, collector: str) -> float:
        return ((self.sc.start_ts + k) * 1000 + _OFFSET_MS[collector]) / 1000.0

    # -- collectors ----------------------------------------------------------

    def _gpus(self, k: int, s: Second) -> list[Reading]:
        rs: list[Reading] = []
        ts = self._ts(k, "nvml")
        for i, g in enumerate(self.gpus):
            if g not in s.vanished:
                self._gpu(rs, k, i, s, ts)
        for g, code in s.xids:
            key = (sig.GPU_XID, (g, str(code)))
            self.counters[key] = self.counters.get(key, 0.0) + 1.0
        for (name, labels), v in self.counters.items():
            if name == sig.GPU_XID:
                rs.append(Reading(name, labels, v, ts=ts))
        return rs

    def _gpu(self, rs: list[Reading], k: int, i: int, s: Second, ts: float) -> None:
        r = self.rng
        tr = self.traits
        miss = self.sc.missing
        g = self.gpus[i]
        a = 0.0 if g in s.idle_gpu else s.act
        val = tr.base_sm * (1 + 0.06 * math.sin(2 * math.pi * (k + tr.phase[i]) / tr.period))
        val = max(0.0, min(1.0, val * a + (r.random() - 0.5) * 0.04 * a + 0.004 * r.random()))
        if a < 0.05:
            # A hung collective spins at ~100 % utilization; an idle GPU shows 0.
            util = 0.0 if s.mode_util == 0.0 or not s.in_job else 1.0
        else:
            util = min(1.0, 0.93 + 0.07 * r.random())
        power = tr.idle_w + (tr.limit * 0.92 - tr.idle_w) * val / tr.base_sm * 0.9
        power = min(tr.limit, power * (0.97 + 0.06 * r.random()))
        if a < 0.05 and util > 0.5:
            power = tr.idle_w * 1.4  # spinning NCCL kernels draw a little
        key = (g,)
        if "sm" not in tr.off and r.random() >= miss:
            rs.append(Reading(sig.GPU_SM, key, val, ts=ts))
        if r.random() >= miss:
            rs.append(Reading(sig.GPU_UTIL, key, util, ts=ts))
        if r.random() >= miss:
            rs.append(Reading(sig.GPU_POWER, key, power, ts=ts))
        if r.random() >= miss:
            rs.append(Reading(sig.GPU_PROCS, key, 1.0 if s.in_job else 0.0, ts=ts))
        if k % 5 == i % 5 and r.random() >= miss:
            rs.append(Reading(sig.GPU_MEM, key, tr.mem if s.in_job else 3e8, ts=ts))
        if k % 10 == i % 10:
            rs.append(Reading(sig.GPU_POWER_LIMIT, key, tr.limit, ts=ts))
            rs.append(Reading(sig.GPU_HEALTHY, key, 0.0 if g in s.unhealthy else 1.0, ts=ts))
            if s.in_job:
                rs.append(Reading(sig.GPU_JOB, (g, f"slurm:{self.job}"), 1.0, ts=ts))
        if "nvlink" not in tr.off:
            for li in range(tr.node.links_per_gpu):
                self._nvlink(rs, k, (g, str(li)), val, s, ts=ts)

    def _nvlink(
        self, rs: list[Reading], k: int, lk: tuple[str, str], val: float, s: Second, *, ts: float
    ) -> None:
        r = self.rng
        tr = self.traits
        miss = self.sc.missing
        up = s.nvl_up.get(lk, 1.0)
        bw = tr.nvl_bw * val / tr.base_sm * (0.8 + 0.4 * r.random()) * up
        bw *= s.nvl_scale.get(lk, 1.0)
        self._count(rs, sig.NVLINK_TX, lk, bw, ts=ts, miss=miss)
        self._count(rs, sig.NVLINK_RX, lk, bw * (0.9 + 0.2 * r.random()), ts=ts, miss=miss)
        if k % 5 == 0 or lk in s.nvl_up:
            rs.append(Reading(sig.NVLINK_UP, lk, up, ts=ts))
        errs = s.nvl_err.get(lk, 0.0)
        if k % 5 == 0 or errs:
            for typ in ("crc", "replay", "recovery"):
                rate = errs if typ != "crc" else errs * 0.2
                self._count(rs, sig.NVLINK_ERRORS, (*lk, typ), rate, ts=ts, miss=0.0)

    def _reset_nic(self) -> None:
        for ckey in list(self.counters):
            if ckey[0].startswith("fabricwatch_nic_"):
                self.counters[ckey] = 0.0

    def _nic(self, k: int, s: Second, traffic: float) -> list[Reading]:
        r = self.rng
        n = self.sc.node
        miss = self.sc.missing
        rs: list[Reading] = []
        ts = self._ts(k, "rdma")
        nk = (n.nic, n.nic_port)
        self._count(rs, sig.NIC_TX_BYTES, nk, traffic, ts=ts, miss=miss)
        self._count(rs, sig.NIC_RX_BYTES, nk, traffic * (0.9 + 0.2 * r.random()), ts=ts, miss=miss)
        for direction, ratio in (("rx", s.pfc_nic), ("tx", s.pfc_nic * 0.2)):
            pk = (*nk, n.priority, direction)
            if r.random() >= miss:
                rs.append(Reading(sig.NIC_PFC_RATIO, pk, ratio, ts=ts))
            self._count(rs, sig.NIC_PFC_FRAMES, pk, ratio * 5960, ts=ts, miss=miss)
        if "congestion" not in self.traits.off:
            self._count(rs, sig.NIC_ECN, nk, s.ecn, ts=ts, miss=miss)
            self._count(rs, sig.NIC_CNP_SENT, nk, s.ecn * 0.9, ts=ts, miss=miss)
            self._count(rs, sig.NIC_CNP_HANDLED, nk, s.ecn * 0.8, ts=ts, miss=miss)
            if r.random() >= miss:
                rs.append(Reading(sig.NIC_XMIT_WAIT, nk, s.xmit_wait, ts=ts))
        # A down link is always reported (the draw is made either way).
        if r.random() >= miss or s.link_up < 1:
            rs.append(Reading(sig.NIC_LINK_UP, nk, s.link_up, ts=ts))
        self._count(rs, sig.NIC_LINK_DOWNED, nk, s.downed, ts=ts, miss=miss)
        return rs

    def _switch(self, k: int, s: Second, traffic: float) -> list[Reading]:
        r = self.rng
        sc = self.sc
        n = sc.node
        miss = sc.missing
        rs: list[Reading] = []
        ts = self._ts(k, "switch")
        sk = (n.switch, n.switch_port)
        if sc.switch_stale > 0:
            refresh = r.random() >= sc.switch_stale
        else:
            refresh = k % sc.switch_refresh == 0
        self._count(rs, sig.SW_RX_BYTES, sk, traffic, ts=ts, miss=miss, refresh=refresh)
        self._count(rs, sig.SW_TX_BYTES, sk, traffic, ts=ts, miss=miss, refresh=refresh)
        for direction, ratio in (("rx", s.pfc_sw), ("tx", s.pfc_sw * 0.3)):
            pk = (*sk, n.priority, direction)
            if r.random() >= miss:
                rs.append(Reading(sig.SW_PFC_RATIO, pk, ratio, ts=ts))
            self._count(rs, sig.SW_PFC_FRAMES, pk, ratio * 5960, ts=ts, miss=miss, refresh=refresh)
        if "congestion" not in self.traits.off:
            ek = (*sk, n.priority)
            self._count(rs, sig.SW_ECN, ek, s.ecn * 1.1, ts=ts, miss=miss, refresh=refresh)
        if r.random() >= miss or s.link_up < 1:
            rs.append(Reading(sig.SW_PORT_UP, sk, s.link_up, ts=ts))
        return rs

    def _storage(self, k: int, s: Second) -> list[Reading]:
        r = self.rng
        n = self.sc.node
        off = self.traits.off
        miss = self.sc.missing
        rs: list[Reading] = []
        ts = self._ts(k, "storage")
        pk = (n.path,)
        shown = len(rs)
        self._count(rs, sig.ST_WRITE_BYTES, pk, s.st_bytes, ts=ts, miss=miss)
        if "write_ops" not in off:
            # Same poll as the bytes (one diskstats line), no draw of its own.
            okey = (sig.ST_WRITE_OPS, pk)
            ops = self.counters.get(okey, 0.0) + s.st_bytes / (s.st_req or self.traits.st_req)
            self.counters[okey] = ops
            if len(rs) > shown:
                rs.append(Reading(sig.ST_WRITE_OPS, pk, float(round(ops)), ts=ts))
        if r.random() >= miss:
            rs.append(Reading(sig.ST_WRITE_LAT, pk, s.st_lat, ts=ts))
        if "burst" not in off and r.random() >= miss:
            rs.append(Reading(sig.ST_WRITE_BURST, pk, s.burst, ts=ts))
        if "probe" not in off:
            if r.random() >= miss:
                rs.append(Reading(sig.ST_PROBE_LAST, pk, s.probe_lat, ts=ts))
            if s.probe_fail:
                fkey = (sig.ST_PROBE_FAIL, (n.path, "timeout"))
                self.counters[fkey] = self.counters.get(fkey, 0.0) + 1.0
            for (name, labels), v in self.counters.items():
                if name == sig.ST_PROBE_FAIL:
                    rs.append(Reading(name, labels, v, ts=ts))
        return rs

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
