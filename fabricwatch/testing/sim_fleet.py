"""Multi-node scenarios: many simulated nodes in a few jobs behind a few leaves.

Each node is one :class:`~fabricwatch.testing.sim_scenarios.Scenario` run through
the real engine (:func:`~fabricwatch.testing.sim_scenarios.run_live`); this module
decides what each node sees when a fault hits one node or one switch, and
spreads the symptoms the way real fabrics do:

- the origin of a fault (a NIC port's PFC storm, an XID, an NVLink collapse,
  slow storage, a link loss) shows its local evidence and stalls;
- the other nodes of its job stall too (the collective hangs), 0-2 s apart,
  with no local evidence: ``unknown`` in their own records;
- PFC back-pressure: every other node behind the origin's leaf (of its job
  and of other jobs) *receives* pauses at a fraction of the origin's
  pause-time (10-35 %); the origin sends them;
- a link loss rehashes the origin's traffic onto the other nodes behind its
  leaf (their NIC traffic rises);
- a shared switch fault (a storm on one leaf) stalls every node behind that
  leaf, whatever job, and the other nodes of those jobs wait.

Ground truth (:class:`FaultTruth`) says which nodes may be named origin; a
victim never may. :func:`node_transitions` gives each node's incident
transitions; the live fleet (MQTT) and the offline fleet
(:mod:`fabricwatch.fleet.replay`) consume them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import Injection, NodeSpec, Scenario, run_live

FaultKind = Literal["port", "gpu", "nvlink", "storage", "link", "switch", "unknown", "straggler"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "port",
    "gpu",
    "nvlink",
    "storage",
    "link",
    "switch",
    "unknown",
)
"""The faults the live fleet names (``straggler`` needs the nodes' telemetry: fleet replay)."""
_LOCAL: dict[str, tuple[str, int]] = {
    "port": ("pfc_storm", 1),  # NIC-side storm: the NIC sends the pauses
    "gpu": ("gpu_fault", 0),
    "nvlink": ("nvlink_degraded", 0),
    "storage": ("storage_latency", 1),
    "link": ("link_down", 0),
    "unknown": ("unknown", 0),
    # A fail-slow node: it keeps working, at a lower level, and never waits.
    "straggler": ("eval_phase", 0),
}
_CAUSE = {
    "port": "pfc_storm",
    "gpu": "gpu_fault",
    "nvlink": "nvlink_degraded",
    "storage": "storage_latency",
    "link": "link_down",
    "switch": "pfc_storm",
    "unknown": "unknown",
    "straggler": "straggler",
}
Steps = Iterator[tuple[float, list[tuple[str, list[Reading]]]]]


@dataclass(frozen=True, slots=True)
class SimNode:
    """One simulated node: its name, job, leaf and port on it."""

    name: str
    job: str
    leaf: str
    port: str
    seed: int


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault: on one node (``target`` a node name) or one leaf (``switch``).

    ``start`` and ``duration`` are seconds after the scenario start.
    """

    kind: FaultKind
    target: str
    start: float
    duration: float
    magnitude: float = 0.7


@dataclass(frozen=True, slots=True)
class FaultTruth:
    """What the fleet should say about one fault.

    Attributes:
        fault: the fault.
        onset: unix time the first GPU stalled.
        cause: the expected cause.
        jobs: the jobs it stalls.
        origins: nodes that may be named origin (their evidence is local); empty
            for ``unknown``.
        stalled: every node that stalls.
        page_group: the grouping-key kind of its one page (``job``, ``switch``,
            ``storage``).
    """

    fault: Fault
    onset: float
    cause: str
    jobs: tuple[str, ...]
    origins: frozenset[str]
    stalled: frozenset[str]
    page_group: str


@dataclass(frozen=True, slots=True)
class Cluster:
    """Nodes in jobs behind leaves, and the faults that hit them."""

    nodes: tuple[SimNode, ...]
    faults: tuple[Fault, ...]
    duration: int
    start_ts: int
    gpus: int = 8

    def by_name(self, name: str) -> SimNode:
        """A node by name."""
        return next(n for n in self.nodes if n.name == name)

    def truth(self) -> list[FaultTruth]:
        """Ground truth per fault."""
        out: list[FaultTruth] = []
        for f in self.faults:
            if f.kind == "switch":
                hit = [n for n in self.nodes if n.leaf == f.target]
                origins = frozenset(n.name for n in hit)
                group = "switch"
            else:
                hit = [self.by_name(f.target)]
                origins = frozenset() if f.kind == "unknown" else frozenset({f.target})
                group = "storage" if f.kind == "storage" else "job"
            jobs = tuple(sorted({n.job for n in hit}))
            stalled = frozenset(n.name for n in self.nodes if n.job in jobs)
            out.append(
                FaultTruth(
                    f, self.start_ts + f.start, _CAUSE[f.kind], jobs, origins, stalled, group
                )
            )
        return out


def build_cluster(
    *,
    nodes: int = 16,
    jobs: int = 2,
    leaves: int = 4,
    seed: int = 1,
    kinds: Sequence[FaultKind] = FAULT_KINDS,
    spacing: int = 150,
    warmup: int = 180,
    fault_s: float = 30.0,
    start_ts: int = 1_760_000_000,
) -> Cluster:
    """``nodes`` in ``jobs`` contiguous blocks, node *i* behind leaf *i* mod ``leaves``
    (so every job spans every leaf), one fault of each of ``kinds`` every ``spacing``
    seconds after ``warmup``, on a node (or leaf) drawn from ``seed``."""
    rng = random.Random(seed)  # noqa: S311 - simulation, not crypto
    members = tuple(
        SimNode(
            name=f"gpu-{i:03d}",
            job=f"slurm:{8800 + i * jobs // nodes}",
            leaf=f"leaf-{i % leaves + 1}",
            port=f"swp{i // leaves + 1}",
            seed=seed * 1000 + i,
        )
        for i in range(nodes)
    )
    faults: list[Fault] = []
    for k, kind in enumerate(kinds):
        start = warmup + k * spacing
        if kind == "switch":
            target = f"leaf-{rng.randrange(leaves) + 1}"
        else:
            target = rng.choice(members).name
        faults.append(Fault(kind, target, float(start), fault_s, rng.uniform(0.5, 0.9)))
    duration = warmup + len(kinds) * spacing + 60
    return Cluster(members, tuple(faults), duration, start_ts)


@dataclass(slots=True)
class _Spread:
    """Symptoms a node sees from a fault elsewhere, during [start, end)."""

    start: float
    end: float
    rx_pause: float = 0.0
    traffic: float = 1.0


@dataclass(slots=True)
class NodePlan:
    """One node's injections and the symptoms spread onto it."""

    node: SimNode
    injections: list[Injection] = field(default_factory=list)
    spread: list[_Spread] = field(default_factory=list)


def plan(cluster: Cluster) -> list[NodePlan]:
    """What each node experiences."""
    plans = {n.name: NodePlan(n) for n in cluster.nodes}
    for f in cluster.faults:
        rng = random.Random(f"{f.kind}|{f.target}|{f.start}")  # noqa: S311 - simulation
        end = f.start + f.duration
        if f.kind == "switch":
            hit = [n for n in cluster.nodes if n.leaf == f.target]
            for n in hit:
                plans[n.name].injections.append(
                    Injection("pfc_storm", f.start, f.duration, f.magnitude, variant=0)
                )
        else:
            origin = cluster.by_name(f.target)
            what, variant = _LOCAL[f.kind]
            plans[origin.name].injections.append(
                Injection(what, f.start, f.duration, f.magnitude, variant=variant)
            )
            hit = [origin]
            for n in cluster.nodes:
                if n.leaf != origin.leaf or n.name == origin.name:
                    continue
                if f.kind == "port":
                    # Back-pressure: the leaf pauses its other ports at a fraction
                    # of the origin's pause-time.
                    plans[n.name].spread.append(
                        _Spread(f.start, end, rx_pause=rng.uniform(0.1, 0.35))
                    )
                elif f.kind == "link":
                    plans[n.name].spread.append(
                        _Spread(f.start, end, traffic=rng.uniform(1.2, 1.5))
                    )
        stalled_jobs = {n.job for n in hit}
        hit_names = {n.name for n in hit}
        for n in cluster.nodes:
            if n.job in stalled_jobs and n.name not in hit_names:
                if f.kind == "straggler":
                    # The others wait for it at every iteration: short periodic idle.
                    plans[n.name].injections.append(
                        Injection("straggler", f.start, f.duration, f.magnitude)
                    )
                    continue
                lag = rng.choice((0.0, 1.0, 1.0, 2.0))
                plans[n.name].injections.append(
                    Injection("unknown", f.start + lag, f.duration - lag)
                )
    return [plans[n.name] for n in cluster.nodes]


def _scenario(cluster: Cluster, p: NodePlan) -> Scenario:
    return Scenario(
        duration=cluster.duration,
        injections=p.injections,
        seed=p.node.seed,
        start_ts=cluster.start_ts,
        node=NodeSpec(gpus=cluster.gpus, switch=p.node.leaf, switch_port=p.node.port),
    )


def node_steps(cluster: Cluster, p: NodePlan) -> Steps:
    """The node's collector batches per second: its own scenario, its job's key,
    and the symptoms spread from faults elsewhere."""
    sc = _scenario(cluster, p)
    extra: dict[tuple[str, tuple[str, ...]], float] = {}
    last: dict[tuple[str, tuple[str, ...]], float] = {}
    for t, batches in sc.steps():
        k = t - 0.5 - cluster.start_ts
        active = [s for s in p.spread if s.start <= k < s.end]
        rx = max((s.rx_pause for s in active), default=0.0)
        traffic = max((s.traffic for s in active), default=1.0)
        out: list[tuple[str, list[Reading]]] = []
        for coll, readings in batches:
            rs: list[Reading] = []
            for r in readings:
                w = r
                if r.name == sig.GPU_JOB:
                    w = r._replace(labels=(r.labels[0], p.node.job))
                elif r.name == sig.NIC_PFC_RATIO and rx and r.labels[-1] == "rx":
                    w = r._replace(value=max(r.value, rx))
                elif r.name in (sig.NIC_TX_BYTES, sig.NIC_RX_BYTES):
                    key = (r.name, r.labels)
                    prev = last.get(key, r.value)
                    if traffic != 1.0 and r.value >= prev:
                        extra[key] = extra.get(key, 0.0) + (r.value - prev) * (traffic - 1.0)
                    last[key] = r.value
                    w = r._replace(value=float(round(r.value + extra.get(key, 0.0))))
                rs.append(w)
            out.append((coll, rs))
        yield t, out


def node_samples(cluster: Cluster) -> dict[str, list[Sample]]:
    """Every node's telemetry as replay samples (what its job reports are built from)."""
    out: dict[str, list[Sample]] = {}
    for p in plan(cluster):
        rs = [r for _, batches in node_steps(cluster, p) for _, x in batches for r in x]
        out[p.node.name] = [(float(r.ts or 0.0), r.name, r.labels, r.value) for r in rs]
    return out


def node_transitions(
    cluster: Cluster, p: NodePlan, settings: EngineSettings | None = None
) -> list[IncidentTransition]:
    """Run the real engine over one node's telemetry."""
    sc = _scenario(cluster, p)
    return run_live(sc, settings, node=p.node.name, steps=node_steps(cluster, p))


def all_transitions(
    cluster: Cluster, settings: EngineSettings | None = None
) -> dict[str, list[IncidentTransition]]:
    """Every node's transitions, by node name."""
    return {p.node.name: node_transitions(cluster, p, settings) for p in plan(cluster)}


def in_time_order(
    by_node: dict[str, list[IncidentTransition]],
) -> list[tuple[str, IncidentTransition]]:
    """All transitions of all nodes by time (then node), as the broker would see them."""
    flat = [(n, tr) for n, trs in by_node.items() for tr in trs]
    flat.sort(key=lambda x: (x[1].at, x[0]))
    return flat


def window(truth: FaultTruth, onset: float, slack: float = 5.0) -> bool:
    """Whether an incident with ``onset`` belongs to this fault's episode."""
    f = truth.fault
    return truth.onset - slack <= onset <= truth.onset + f.duration


def jobs_of(nodes: Iterable[SimNode]) -> list[str]:
    """Distinct jobs, sorted."""
    return sorted({n.job for n in nodes})
