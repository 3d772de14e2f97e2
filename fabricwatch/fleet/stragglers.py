"""Stragglers (fail-slow nodes), from comparing the nodes of a job with each other.

A node whose GPUs run slower (clock throttle, power capping, a degraded NIC or
NVLink) makes every other node of the job wait at each iteration. No node
stalls long enough for its own engine: the waiting nodes show short, periodic
idle gaps and nothing local; the slow node never idles and works at a lower
level. Per window (``window`` seconds, at least a few samples), for every node
of a job:

- its work signal: mean SM activity of its job GPUs (power when a node has no
  SM activity), relative to that node's own busy level (90th percentile over
  the whole replay), so GPU generations and models compare;
- ``idle``: the share of samples below ``idle_level`` of that level.

A window names a straggler when one node's idle share is at most ``calm`` while
the job's other nodes' median idle share is at least ``waiting`` and that node
worked at no more than ``slower`` of the others' median level. Two or more such
windows in a row, same node, are one job incident with the cause
``straggler`` and that node as origin; the others waited, and their idle
seconds times their GPUs are the GPU-seconds lost.

Offline only: the live aggregator sees node incidents, not the nodes'
telemetry (fleet replay has it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.fleet.model import GroupKey, cluster_incident_key, group_topic_id
from fabricwatch.outputs.outbox import iso


@dataclass(frozen=True, slots=True)
class StragglerSettings:
    """Thresholds, all relative (to the node's own busy level, or shares of time)."""

    window: float = 60.0
    idle_level: float = 0.2
    calm: float = 0.03
    waiting: float = 0.12
    slower: float = 0.85
    min_windows: int = 2
    min_nodes: int = 3


@dataclass(frozen=True, slots=True)
class _NodeWork:
    jobs: dict[str, set[str]]  # job -> its GPUs on this node
    points: list[tuple[float, float]]  # (ts, mean work of the node's GPUs)


def _node_work(samples: Sequence[Sample]) -> _NodeWork:
    jobs: dict[str, set[str]] = {}
    sm: dict[float, list[float]] = {}
    power: dict[float, list[float]] = {}
    for ts, fam, labels, value in samples:
        if fam == sig.GPU_JOB and value > 0:
            jobs.setdefault(labels[1], set()).add(labels[0])
        elif fam == sig.GPU_SM:
            sm.setdefault(round(ts), []).append(value)
        elif fam == sig.GPU_POWER:
            power.setdefault(round(ts), []).append(value)
    series = sm or power
    points = sorted((float(t), sum(v) / len(v)) for t, v in series.items() if v)
    return _NodeWork(jobs, points)


def _p90(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.9 * (len(s) - 1)))] if s else 0.0


def find_stragglers(
    samples_by_node: Mapping[str, Sequence[Sample]],
    settings: StragglerSettings | None = None,
    *,
    cluster: str = "default",
) -> list[dict[str, Any]]:
    """Straggler job incidents (``fabricwatch.cluster-incident/v1`` job documents)."""
    st = settings or StragglerSettings()
    work = {n: _node_work(s) for n, s in samples_by_node.items()}
    by_job: dict[str, list[str]] = {}
    gpus: dict[tuple[str, str], int] = {}
    for node, w in work.items():
        for job, g in w.jobs.items():
            by_job.setdefault(job, []).append(node)
            gpus[(node, job)] = len(g)
    out: list[dict[str, Any]] = []
    for job, nodes in sorted(by_job.items()):
        if len(nodes) < st.min_nodes:
            continue
        out.extend(
            _job_stragglers(job, sorted(nodes), work=work, gpus=gpus, st=st, cluster=cluster)
        )
    return out


def _windows(
    nodes: Sequence[str], work: Mapping[str, _NodeWork], st: StragglerSettings
) -> list[tuple[float, dict[str, tuple[float, float, float]]]]:
    """Per window start: node -> (idle share, relative level while working, idle seconds)."""
    t0 = min((work[n].points[0][0] for n in nodes if work[n].points), default=math.inf)
    t1 = max((work[n].points[-1][0] for n in nodes if work[n].points), default=-math.inf)
    if t1 <= t0:
        return []
    busy = {n: _p90([v for _, v in work[n].points]) for n in nodes}
    out: list[tuple[float, dict[str, tuple[float, float, float]]]] = []
    k = 0
    while t0 + k * st.window <= t1:
        lo, hi = t0 + k * st.window, t0 + (k + 1) * st.window
        row: dict[str, tuple[float, float, float]] = {}
        for n in nodes:
            b = busy[n]
            pts = [v for t, v in work[n].points if lo <= t < hi]
            if len(pts) < 5 or b <= 0:
                continue
            idle = [v for v in pts if v < st.idle_level * b]
            working = [v / b for v in pts if v >= st.idle_level * b]
            spacing = st.window / len(pts)
            level = median(working) if working else 0.0
            row[n] = (len(idle) / len(pts), level, len(idle) * spacing)
        out.append((lo, row))
        k += 1
    return out


