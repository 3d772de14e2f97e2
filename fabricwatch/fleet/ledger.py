"""Per-job ledger: GPU-seconds (and money) each job lost, by cause and culprit kind.

"This run lost 7.2 % of its GPU-hours: 4.1 % checkpoint writes, 2.3 % PFC
storms on leaf-7, 0.8 % unknown." The ledger reads cluster incident documents
(the fleet's, live or replayed) or node incident documents (one node's
database) and charges their GPU-seconds to jobs:

- a job incident charges its own members (the waiting nodes, and the origin
  when it is one of them) to the job incident's cause and its origin's culprit
  kind: the waiting is the origin's fault, not ``unknown``;
- a switch / storage / NVLink incident charges each member to that member's
  job, under the incident's cause and the group's kind (``switch``...);
- a node incident charges itself to its job, cause and culprit kind.

Each incident counts once, at its latest revision. The **badput** is what a
job lost over its GPU wall time, which the ledger learns from the nodes' job
reports (:mod:`fabricwatch.fleet.jobwork`: each node's GPUs of the job over
each window); without reports it is ``null``. Metrics stay low in
cardinality: per-job series only for jobs seen within ``job_expiry`` (the
fleet learns that a job ended only from its silence), fleet totals by cause
and culprit kind without a job label.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricwatch.fleet.jobwork import JobWork
from fabricwatch.readings import MetricKind, MetricSpec, Reading

LEDGER_SCHEMA = "fabricwatch.job-ledger/v1"
INFRA = frozenset({"switch", "storage", "nvlink"})
_KIND = {
    "switch_port": "switch",
    "switch": "switch",
    "nic_port": "nic",
    "storage_path": "storage",
    "storage": "storage",
    "nvlink": "nvlink",
    "gpu": "gpu",
    "node": "node",
}

JOB_LOST = MetricSpec(
    "fabricwatch_fleet_job_gpu_seconds_lost",
    MetricKind.GAUGE,
    "GPU-seconds a running job lost to incidents, by cause and culprit kind (series of a "
    "job expire job_expiry after its last incident; max over replicas).",
    ("cluster", "job", "cause", "culprit_kind"),
)
JOB_COST = MetricSpec(
    "fabricwatch_fleet_job_cost_lost",
    MetricKind.GAUGE,
    "Money a running job lost (GPU-seconds x fleet.cost_per_gpu_hour / 3600); only when "
    "cost_per_gpu_hour is set.",
    ("cluster", "job"),
)
LOST_TOTAL = MetricSpec(
    "fabricwatch_fleet_gpu_seconds_lost",
    MetricKind.COUNTER,
    "GPU-seconds lost to incidents across all jobs, by cause and culprit kind (max over replicas).",
    ("cluster", "cause", "culprit_kind"),
)
JOB_BADPUT = MetricSpec(
    "fabricwatch_fleet_job_badput_ratio",
    MetricKind.GAUGE,
    "Share of a running job's GPU wall time lost, by cause (GPU-seconds lost / the job's "
    "GPU-seconds from its nodes' job reports); only for jobs with reports; expires with "
    "the job's other series.",
    ("cluster", "job", "cause"),
)
JOBS_TRACKED = MetricSpec(
    "fabricwatch_fleet_jobs",
    MetricKind.GAUGE,
    "Jobs in the ledger (seen within job_expiry).",
    ("cluster",),
)
LEDGER_METRICS: tuple[MetricSpec, ...] = (JOB_LOST, JOB_COST, JOB_BADPUT, LOST_TOTAL, JOBS_TRACKED)


def culprit_kind(kind: str) -> str:
    """A culprit or group kind in the ledger's vocabulary (``none`` when unknown)."""
    return _KIND.get(kind, "none")


@dataclass(frozen=True, slots=True)
class Charge:
    """GPU-seconds one incident charges to one job."""

    job: str
    cause: str
    culprit_kind: str
    gpu_seconds: float


