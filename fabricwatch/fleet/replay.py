"""Fleet grouping offline: the live aggregator's :class:`~fabricwatch.fleet.grouper.Grouper`
driven by node incident transitions in time order, with their own timestamps as the
clock (no broker, no sinks).

``fabricwatch replay`` over several nodes' telemetry runs each node's engine,
then :func:`group_offline` over all their transitions: the same grouping code
and the same settings as the live fleet, so the same job incidents, origins and
members come out ("which node stalled job X last Tuesday?").
"""

from __future__ import annotations

import math
import multiprocessing
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from fabricwatch.defaults import FLEET_NODE_LABEL
from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.engine.replay import ReplayResult
from fabricwatch.engine.replay_jobs import run_parallel, usable_cores
from fabricwatch.engine.replay_mapping import Mapper, ReplayError, Sample
from fabricwatch.engine.replay_openmetrics import parse_openmetrics
from fabricwatch.engine.replay_prometheus import fetch_prometheus, prom_query, selector
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.jobwork import reports_by_node
from fabricwatch.fleet.model import member_from_incident
from fabricwatch.fleet.nccl import with_nccl
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.fleet.stragglers import StragglerSettings, stragglers_in
from fabricwatch.jobkeys import pod_owner
from fabricwatch.outputs.mqtt import topic_segment

REPLICA = "replay"


@dataclass(frozen=True, slots=True)
class FleetResult:
    """What the offline fleet decided.

    Attributes:
        transitions: every cluster incident transition, in time order.
        incidents: the latest document of each cluster incident, by onset.
    """

    transitions: tuple[GroupTransition, ...]
    incidents: tuple[dict[str, Any], ...]

    def jobs(self) -> list[dict[str, Any]]:
        """The job incidents."""
        return [d for d in self.incidents if d.get("group", {}).get("kind") == "job"]


def group_offline(
    events: Iterable[tuple[str, IncidentTransition]],
    settings: FleetSettings,
    *,
    cluster: str = "default",
    step: float | None = None,
) -> FleetResult:
    """Group node transitions ``(node, transition)`` (any order) as the live fleet would.

    Time advances from one transition to the next in ticks of ``step`` seconds
    (default: ``settings.tick``), then on until every group resolved.
    """
    tick = step if step is not None else settings.tick
    ordered = sorted(events, key=lambda x: (x[1].at, x[0], x[1].incident.key))
    g = Grouper(settings, REPLICA)
    out: list[GroupTransition] = []
    if not ordered:
        return FleetResult((), ())
    t0 = ordered[0][1].at
    g.set_owned(range(settings.partitions), t0 - settings.handover_delay - 1.0)
    seg = topic_segment(cluster)
    now = t0
    i = 0
    horizon = (
        settings.settle
        + settings.job_link_wait
        + settings.resolve_hold
        + settings.update_interval
        + 2 * tick
    )
    end = ordered[-1][1].at + horizon
    while now <= end:
        while i < len(ordered) and ordered[i][1].at <= now:
            node, tr = ordered[i]
            m = member_from_incident(
                to_json(tr.incident),
                cluster=seg,
                node=topic_segment(node),
                published=tr.at,
                source=f"replay:{node}",
            )
            g.on_member(m, now)
            i += 1
        out.extend(g.tick(now))
        if i >= len(ordered) and not any(x.state != "resolved" for x in g.groups.values()):
            break
        now += tick
    latest: dict[str, dict[str, Any]] = {}
    for gt in out:
        latest[str(gt.doc["key"])] = gt.doc
    docs = sorted(latest.values(), key=lambda d: (float(d["onset_unix"]), str(d["key"])))
    return FleetResult(tuple(out), tuple(docs))


def job_lines(result: FleetResult) -> Sequence[str]:
    """One line per cluster incident, job incidents with their origin and waiting nodes."""
    lines: list[str] = []
    for d in result.incidents:
        lines.append(f"{d['onset']}  {d['group']['kind']}:{d['group']['name']}  {d['summary']}")
        if d["group"]["kind"] == "job" and d.get("waiting"):
            lines.append(f"    waited: {', '.join(d['waiting'])}")
    return lines


# ---------------------------------------------------------------------------
# Several nodes' telemetry: split by node, replay each node's engine, group.

