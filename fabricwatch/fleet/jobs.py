"""Job incidents: which node of a job stalled it, and who waited.

A hung collective stalls every rank of a job. One node sees the cause (its
NIC port is paused, its GPU logged an XID, its NVLink collapsed); the others
correctly report ``unknown`` ("no local evidence"). :func:`rank` takes every
node incident of one job that overlaps in time (its own job group's members
and the job's members of shared-culprit groups: switch, storage, NVLink) and
names the **origin**: among the candidates with evidence, the strongest tier
(confidence within :data:`TIER` of the best), and in it the first node to
stall. Everyone else of the job waited on it. With no evidence anywhere the
verdict says so and lists the nodes that stalled first.

Pure functions over values: the live grouper and fleet replay share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricwatch.engine.causes import cause_text
from fabricwatch.fleet.model import Member

TIER = 0.15
"""Confidences this close to the best count as equally strong evidence; onset
decides between them (a victim's weaker evidence, e.g. received pauses at a
fraction of the origin's, falls below the tier and never names it origin)."""
FIRST_SHOWN = 3
"""Nodes listed as "stalled first" when no node has evidence."""
INFRA_KINDS = frozenset({"switch", "storage", "nvlink"})
"""Grouping keys of shared culprits; a job group links to these."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node incident that may be a job's origin.

    Attributes:
        node: the node's name.
        incident: the node incident key.
        cause: the node incident's cause (``unknown``: no local evidence).
        confidence: its confidence.
        onset: its onset (unix seconds).
        culprit: its culprit key.
        culprit_kind: its culprit kind.
        evidence: the strongest evidence text for its cause ("" when none).
        group: the grouping key it is in (``job:slurm:1``, ``switch:leaf-7``).
        group_incident: that group's cluster incident key ("" while pending).
        gpus: GPUs of the node incident.
    """

    node: str
    incident: str
    cause: str
    confidence: float
    onset: float
    culprit: str
    culprit_kind: str
    evidence: str
    group: str
    group_incident: str
    gpus: int

    @property
    def has_evidence(self) -> bool:
        """A cause other than ``unknown``."""
        return self.cause != "unknown" and self.confidence > 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The job-level root cause of one episode.

    Attributes:
        origin: the likely origin, None when no member has evidence.
        also: other nodes in the origin's tier (a shared fault on several nodes).
        first: the first-stalled candidates (by onset), for the no-evidence case.
    """

    origin: Candidate | None
    also: tuple[Candidate, ...]
    first: tuple[Candidate, ...]

    @property
    def culprit_nodes(self) -> frozenset[str]:
        """Nodes with evidence in the origin's tier."""
        if self.origin is None:
            return frozenset()
        return frozenset({self.origin.node, *(c.node for c in self.also)})


def candidate(m: Member, group: str, group_incident: str = "") -> Candidate:
    """A :class:`Candidate` from a member the grouper tracks."""
    text = next((e.text for e in m.evidence if e.cause == m.cause and e.text), "")
    return Candidate(
        node=m.node_name,
        incident=m.key,
        cause=m.cause,
        confidence=m.confidence,
        onset=m.onset,
        culprit=m.culprit_key,
        culprit_kind=m.culprit_kind,
        evidence=text,
        group=group,
        group_incident=group_incident,
        gpus=len(m.gpus),
    )


def candidate_from_doc(entry: Mapping[str, Any], group: str, group_incident: str) -> Candidate:
    """A :class:`Candidate` from a member entry of an announced cluster incident."""
    return Candidate(
        node=str(entry.get("node_name") or entry.get("node") or ""),
        incident=str(entry.get("incident") or ""),
        cause=str(entry.get("cause") or "unknown"),
        confidence=_float(entry.get("confidence")),
        onset=_float(entry.get("onset_unix")),
        culprit=str(entry.get("culprit") or ""),
        culprit_kind=str(entry.get("culprit_kind") or ""),
        evidence=str(entry.get("evidence") or "")[:500],
        group=group,
        group_incident=group_incident,
        gpus=len(entry.get("gpus") or ()),
    )


def _float(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def rank(candidates: Iterable[Candidate]) -> Verdict:
    """The origin: strongest tier of evidence first, then the earliest onset."""
    cands = list(candidates)
    evidenced = [c for c in cands if c.has_evidence]
    first = tuple(sorted(cands, key=lambda c: (c.onset, c.node))[:FIRST_SHOWN])
    if not evidenced:
        return Verdict(None, (), first)
    best = max(c.confidence for c in evidenced)
    top = [c for c in evidenced if c.confidence >= best - TIER]
    top.sort(key=lambda c: (c.onset, -c.confidence, c.node, c.incident))
    origin = top[0]
    also: list[Candidate] = []
    seen = {origin.node}
    for c in top[1:]:
        if c.node not in seen:
            seen.add(c.node)
            also.append(c)
    return Verdict(origin, tuple(also), first)


def origin_json(c: Candidate | None) -> dict[str, Any] | None:
    """The ``origin`` field of a cluster incident document."""
    if c is None:
        return None
    return {
        "node": c.node,
        "incident": c.incident,
        "cause": c.cause,
        "confidence": round(c.confidence, 3),
        "culprit": c.culprit,
        "culprit_kind": c.culprit_kind,
        "evidence": c.evidence,
        "onset_unix": round(c.onset, 3),
        "group": c.group,
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def origin_text(c: Candidate) -> str:
    """``gpu-017, PFC pause storm on NIC mlx5_3 ...`` (the evidence, else the cause)."""
    return f"{c.node}, {c.evidence or cause_text(c.cause)}"


def job_summary(
    *,
    job: str,
    nodes: int,
    seconds: float,
    kind: str,
    verdict: Verdict,
    waiting: int,
    paged_as: str = "",
) -> str:
    """One sentence for on-call: what stalled, which node started it, who waited."""
    verb = "stalled" if kind == "stall" else "slowed down"
    head = f"GPUs on {_plural(nodes, 'node')} of job {job} {verb} {seconds:.0f} s"
    o = verdict.origin
    if o is None:
        t0 = verdict.first[0].onset if verdict.first else 0.0
        firsts = ", ".join(f"{c.node} (+{c.onset - t0:.0f} s)" for c in verdict.first)
        return f"{head}; no node has local evidence (cause unknown); stalled first: {firsts}"
    text = f"{head}; origin: {origin_text(o)}"
    if verdict.also:
        text += f"; also {', '.join(c.node for c in verdict.also[:FIRST_SHOWN])}"
        more = len(verdict.also) - FIRST_SHOWN
        if more > 0:
            text += f" (+{more})"
    if waiting:
        text += f"; {_plural(waiting, 'node')} waited on it"
    if paged_as:
        text += f"; paged as {paged_as}"
    return text


def jobs_text(waiting_by_job: Mapping[str, int], jobs: Sequence[str]) -> str:
    """``jobs: slurm:1 (15 nodes waited), slurm:2`` for a shared-culprit page."""
    parts = []
    for j in jobs:
        w = waiting_by_job.get(j, 0)
        parts.append(f"{j} ({_plural(w, 'node')} waited)" if w else j)
    return "jobs: " + ", ".join(parts)
