"""Simulated fleet telemetry, rendered by the real exporter, as OpenMetrics for backfill.

Each simulated node runs the real pipeline end: every family that the
registered collectors and the engine declare goes into a
:class:`~fabricwatch.store.SnapshotStore`, and each scrape interval the real
exposition (:func:`fabricwatch.outputs.exposition.build_registry`) is read,
exactly as Prometheus would scrape it, plus the target labels Prometheus adds
(``instance``, ``job``, ``cluster``). The result is OpenMetrics text with
timestamps that ``promtool tsdb create-blocks-from openmetrics`` loads.

Three scenarios run side by side so every panel has something to show:
node 1 has a PFC pause storm on its switch uplink, node 2 periodic checkpoint
stalls on slow storage, node 3 an ECN/CNP surge and a failing NVLink.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from dashboards.catalogue import ENGINE, collector_states, declared_specs
from fabricwatch.counters import TrackerSettings
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.readings import HistogramValue, MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState

JOB = "fabricwatch"
CLUSTER = "lab"
CAUSES = ("pfc_storm", "checkpoint_write", "nvlink_degraded", "ecn_congestion")
PRICE_PER_GPU_HOUR = 2.5
PROBE_BOUNDS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, math.inf)


@dataclass(frozen=True, slots=True)
class Window:
    """A time window in seconds from the start of the simulation."""

    start: float
    end: float

    def __contains__(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True, slots=True)
class Scenario:
    """What happens on one node.

    Attributes:
        index: 0-based node number.
        stall: windows in which the node's GPUs are stalled, with the cause.
        pfc_storm: windows of a pause storm on the uplink, priority 3.
        checkpoints: windows of checkpoint writes to slow storage.
        ecn_surge: windows of heavy ECN marking / CNPs.
        nvlink_failing: windows in which GPU 0 link 1 logs recoveries.
        collector_down: windows in which the switch collector fails.
    """

    index: int
    stall: tuple[tuple[Window, str], ...] = ()
    pfc_storm: tuple[Window, ...] = ()
    checkpoints: tuple[Window, ...] = ()
    ecn_surge: tuple[Window, ...] = ()
    nvlink_failing: tuple[Window, ...] = ()
    collector_down: tuple[Window, ...] = ()

    @property
    def instance(self) -> str:
        """The target's ``instance`` label."""
        return f"gpu-node-{self.index + 1:02d}:9477"

    @property
    def switch(self) -> str:
        """The leaf switch this node uplinks to."""
        return f"leaf-{self.index // 2 + 1:02d}"

    @property
    def uplink(self) -> str:
        """The node's uplink port on the leaf."""
        return f"swp{11 + self.index}"

    def cause_at(self, t: float) -> str | None:
        """The stall cause at ``t``, or None when the node works."""
        for w, cause in self.stall:
            if t in w:
                return cause
        return None


def default_scenarios(duration: float) -> tuple[Scenario, ...]:
    """Three nodes with one fault story each, scaled to ``duration`` seconds."""
    d = duration

    def w(a: float, b: float) -> Window:
        return Window(a * d, b * d)

    storm = w(0.55, 0.68)
    ckpts = tuple(w(f, f + 0.04) for f in (0.2, 0.45, 0.7, 0.95))
    nvl = w(0.75, 0.9)
    return (
        Scenario(0, stall=((storm, "pfc_storm"),), pfc_storm=(storm,)),
        Scenario(1, stall=tuple((c, "checkpoint_write") for c in ckpts), checkpoints=ckpts),
        Scenario(
            2,
            stall=((nvl, "nvlink_degraded"),),
            ecn_surge=(w(0.6, 0.8),),
            nvlink_failing=(nvl,),
            collector_down=(w(0.3, 0.38),),
        ),
    )