def charges(doc: Mapping[str, Any]) -> list[Charge]:
    """What one cluster or node incident document charges, per job."""
    group = doc.get("group")
    cause = str(doc.get("cause") or "unknown")
    if not isinstance(group, dict):  # a node incident
        job = str(doc.get("job") or "")
        culprit = doc.get("culprit") or {}
        kind = culprit_kind(str(culprit.get("kind") or "")) if cause != "unknown" else "none"
        return [Charge(job, cause, kind, _num(doc.get("gpu_seconds_lost")))] if job else []
    gkind = str(group.get("kind") or "")
    members = [m for m in doc.get("members") or [] if isinstance(m, dict)]
    if gkind == "job":
        origin = doc.get("origin")
        kind = "none"
        if isinstance(origin, dict):
            og = str(origin.get("group") or "")
            okind = og.split(":", 1)[0]
            kind = okind if okind in INFRA else culprit_kind(str(origin.get("culprit_kind") or ""))
        secs = _num(doc.get("gpu_seconds_lost"))
        job = str(doc.get("job") or group.get("name") or "")
        return [Charge(job, cause, kind, secs)] if job else []
    out: dict[str, float] = {}
    for m in members:
        job = str(m.get("job") or "")
        if job:
            out[job] = out.get(job, 0.0) + _num(m.get("gpu_seconds_lost"))
    kind = gkind if gkind in INFRA else "none"
    return [Charge(j, cause, kind, s) for j, s in sorted(out.items())]


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:  # noqa: PLR0124 - NaN
        return 0.0
    return float(v)


@dataclass(slots=True)
class JobEntry:
    """One job's ledger."""

    cluster: str
    job: str
    first_onset: float
    last_seen: float
    lost: dict[tuple[str, str], float] = field(default_factory=dict)
    incidents: dict[str, list[Charge]] = field(default_factory=dict)
    open: set[str] = field(default_factory=set)

    @property
    def total(self) -> float:
        """GPU-seconds lost in all."""
        return sum(self.lost.values())

    def to_json(
        self, cost_per_gpu_hour: float = 0.0, job_gpu_seconds: float | None = None
    ) -> dict[str, Any]:
        """The ``fabricwatch.job-ledger/v1`` entry of this job."""
        total = self.total
        wall = job_gpu_seconds if job_gpu_seconds else None
        by = [
            {
                "cause": c,
                "culprit_kind": k,
                "gpu_seconds_lost": round(s, 3),
                "share": round(s / total, 4) if total > 0 else 0.0,
                "badput": round(s / wall, 5) if wall else None,
                "cost_lost": round(s * cost_per_gpu_hour / 3600.0, 4)
                if cost_per_gpu_hour > 0
                else None,
            }
            for (c, k), s in sorted(self.lost.items(), key=lambda x: (-x[1], x[0]))
        ]
        return {
            "schema": LEDGER_SCHEMA,
            "cluster": self.cluster,
            "job": self.job,
            "first_onset_unix": round(self.first_onset, 3),
            "last_seen_unix": round(self.last_seen, 3),
            "incidents": len(self.incidents),
            "open_incidents": len(self.open),
            "gpu_seconds_lost": round(total, 3),
            "gpu_hours_lost": round(total / 3600.0, 4),
            "cost_lost": round(total * cost_per_gpu_hour / 3600.0, 4)
            if cost_per_gpu_hour > 0
            else None,
            "job_gpu_seconds": round(wall, 3) if wall else None,
            "badput": round(total / wall, 5) if wall else None,
            "by_cause": by,
        }