def _job_stragglers(
    job: str,
    nodes: Sequence[str],
    *,
    work: Mapping[str, _NodeWork],
    gpus: Mapping[tuple[str, str], int],
    st: StragglerSettings,
    cluster: str,
) -> list[dict[str, Any]]:
    flagged: list[tuple[float, str, dict[str, tuple[float, float, float]]]] = []
    for lo, row in _windows(nodes, work, st):
        if len(row) < st.min_nodes:
            continue
        for n, (idle, level, _) in row.items():
            others = [v for m, v in row.items() if m != n]
            if (
                idle <= st.calm
                and median(o[0] for o in others) >= st.waiting
                and level <= st.slower * median(o[1] for o in others)
            ):
                flagged.append((lo, n, row))
    episodes: list[list[tuple[float, str, dict[str, tuple[float, float, float]]]]] = []
    for item in flagged:
        last = episodes[-1][-1] if episodes else None
        if last is not None and last[1] == item[1] and item[0] - last[0] <= st.window * 1.5:
            episodes[-1].append(item)
        else:
            episodes.append([item])
    docs: list[dict[str, Any]] = []
    for ep in episodes:
        if len(ep) < st.min_windows:
            continue
        origin = ep[0][1]
        onset, end = ep[0][0], ep[-1][0] + st.window
        waiting = sorted(n for n in nodes if n != origin)
        lost = sum(
            ep_row[n][2] * gpus.get((n, job), 0)
            for _, _, ep_row in ep
            for n in waiting
            if n in ep_row
        )
        idle_others = median(median(r[n][0] for n in waiting if n in r) for _, _, r in ep)
        level = median(r[origin][1] for _, _, r in ep) / max(
            1e-9, median(median(r[n][1] for n in waiting if n in r) for _, _, r in ep)
        )
        docs.append(
            _doc(
                cluster, job, origin=origin, waiting=waiting, onset=onset, end=end, lost=lost,
                idle_others=idle_others, level=level,
            )
        )  # fmt: skip
    return docs


def _doc(
    cluster: str,
    job: str,
    *,
    origin: str,
    waiting: list[str],
    onset: float,
    end: float,
    lost: float,
    idle_others: float,
    level: float,
) -> dict[str, Any]:
    key = GroupKey("job", job)
    evidence = (
        f"{origin} never waited and worked at {level:.0%} of the others' level while the "
        f"job's other nodes idled {idle_others:.0%} of the time"
    )
    summary = (
        f"GPUs on {len(waiting) + 1} nodes of job {job} slowed down {end - onset:.0f} s; "
        f"origin: {origin}, straggler ({evidence}); {len(waiting)} nodes waited on it; "
        f"{lost:,.0f} GPU-seconds lost"
    )
    return {
        "schema": "fabricwatch.cluster-incident/v1",
        "key": cluster_incident_key(cluster, key, onset),
        "cluster": cluster,
        "group": {"kind": "job", "name": job, "id": group_topic_id(cluster, key)},
        "node": key.subject,
        "kind": "slowdown",
        "state": "resolved",
        "cause": "straggler",
        "confidence": round(min(0.95, 0.5 + idle_others), 3),
        "culprit": {"key": str(key), "kind": "job", "labels": {"job": job, "origin": origin}},
        "summary": summary,
        "onset": iso(onset),
        "onset_unix": round(onset, 3),
        "resolved_unix": round(end, 3),
        "duration_seconds": round(end - onset, 3),
        "job": job,
        "jobs": [job],
        "origin": {
            "node": origin,
            "incident": "",
            "cause": "straggler",
            "confidence": round(min(0.95, 0.5 + idle_others), 3),
            "culprit": f"node:{origin}",
            "culprit_kind": "node",
            "evidence": evidence,
            "onset_unix": round(onset, 3),
            "group": str(key),
        },
        "also": [],
        "waiting": waiting,
        "waiting_count": len(waiting),
        "first_stalled": [],
        "job_nodes": sorted([origin, *waiting]),
        "members": [],
        "paged": True,
        "covered_by": None,
        "gpu_seconds_lost": round(lost, 3),
        "revision": 1,
    }