@dataclass(slots=True)
class _NodeSim:
    """Mutable per-node state: the store, accumulated counters, histogram."""

    scenario: Scenario
    specs: Mapping[str, Sequence[MetricSpec]]
    gpus: int
    links: int
    rng: random.Random
    store: SnapshotStore = field(init=False)
    counters: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)
    hist: dict[tuple[str, ...], list[float]] = field(default_factory=dict)
    hist_sum: dict[tuple[str, ...], float] = field(default_factory=dict)
    opened: set[tuple[int, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.store = SnapshotStore(
            history=4, stale_after=300.0, tracker=TrackerSettings(gap_after=3600.0)
        )
        for owner, fams in self.specs.items():
            self.store.register(owner, fams)

    # -- label sets ---------------------------------------------------------

    def label_sets(self, spec: MetricSpec, t: float) -> Iterator[tuple[str, ...]]:
        """The series of ``spec`` on this node at ``t``."""
        sc = self.scenario
        nic = spec.name.startswith("fabricwatch_nic_")
        choices: dict[str, Sequence[str]] = {
            "gpu": [str(i) for i in range(self.gpus)],
            "link": [str(i) for i in range(self.links)],
            "priority": ["0", "3"],
            "direction": ["rx", "tx"],
            "device": ["mlx5_0", "mlx5_1"],
            "port": ["1"] if nic else [sc.uplink],
            "switch": [sc.switch],
            "queue": ["0", "3"],
            "path": ["checkpoints"],
            "cause": list(CAUSES),
            "xid": ["79"],
            "type": ["crc", "replay", "recovery"]
            if spec.name == "fabricwatch_gpu_nvlink_errors"
            else ["corrected"],
            "reason": ["timeout"],
            "job_id": ["slurm:4242"],
            "uuid": [],
            "neighbor_port": ["ens1f0np0"],
        }
        if spec.name == "fabricwatch_gpu_stalled":
            cause = sc.cause_at(t)
            for g in range(self.gpus):
                yield (str(g), cause or "none")
            return
        axes: list[Sequence[str]] = []
        for name in spec.labels:
            if name == "uuid":
                axes.append(["GPU-" + "0" * 8])
            else:
                axes.append(choices.get(name) or [_plausible(name)])
        yield from itertools.product(*axes)

    # -- values -------------------------------------------------------------

    def readings(self, owner: str, t: float, dt: float) -> list[Reading]:
        """One collection of ``owner``'s families at ``t``."""
        out: list[Reading] = []
        for spec in self.specs[owner]:
            for labels in self.label_sets(spec, t):
                if spec.kind is MetricKind.HISTOGRAM:
                    out.append(self._histogram(spec, labels, t))
                elif spec.kind is MetricKind.COUNTER:
                    key = (spec.name, labels)
                    total = self.counters.get(key, 0.0) + self._rate(spec, labels, t) * dt
                    self.counters[key] = total
                    out.append(Reading(spec.name, labels, total))
                else:
                    out.append(Reading(spec.name, labels, self._gauge(spec, labels, t)))
        return out

    def _noise(self, scale: float) -> float:
        return self.rng.uniform(-scale, scale)

    def _gauge(self, spec: MetricSpec, labels: tuple[str, ...], t: float) -> float:
        sc = self.scenario
        lab = dict(zip(spec.labels, labels, strict=True))
        stalled = sc.cause_at(t) is not None
        storm = any(t in w for w in sc.pfc_storm)
        ckpt = any(t in w for w in sc.checkpoints)
        n = spec.name
        if n == "fabricwatch_gpu_stalled":
            return 1.0 if lab["cause"] != "none" else 0.0
        if n == "fabricwatch_gpu_sm_active_ratio":
            return max(0.0, (0.02 if stalled else 0.82) + self._noise(0.02))
        if n == "fabricwatch_gpu_utilization_ratio":
            return 0.0 if ckpt else 0.97 + self._noise(0.02)
        if n == "fabricwatch_gpu_power_watts":
            return (140.0 if stalled else 610.0) + self._noise(15.0)
        if n == "fabricwatch_switch_pfc_pause_ratio":
            hot = storm and lab["priority"] == "3" and lab["direction"] == "rx"
            return 0.97 if hot else max(0.0, 0.01 + self._noise(0.01))
        if n == "fabricwatch_nic_pfc_pause_ratio":
            hot = storm and lab["priority"] == "3" and lab["device"] == "mlx5_0"
            return 0.9 if hot else max(0.0, 0.002 + self._noise(0.001))
        if n == "fabricwatch_switch_port_utilization_ratio":
            return 0.02 if stalled else 0.7 + self._noise(0.05)
        if n == "fabricwatch_storage_write_latency_seconds":
            return 0.4 + self._noise(0.1) if ckpt else 0.003 + self._noise(0.001)
        if n == "fabricwatch_storage_write_burst":
            return 1.0 if ckpt else 0.0
        if n == "fabricwatch_storage_probe_last_latency_seconds":
            return 2.5 if ckpt else 0.004
        if n == "fabricwatch_gpu_nvlink_up":
            failing = any(t in w for w in sc.nvlink_failing)
            return 0.0 if failing and lab["gpu"] == "0" and lab["link"] == "1" else 1.0
        if n.endswith("_ratio"):
            return max(0.0, 0.3 + self._noise(0.05))
        return 1.0

    def _rate(self, spec: MetricSpec, labels: tuple[str, ...], t: float) -> float:
        sc = self.scenario
        lab = dict(zip(spec.labels, labels, strict=True))
        cause = sc.cause_at(t)
        storm = any(t in w for w in sc.pfc_storm)
        ecn = any(t in w for w in sc.ecn_surge)
        ckpt = any(t in w for w in sc.checkpoints)
        n = spec.name
        if n == "fabricwatch_stall_gpu_seconds":
            return float(self.gpus) if cause == lab["cause"] else 0.0
        if n == "fabricwatch_stall_cost":
            return self.gpus * PRICE_PER_GPU_HOUR / 3600.0 if cause == lab["cause"] else 0.0
        if n == "fabricwatch_incidents_opened":
            return 0.0  # stepped in :meth:`step`
        if n in ("fabricwatch_gpu_nvlink_transmit_bytes", "fabricwatch_gpu_nvlink_receive_bytes"):
            if cause is not None:
                return 1e6
            return 40e9 * (1.0 + self._noise(0.05))
        if n == "fabricwatch_gpu_nvlink_errors":
            failing = any(t in w for w in sc.nvlink_failing)
            if failing and lab["gpu"] == "0" and lab["link"] == "1":
                return {"recovery": 0.05, "crc": 20.0, "replay": 5.0}[lab["type"]]
            return 0.01 if lab["type"] == "replay" else 0.0
        if n in ("fabricwatch_switch_pfc_pause_frames", "fabricwatch_nic_pfc_pause_frames"):
            hot = storm and lab["priority"] == "3"
            return 5960.0 if hot else 2.0
        if n in (
            "fabricwatch_nic_ecn_marked_packets",
            "fabricwatch_nic_cnp_sent_packets",
            "fabricwatch_nic_cnp_handled_packets",
            "fabricwatch_nic_priority_ecn_marked_packets",
            "fabricwatch_switch_ecn_marked_packets",
        ):
            return 5000.0 if ecn else 10.0
        if n in ("fabricwatch_switch_port_receive_bytes", "fabricwatch_switch_port_transmit_bytes"):
            return 1e8 if cause is not None else 35e9
        if n in ("fabricwatch_switch_port_discards", "fabricwatch_switch_queue_dropped_packets"):
            return 50.0 if storm else 0.1
        if n == "fabricwatch_storage_write_bytes":
            return 2e9 if ckpt else 5e6
        return 1.0

    def _histogram(self, spec: MetricSpec, labels: tuple[str, ...], t: float) -> Reading:
        ckpt = any(t in w for w in self.scenario.checkpoints)
        counts = self.hist.setdefault(labels, [0.0] * len(PROBE_BOUNDS))
        latency = (2.5 if ckpt else 0.004) * (1.0 + self._noise(0.2))
        for i, bound in enumerate(PROBE_BOUNDS):
            if latency <= bound:
                counts[i] += 1.0
        self.hist_sum[labels] = self.hist_sum.get(labels, 0.0) + latency
        hv = HistogramValue(
            buckets=tuple(zip(PROBE_BOUNDS, counts, strict=True)),
            count=counts[-1],
            sum=self.hist_sum[labels],
        )
        return Reading(spec.name, labels, counts[-1], histogram=hv)

    def step(self, t: float, dt: float, mono: float) -> None:
        """Run every collector (and the engine) once at simulated time ``t``."""
        cause = self.scenario.cause_at(t)
        if cause is not None:
            onset = next(w.start for w, c in self.scenario.stall if t in w)
            key = (int(onset), cause)
            if key not in self.opened:
                self.opened.add(key)
                ck = ("fabricwatch_incidents_opened", (cause,))
                self.counters[ck] = self.counters.get(ck, 0.0) + 1.0
        for owner in self.specs:
            result = self.store.ingest(owner, self.readings(owner, t, dt), now=mono)
            if result.rejected:
                msg = f"{owner}: simulated readings rejected: {result.reasons}"
                raise ValueError(msg)
        self.store.expire(mono)


def _constant(states: list[CollectorState]) -> Callable[[], list[CollectorState]]:
    def get() -> list[CollectorState]:
        return states

    return get


def _plausible(label: str) -> str:
    from dashboards.catalogue import plausible_labels

    return plausible_labels([label])[0]


def _with_target(
    labels: Mapping[str, str], target: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """Add target labels the way Prometheus does (``honor_labels: false``).

    A label the exporter sets that clashes with a target label is renamed
    ``exported_<name>`` (e.g. a ``job`` label would become ``exported_job``).
    """
    names = {k for k, _ in target}
    own = tuple(sorted((f"exported_{k}" if k in names else k, v) for k, v in labels.items()))
    return own + target


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def simulate(
    start_wall: float,
    duration: float,
    step: float,
    *,
    gpus: int = 8,
    links: int = 4,
    scenarios: Sequence[Scenario] | None = None,
    seed: int = 7,
) -> str:
    """OpenMetrics text of ``duration`` seconds of fleet telemetry from ``start_wall``.

    Every registered collector's and the engine's families are present on
    every node; samples are ``step`` seconds apart (one scrape each).
    """
    specs = declared_specs()
    engine_specs = specs[ENGINE]
    specs = {k: v for k, v in specs.items() if k != ENGINE}
    specs[ENGINE] = engine_specs
    sims = [
        _NodeSim(sc, specs, gpus, links, random.Random(seed + sc.index))  # noqa: S311 - simulation
        for sc in (scenarios if scenarios is not None else default_scenarios(duration))
    ]
    # family -> (type, series key -> [(ts, value)])
    families: dict[str, tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[str]]]] = {}
    for sim in sims:
        states = collector_states(specs)
        registry = build_registry(
            sim.store, _constant(states), ReloadStatus(), process_metrics=False
        )
        target = (("cluster", CLUSTER), ("instance", sim.scenario.instance), ("job", JOB))
        steps = int(duration // step) + 1
        for i in range(steps):
            t = i * step
            ts = start_wall + t
            sim.step(t, step if i else 0.0, mono=1000.0 + t)
            for s in states:
                down = s.name == "switch" and any(t in w for w in sim.scenario.collector_down)
                s.up = not down
                s.last_success_wall = s.last_success_wall if down else ts
            up_fam = families.setdefault("up", ("gauge", {}))
            up_fam[1].setdefault(("up", target), []).append(f"1 {ts:.3f}")
            for metric in registry.collect():
                fam = families.setdefault(metric.name, (metric.type, {}))
                for sample in metric.samples:
                    key = (sample.name, _with_target(sample.labels, target))
                    fam[1].setdefault(key, []).append(f"{_fmt(sample.value)} {ts:.3f}")
    lines: list[str] = []
    for name in sorted(families):
        kind, series = families[name]
        lines.append(f"# TYPE {name} {kind}")
        for (sample_name, labels), points in series.items():
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            prefix = f"{sample_name}{{{lab}}} "
            lines.extend(prefix + p for p in points)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
