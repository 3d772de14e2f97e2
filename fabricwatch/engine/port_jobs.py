"""Which job's traffic a port carries, on a node shared by two jobs or more.

GPUs 0-3 and 4-7 of one node may run two jobs, each over its own NIC ports
(and the switch ports behind them). Evidence on the other job's port never
explains a stall, and the culprit of congestion is the port that stands out
among its own job's ports. Two sources say which port is whose:

* live, the NIC collector's PCI topology (``fabricwatch_nic_gpu_locality_info``):
  the GPUs nearest a port (same PCIe switch, else host bridge, else NUMA
  node), when they all belong to one job;
* live and in replay, co-activity: a port's traffic rises and falls with its
  job's communication phases (and stops when the job stops), and has
  nothing to do with the other job's rhythm.

A port neither source settles is shared: its evidence may explain any job's
stall, with a lower score.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricwatch.engine import signals as sig
from fabricwatch.engine.jobs import pearson
from fabricwatch.store import Series, SnapshotStore

PortKey = tuple[str, str, str]
"""(``nic`` or ``switch``, device or switch, port)."""

# Traffic per side: transmitted bytes (a collective sends what it receives).
_TRAFFIC = {"nic": sig.NIC_TX_BYTES, "switch": sig.SW_TX_BYTES}
# The GPU's communication activity first (NVLink traffic moves with the
# port's), else its work signal (which falls while the job communicates,
# and stops with it): the magnitude of the correlation is what counts.
_GPU_SIGNALS = ((sig.NVLINK_TX, ("total",)), (sig.GPU_SM, ()), (sig.GPU_POWER, ()))
_LOCALITY_ORDER = ("pcie_switch", "host_bridge", "numa_node")
_MIN_POINTS = 12
# |r| at or above which a port moves with a job, and by how much it must
# move with that job more than with any other: noise over 12-20 window
# averages reaches 0.5 now and then, a port and its own job's GPUs measure
# the same phases and exceed 0.6 at any spacing that still shows them.
_SAME = 0.6
_MARGIN = 0.3


@dataclass(frozen=True, slots=True)
class PortJobs:
    """The node's jobs (GPU sets) and the job of each assigned port.

    With fewer than two jobs every port is the job's own.
    """

    jobs: tuple[frozenset[str], ...] = ()
    of: Mapping[PortKey, int] = field(default_factory=dict)

    def verdict(self, key: PortKey, scope: frozenset[str]) -> str:
        """``own``, ``other`` or ``shared``: whose port ``key`` is, for a
        stall of the GPUs ``scope`` (empty: every GPU)."""
        if len(self.jobs) < 2 or not scope:
            return "own"
        j = self.of.get(key)
        if j is None:
            return "shared"
        return "own" if self.jobs[j] & scope else "other"


def port_key(side: str, s: Series) -> PortKey:
    """The port a NIC or switch series is about (its first two labels)."""
    return (side, s.labels[0], s.labels[1])


def assign_ports(
    store: SnapshotStore,
    peers: Mapping[str, frozenset[str]],
    lo: float,
    hi: float,
    *,
    spacing: float,
) -> PortJobs:
    """Assign the node's ports to its jobs (``peers``: each GPU's job-mates),
    from PCI locality where the collector reports it, else from co-activity
    of the port's traffic with each job's GPUs over [lo, hi]."""
    jobs = tuple(sorted(set(peers.values()), key=sorted))
    if len(jobs) < 2:
        return PortJobs(jobs)
    index = {g: j for j, grp in enumerate(jobs) for g in grp}
    of = dict(_by_locality(store, index))
    signals = [_job_signal(store, grp, lo, hi) for grp in jobs]
    for side, fam in _TRAFFIC.items():
        for s in store.family(fam):
            key = port_key(side, s)
            if key not in of:
                j = _by_coactivity(s, signals, lo, hi, spacing)
                if j is not None:
                    of[key] = j
    return PortJobs(jobs, of)


def _by_locality(store: SnapshotStore, index: Mapping[str, int]) -> Iterable[tuple[PortKey, int]]:
    """Ports whose nearest GPUs all belong to one job (live PCI topology)."""
    gpu_of = {s.labels[3].lower(): s.labels[0] for s in store.family(sig.GPU_INFO)}
    near: dict[tuple[str, str], dict[str, set[str]]] = {}
    for s in store.family(sig.NIC_GPU_LOCALITY):
        gpu = gpu_of.get(s.labels[2].lower())
        if gpu is None or gpu not in index or s.value < 0.5:
            continue
        near.setdefault((s.labels[0], s.labels[1]), {}).setdefault(s.labels[3], set()).add(gpu)
    for (device, port), levels in sorted(near.items()):
        for level in _LOCALITY_ORDER:
            gpus = levels.get(level)
            if gpus:
                jobs = {index[g] for g in gpus}
                if len(jobs) == 1:
                    yield ("nic", device, port), jobs.pop()
                break


def _job_signal(
    store: SnapshotStore, gpus: frozenset[str], lo: float, hi: float
) -> list[tuple[list[float], list[float]]]:
    """Each GPU's (times, values) of its best signal in [lo, hi]."""
    out: list[tuple[list[float], list[float]]] = []
    for g in sorted(gpus):
        for fam, rest in _GPU_SIGNALS:
            s = store.get(fam, (g, *rest))
            if s is None:
                continue
            w = sig.window(s, lo, hi)
            if len(w.values) >= _MIN_POINTS:
                out.append((list(w.times), list(w.values)))
                break
    return out


def _at(times: Sequence[float], values: Sequence[float], t: float, tol: float) -> float | None:
    """The value sampled nearest ``t``, within ``tol``."""
    i = bisect_left(times, t)
    best: float | None = None
    gap = tol
    for k in (i - 1, i):
        if 0 <= k < len(times) and abs(times[k] - t) <= gap:
            gap = abs(times[k] - t)
            best = values[k]
    return best


def _by_coactivity(
    s: Series,
    signals: Sequence[Sequence[tuple[list[float], list[float]]]],
    lo: float,
    hi: float,
    spacing: float,
) -> int | None:
    """The job whose GPUs the port's traffic moves with, clearly more than
    with any other job's; None where no job stands out."""
    w = sig.window(s, lo, hi)
    if len(w.values) < _MIN_POINTS:
        return None
    tol = 0.5 * spacing
    rs: list[float] = []
    for gpus in signals:
        xs: list[float] = []
        ys: list[float] = []
        for t, v in zip(w.times, w.values, strict=True):
            vals = [x for x in (_at(ts, vs, t, tol) for ts, vs in gpus) if x is not None]
            if vals:
                xs.append(v)
                ys.append(sum(vals) / len(vals))
        r = pearson(xs, ys) if len(xs) >= _MIN_POINTS else math.nan
        rs.append(0.0 if math.isnan(r) else abs(r))
    best = max(range(len(rs)), key=lambda j: rs[j])
    rest = max((r for j, r in enumerate(rs) if j != best), default=0.0)
    if rs[best] >= _SAME and rs[best] - rest >= _MARGIN:
        return best
    return None