class Ledger:
    """Jobs and what they lost, fed with incident documents as they change."""

    def __init__(self, *, job_expiry: float = 3600.0, cost_per_gpu_hour: float = 0.0) -> None:
        self.job_expiry = job_expiry
        self.cost_per_gpu_hour = cost_per_gpu_hour
        self.jobs: dict[tuple[str, str], JobEntry] = {}
        self._revisions: dict[str, int] = {}
        self._charged: dict[str, dict[tuple[str, str, str], float]] = {}
        self.totals: dict[tuple[str, str, str], float] = {}
        self._jobs_of: dict[str, set[tuple[str, str]]] = {}
        self.job_time: dict[tuple[str, str], float] = {}
        self._time_seen: dict[tuple[str, str], float] = {}
        self._reported: dict[tuple[str, str], float] = {}

    def observe(self, cluster: str, report: JobWork, now: float) -> bool:
        """Add a node's job report to its jobs' GPU wall time; False for a report
        this node already gave (a window at or before its latest)."""
        nk = (cluster, report.node)
        if self._reported.get(nk, -math.inf) >= report.start:
            return False
        self._reported[nk] = report.start
        for job, secs in report.gpu_seconds().items():
            jk = (cluster, job)
            self.job_time[jk] = self.job_time.get(jk, 0.0) + secs
            self._time_seen[jk] = now
        return True

    def apply(self, doc: Mapping[str, Any], now: float) -> bool:
        """Take an incident document's latest revision; False when stale."""
        key = str(doc.get("key") or "")
        if not key:
            return False
        rev = int(_num(doc.get("revision")))
        if self._revisions.get(key, -1) >= rev:
            return False
        ended = _num(doc.get("resolved_unix"))
        if doc.get("state") == "resolved" and ended and now - ended >= self.job_expiry:
            return False  # a retained announcement of a long-finished episode, replayed
        self._revisions[key] = rev
        cluster = str(doc.get("cluster") or "")
        onset = _num(doc.get("onset_unix"))
        is_open = doc.get("state") == "open"
        new = charges(doc)
        # Counters never go back: an incident's charge grows as it lasts.
        charged = self._charged.setdefault(key, {})
        for c in new:
            ck = (cluster, c.cause, c.culprit_kind)
            delta = c.gpu_seconds - charged.get(ck, 0.0)
            if delta > 0:
                self.totals[ck] = self.totals.get(ck, 0.0) + delta
                charged[ck] = c.gpu_seconds
        jobs_now = {(cluster, c.job) for c in new}
        for jk in self._jobs_of.get(key, set()) - jobs_now:
            moved = self.jobs.get(jk)
            if moved is not None:
                self._drop(moved, key)
                if not moved.incidents:
                    del self.jobs[jk]
        self._jobs_of[key] = jobs_now
        for job in sorted({c.job for c in new}):
            entry = self.jobs.get((cluster, job))
            if entry is None:
                entry = JobEntry(cluster, job, onset, now)
                self.jobs[(cluster, job)] = entry
            self._drop(entry, key)
            mine = [c for c in new if c.job == job]
            entry.incidents[key] = mine
            for c in mine:
                k = (c.cause, c.culprit_kind)
                entry.lost[k] = entry.lost.get(k, 0.0) + c.gpu_seconds
            entry.first_onset = min(entry.first_onset, onset)
            entry.last_seen = max(entry.last_seen, now)
            if is_open:
                entry.open.add(key)
        return True

    def _drop(self, entry: JobEntry, key: str) -> None:
        for c in entry.incidents.pop(key, []):
            k = (c.cause, c.culprit_kind)
            left = entry.lost.get(k, 0.0) - c.gpu_seconds
            if left > 1e-9:
                entry.lost[k] = left
            else:
                entry.lost.pop(k, None)
        entry.open.discard(key)

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Forget jobs with no open incident and none seen for ``job_expiry``."""
        gone = [
            k for k, e in self.jobs.items() if not e.open and now - e.last_seen >= self.job_expiry
        ]
        for k in gone:
            for key in self.jobs.pop(k).incidents:
                # Other jobs may share a switch incident; keep its revision while they do.
                left = self._jobs_of.get(key, set()) - {k}
                if left & self.jobs.keys():
                    self._jobs_of[key] = left
                else:
                    self._jobs_of.pop(key, None)
                    self._revisions.pop(key, None)
                    self._charged.pop(key, None)
        # Job time of jobs without incidents waits for one as long as a job's series live.
        for jk in [
            jk
            for jk, seen in self._time_seen.items()
            if jk not in self.jobs and now - seen >= self.job_expiry
        ]:
            self.job_time.pop(jk, None)
            self._time_seen.pop(jk, None)
        for nk in [nk for nk, start in self._reported.items() if now - start >= self.job_expiry]:
            del self._reported[nk]
        return gone

    def readings(self) -> list[Reading]:
        """The ledger's metrics (see :data:`LEDGER_METRICS`)."""
        out: list[Reading] = []
        per_cluster: Counter[str] = Counter()
        for (cluster, job), e in sorted(self.jobs.items()):
            per_cluster[cluster] += 1
            for (cause, kind), s in sorted(e.lost.items()):
                out.append(Reading(JOB_LOST.name, (cluster, job, cause, kind), s))
            if self.cost_per_gpu_hour > 0:
                cost = e.total * self.cost_per_gpu_hour / 3600.0
                out.append(Reading(JOB_COST.name, (cluster, job), cost))
            wall = self.job_time.get((cluster, job), 0.0)
            if wall > 0:
                by_cause: dict[str, float] = {}
                for (cause, _kind), s in e.lost.items():
                    by_cause[cause] = by_cause.get(cause, 0.0) + s
                out.extend(
                    Reading(JOB_BADPUT.name, (cluster, job, cause), s / wall)
                    for cause, s in sorted(by_cause.items())
                )
        out.extend(Reading(LOST_TOTAL.name, k, v) for k, v in sorted(self.totals.items()))
        out.extend(
            Reading(JOBS_TRACKED.name, (c,), float(n)) for c, n in sorted(per_cluster.items())
        )
        return out

    def entries(
        self, *, cluster: str | None = None, job: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger entries as JSON, most GPU-seconds lost first."""
        sel = [
            e
            for e in self.jobs.values()
            if (cluster is None or e.cluster == cluster) and (job is None or e.job == job)
        ]
        sel.sort(key=lambda e: (-e.total, e.cluster, e.job))
        return [
            e.to_json(self.cost_per_gpu_hour, self.job_time.get((e.cluster, e.job))) for e in sel
        ]


def ledger_of(
    docs: Iterable[Mapping[str, Any]],
    *,
    cost_per_gpu_hour: float = 0.0,
    reports: Iterable[tuple[str, JobWork]] = (),
) -> Ledger:
    """A ledger over documents at rest (a database, a replay), nothing expired;
    ``reports`` are (cluster, job report) pairs that give the badput."""
    led = Ledger(job_expiry=float("inf"), cost_per_gpu_hour=cost_per_gpu_hour)
    for cluster, r in sorted(reports, key=lambda x: (x[0], x[1].node, x[1].start)):
        led.observe(cluster, r, r.end)
    for d in sorted(docs, key=lambda d: (_num(d.get("onset_unix")), str(d.get("key")))):
        led.apply(d, _num(d.get("updated_unix")) or _num(d.get("onset_unix")))
    return led


def ledger_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """``incidents --by job`` text: one line per job, then its causes."""
    if not entries:
        return ["no jobs with incidents"]
    lines: list[str] = []
    for e in entries:
        head = f"{e['job']}  {e['gpu_hours_lost']:.2f} GPU-hours lost in {e['incidents']} incidents"
        if e.get("cost_lost") is not None:
            head += f" ({e['cost_lost']:,.2f} cost)"
        if e.get("badput") is not None:
            head += f"; badput {e['badput']:.1%}"
        lines.append(head)
        for b in e["by_cause"]:
            lines.append(
                f"    {b['share']:6.1%}  {b['cause']} ({b['culprit_kind']})  "
                f"{b['gpu_seconds_lost']:,.0f} GPU-seconds"
            )
    return lines