DEFAULT_NODE_LABEL = FLEET_NODE_LABEL
_PORT = re.compile(r"^\[?(.+?)\]?:[0-9]{1,5}$")
_TS = re.compile(r"\s(\S+)\s*$")


def node_name(value: str) -> str:
    """A node from a label value: ``gpu-017:9400`` -> ``gpu-017`` (exporters of one
    host are scraped on different ports)."""
    m = _PORT.match(value)
    return m.group(1) if m else value


def _label_re(label: str) -> re.Pattern[str]:
    return re.compile(r"[{,]\s*" + re.escape(label) + r'\s*=\s*"((?:[^"\\]|\\.)*)"')


_HPC_JOB = _label_re("hpc_job")
_POD = _label_re("pod")
_NAMESPACE = _label_re("namespace")
_GPU = _label_re("gpu")


def _float(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _dcgm_job(line: str) -> str:
    """The job a dcgm-exporter series names: its HPC job mapping (``hpc_job``, Slurm)
    or its Kubernetes pod (``namespace``/``pod``, keyed like the node daemon does)."""
    m = _HPC_JOB.search(line)
    if m and m.group(1):
        job = m.group(1)
        return job if ":" in job else f"slurm:{job}"
    pod, ns = _POD.search(line), _NAMESPACE.search(line)
    if pod and ns and pod.group(1) and ns.group(1):
        return f"k8s:{ns.group(1)}/{pod_owner(pod.group(1))}"
    return ""


@dataclass(slots=True)
class NodeStreams:
    """OpenMetrics sample lines split by node, plus what could not be placed."""

    lines: dict[str, list[str]]
    unplaced: int = 0
    _job_ts: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def add(
        self, lines: Iterable[str], *, node_label: str = DEFAULT_NODE_LABEL, default: str = ""
    ) -> None:
        """Sort one source's lines by their node label (``default`` for lines without one,
        dropped and counted when there is none). dcgm-exporter's job labels become
        ``fabricwatch_gpu_job_info`` samples of their GPU."""
        node_re = _label_re(node_label)
        for raw in lines:
            line = raw.rstrip("\r\n")
            if not line or line.startswith("#") or line.isspace():
                continue
            m = node_re.search(line)
            node = node_name(m.group(1)) if m else default
            if not node:
                self.unplaced += 1
                continue
            out = self.lines.setdefault(node, [])
            out.append(line)
            if line.startswith("DCGM_FI_"):
                job = _dcgm_job(line)
                gpu = _GPU.search(line)
                ts = _TS.search(line)
                when = _float(ts.group(1)) if ts else None
                if job and gpu and when is not None:
                    # One job-info series per GPU and job, in time order: its samples
                    # come from whichever DCGM family reaches a time first.
                    key = (node, gpu.group(1), job)
                    if when > self._job_ts.get(key, -math.inf):
                        self._job_ts[key] = when
                        out.append(
                            f'{sig.GPU_JOB}{{gpu="{gpu.group(1)}",job_id="{job}"}} 1 {when!r}'
                        )


@dataclass(frozen=True, slots=True)
class FleetReplay:
    """Each node's replay and the fleet grouping over all of them."""

    nodes: dict[str, ReplayResult]
    fleet: FleetResult


def _replay_one(
    node: str, samples: Sequence[Sample], engine: EngineSettings, jobs: int
) -> ReplayResult:
    return run_parallel(samples, engine, node=node, jobs=jobs)


def replay_each(
    samples_by_node: Mapping[str, Sequence[Sample]],
    engine: EngineSettings,
    *,
    jobs: int | None = 1,
) -> dict[str, ReplayResult]:
    """Each node's replay; with ``jobs`` > 1 nodes run in parallel processes (each
    node's replay is independent), and when there are fewer nodes than jobs each
    node's own replay is split by time (the engine's parallel runner). The results
    are those of one pass (``None``: every usable core)."""
    n = usable_cores() if jobs is None else max(1, jobs)
    nodes = sorted(samples_by_node)
    if n == 1 or len(nodes) < n:
        return {x: _replay_one(x, samples_by_node[x], engine, n) for x in nodes}
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        futures = {x: pool.submit(_replay_one, x, samples_by_node[x], engine, 1) for x in nodes}
        return {x: f.result() for x, f in futures.items()}


def replay_nodes(
    samples_by_node: Mapping[str, Sequence[Sample]],
    engine: EngineSettings,
    fleet: FleetSettings,
    *,
    cluster: str = "default",
    job: str = "",
    jobs: int | None = 1,
) -> FleetReplay:
    """Run each node's engine over its samples, then the fleet grouping over all.

    ``job`` is the job of node incidents that carry none (telemetry without job
    information: the operator names the job being investigated); ``jobs`` as in
    :func:`replay_each`."""
    results = replay_each(samples_by_node, engine, jobs=jobs)
    events: list[tuple[str, IncidentTransition]] = []
    for node in sorted(samples_by_node):
        res = results[node]
        for tr in res.transitions:
            if job and not tr.incident.job:
                tr = replace(tr, incident=replace(tr.incident, job=job))  # noqa: PLW2901
            events.append((node, tr))
    grouped = group_offline(events, fleet, cluster=cluster)
    # Stragglers and NCCL evidence from the job reports the nodes would have
    # published, as live (built once: they read every sample).
    reports = reports_by_node(samples_by_node, StragglerSettings().window)
    slow = stragglers_in(reports, cluster=topic_segment(cluster))
    docs = sorted(
        (with_nccl(d, reports) for d in (*grouped.incidents, *slow)),
        key=lambda d: (float(d["onset_unix"]), str(d["key"])),
    )
    return FleetReplay(results, FleetResult(grouped.transitions, tuple(docs)))


def samples_from_streams(streams: NodeStreams) -> dict[str, list[Sample]]:
    """Parse each node's lines (:class:`ParseError` names the node)."""
    out: dict[str, list[Sample]] = {}
    for node, lines in sorted(streams.lines.items()):
        mapper = Mapper()
        parse_openmetrics([*lines, "# EOF"], mapper, source=f"node {node}")
        out[node] = mapper.finish()
    return out


def prometheus_nodes(
    url: str,
    start: float,
    end: float,
    matchers: Sequence[str],
    *,
    node_label: str = DEFAULT_NODE_LABEL,
    timeout: float = 30.0,
) -> list[str]:
    """The nodes (values of ``node_label``, ports stripped) with samples in the range."""
    width_ms = max(1, round((end - start) * 1000))
    # Aggregated before any function: functions drop __name__ and several families
    # of one node would collide. The subquery sees every step of the range.
    inner = f"count by ({node_label}) ({selector(matchers)})"
    query = f"max_over_time(({inner})[{width_ms}ms:60s])"
    data = prom_query(url, {"query": query, "time": f"{end:.3f}"}, timeout)
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        msg = "Prometheus answered no vector for the node listing"
        raise ReplayError(msg)
    nodes = {
        node_name(str(r.get("metric", {}).get(node_label, "")))
        for r in data.get("result", [])
        if isinstance(r, dict)
    }
    return sorted(n for n in nodes if n)


def prometheus_samples(
    url: str,
    start: float,
    end: float,
    matchers: Sequence[str],
    *,
    node_label: str = DEFAULT_NODE_LABEL,
    chunk: float = 3600.0,
    timeout: float = 30.0,
) -> dict[str, list[Sample]]:
    """Each node's samples: one range query per node (``node_label`` matching the node,
    with or without a port)."""
    out: dict[str, list[Sample]] = {}
    for node in prometheus_nodes(url, start, end, matchers, node_label=node_label, timeout=timeout):
        mapper = Mapper()
        own = [*matchers, f"{node_label}=~{re.escape(node)}(:[0-9]+)?"]
        fetch_prometheus(url, start, end, own, mapper, chunk=chunk, timeout=timeout)
        out[node] = mapper.finish()
    return out


def job_incident_json(d: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--json`` entry of one job incident: origin node, cause, culprit, members."""
    return {
        "key": d["key"],
        "job": d.get("job"),
        "onset": d.get("onset"),
        "onset_unix": d.get("onset_unix"),
        "duration_seconds": d.get("duration_seconds"),
        "cause": d.get("cause"),
        "confidence": d.get("confidence"),
        "origin": d.get("origin"),
        "culprit": d.get("culprit"),
        "also": d.get("also"),
        "waiting": d.get("waiting"),
        "first_stalled": d.get("first_stalled"),
        "job_nodes": d.get("job_nodes"),
        "members": d.get("members"),
        "paged": d.get("paged"),
        "covered_by": d.get("covered_by"),
        "gpu_seconds_lost": d.get("gpu_seconds_lost"),
        "summary": d.get("summary"),
    }
