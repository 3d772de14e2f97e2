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

Windows lie on a grid of ``window`` seconds (unix time), so the live fleet and
fleet replay cut the same windows. Both feed the same input, the nodes' job
reports (:mod:`fabricwatch.fleet.jobwork`): live from MQTT
(:class:`LiveStragglers`), in replay built from each node's samples
(:func:`find_stragglers`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from fabricwatch.engine.causes import Cause
from fabricwatch.engine.incidents import TransitionKind
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.fleet.jobwork import WINDOW, JobWork, reports_by_node
from fabricwatch.fleet.model import GroupKey, cluster_incident_key, group_topic_id
from fabricwatch.outputs.outbox import iso


@dataclass(frozen=True, slots=True)
class StragglerSettings:
    """Thresholds, all relative (to the node's own busy level, or shares of time)."""

    window: float = WINDOW
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


def _node_work(reports: Sequence[JobWork]) -> _NodeWork:
    jobs: dict[str, set[str]] = {}
    points: dict[float, float] = {}
    for r in reports:
        for job, gpus in r.jobs:
            jobs.setdefault(job, set()).update(gpus)
        points.update(r.points)
    return _NodeWork(jobs, sorted(points.items()))


def _p90(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.9 * (len(s) - 1)))] if s else 0.0


def find_stragglers(
    samples_by_node: Mapping[str, Sequence[Sample]],
    settings: StragglerSettings | None = None,
    *,
    cluster: str = "default",
) -> list[dict[str, Any]]:
    """Straggler job incidents (``fabricwatch.cluster-incident/v1`` job documents) in
    several nodes' samples, from the job reports those nodes would have published."""
    st = settings or StragglerSettings()
    return stragglers_in(reports_by_node(samples_by_node, st.window), st, cluster=cluster)


def stragglers_in(
    reports: Mapping[str, Sequence[JobWork]],
    settings: StragglerSettings | None = None,
    *,
    cluster: str = "default",
) -> list[dict[str, Any]]:
    """Straggler job incidents in the nodes' job reports (node -> its reports)."""
    st = settings or StragglerSettings()
    work = {n: _node_work(r) for n, r in reports.items()}
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
    first = min((work[n].points[0][0] for n in nodes if work[n].points), default=math.inf)
    t0 = math.floor(first / st.window) * st.window if math.isfinite(first) else first
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
                gpus={n: gpus.get((n, job), 0) for n in (origin, *waiting)},
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
    gpus: Mapping[str, int],
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
        "cause": Cause.STRAGGLER,
        "confidence": round(min(0.95, 0.5 + idle_others), 3),
        "culprit": {"key": str(key), "kind": "job", "labels": {"job": job, "origin": origin}},
        "summary": summary,
        "onset": iso(onset),
        "onset_unix": round(onset, 3),
        "updated_unix": round(end, 3),
        "resolved_unix": round(end, 3),
        "duration_seconds": round(end - onset, 3),
        "node_count": len(gpus),
        "nodes": sorted(gpus),
        "gpu_count": sum(gpus.values()),
        "evidence": [
            {
                "cause": Cause.STRAGGLER,
                "family": "gpu_work",
                "culprit": f"node:{origin}",
                "score": 1.0,
                "text": evidence,
                "nodes": 1,
            }
        ],
        "job": job,
        "jobs": [job],
        "origin": {
            "node": origin,
            "incident": "",
            "cause": Cause.STRAGGLER,
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


@dataclass(frozen=True, slots=True)
class StragglerTransition:
    """A live straggler job incident opened, updated or resolved."""

    kind: TransitionKind
    at: float
    cluster: str
    job: str
    doc: dict[str, Any]


class LiveStragglers:
    """The live fleet's straggler detector: job reports in, job incidents out.

    Every replica receives every node's reports and runs the detector over all
    of them (the same reports give every replica the same incidents, so one
    that takes over a job continues its incident instead of paging it again);
    the aggregator records and pages only the jobs it owns. Reports older than
    ``horizon`` are dropped, so memory is bounded by nodes x horizon, and each
    node's busy level is taken over that horizon.
    """

    def __init__(
        self, settings: StragglerSettings | None = None, *, horizon: float = 7200.0
    ) -> None:
        self.settings = settings or StragglerSettings()
        self.horizon = horizon
        self.reports: dict[tuple[str, str], list[JobWork]] = {}
        self.known: dict[str, dict[str, Any]] = {}
        self._dirty: set[str] = set()

    def add(self, cluster: str, report: JobWork) -> None:
        """Take one node report (kept in time order; a repeated window replaces)."""
        rs = self.reports.setdefault((cluster, report.node), [])
        rs[:] = [r for r in rs if r.start != report.start]
        rs.append(report)
        rs.sort(key=lambda r: r.start)
        self._dirty.add(cluster)

    def _latest(self, cluster: str, job: str) -> float:
        return max(
            (r.end for (c, _), rs in self.reports.items() if c == cluster for r in rs[-1:]
             if any(j == job for j, _ in r.jobs)),
            default=-math.inf,
        )  # fmt: skip

    def tick(self, now: float) -> list[StragglerTransition]:
        """Detect over what arrived since the last tick; transitions in onset order."""
        old = [k for k, rs in self.reports.items() if not rs or now - rs[-1].end > self.horizon]
        for key in old:
            del self.reports[key]
        for rs in self.reports.values():
            rs[:] = [r for r in rs if now - r.end <= self.horizon]
        out: list[StragglerTransition] = []
        for cluster in sorted(self._dirty):
            by_node = {n: rs for (c, n), rs in self.reports.items() if c == cluster}
            for doc in stragglers_in(by_node, self.settings, cluster=cluster):
                out.extend(self._compare(cluster, doc, now))
        self._dirty.clear()
        for ikey, doc in list(self.known.items()):
            if now - float(doc["updated_unix"]) > self.horizon:
                del self.known[ikey]
        return out

    def _compare(self, cluster: str, doc: dict[str, Any], now: float) -> list[StragglerTransition]:
        job = str(doc["job"])
        # Still open while its last flagged window is the job's latest complete one.
        ongoing = float(doc["resolved_unix"]) + self.settings.window >= self._latest(cluster, job)
        doc["state"] = "open" if ongoing else "resolved"
        if ongoing:
            doc["resolved_unix"] = None
        before = self.known.get(str(doc["key"]))
        out: list[StragglerTransition] = []
        if before is None:
            doc["revision"] = 1
            out.append(StragglerTransition("opened", now, cluster, job, dict(doc, state="open")))
        else:
            same = {k: v for k, v in before.items() if k not in ("revision", "state")}
            if same == {k: v for k, v in doc.items() if k not in ("revision", "state")} and (
                before["state"] == doc["state"]
            ):
                return []
            if before["state"] == "resolved":
                return []  # a resolved episode stays resolved
            doc["revision"] = int(before["revision"]) + 1
            if ongoing:
                out.append(StragglerTransition("updated", now, cluster, job, dict(doc)))
        if not ongoing:
            doc["revision"] = int(out[-1].doc["revision"]) + 1 if out else doc["revision"]
            out.append(StragglerTransition("resolved", now, cluster, job, dict(doc)))
        self.known[str(doc["key"])] = dict(doc)
        return out
