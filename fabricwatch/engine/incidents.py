"""Incidents: values, transitions and the ``fabricwatch.incident/v1`` JSON.

An incident has a stable key derived when it opens (node, cause, culprit,
onset), a lifecycle ``open -> updated -> resolved`` and carries the GPUs and
job affected, GPU-seconds lost and the ranked evidence. The schema is
documented in ``docs/incident-schema.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from fabricwatch.engine.causes import Cause, cause_text
from fabricwatch.engine.evidence import Culprit, Evidence

SCHEMA = "fabricwatch.incident/v1"
TransitionKind = Literal["opened", "updated", "resolved"]


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident as of its latest revision. Times are wall-clock seconds."""

    key: str
    node: str
    kind: Literal["stall", "slowdown"]
    state: Literal["open", "resolved"]
    cause: str
    confidence: float
    culprit: Culprit
    summary: str
    onset: float
    opened_at: float
    updated_at: float
    ended_at: float | None
    resolved_at: float | None
    gpus: tuple[str, ...]
    job: str
    gpu_seconds: float
    cost: float | None
    episodes: int
    evidence: tuple[Evidence, ...]
    missing: tuple[str, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class IncidentTransition:
    """An incident opened, updated or resolved at wall time ``at``."""

    kind: TransitionKind
    at: float
    incident: Incident


def incident_key(node: str, cause: str, culprit: str, onset: float) -> str:
    """Stable 16-hex-digit key of (node, cause, culprit, onset to the millisecond)."""
    raw = f"{node}|{cause}|{culprit}|{round(onset * 1000)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def gpu_list(gpus: Iterable[str]) -> str:
    """``["0","1","2","5"]`` -> ``"0-2,5"`` (non-numeric names listed as they are)."""
    nums: list[int] = []
    names: list[str] = []
    for g in gpus:
        if g.isdigit():
            nums.append(int(g))
        else:
            names.append(g)
    nums.sort()
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts + sorted(names))


def summarize(
    *,
    kind: str,
    gpus: Iterable[str],
    seconds: float,
    cause: str,
    confidence: float,
    evidence: tuple[Evidence, ...],
    missing: Iterable[str] = (),
) -> str:
    """One sentence: what stalled, for how long, why, how sure.

    An ``unknown`` verdict names the evidence groups this node does not
    report (``missing``: "no host PFC counters on this node"), which is
    often why nothing explains the stall.
    """
    g = list(gpus)
    what = "GPU" if len(g) == 1 else "GPUs"
    state = "idle" if kind == "stall" else "slowed down"
    text = f"{what} {gpu_list(g)} {state} for {seconds:.0f} s; cause: {cause_text(cause)}"
    top = next((e for e in evidence if e.cause == cause), None)
    if cause != Cause.UNKNOWN and top is not None:
        text += f" ({top.text})"
    elif evidence:
        text += f" (strongest signal, too weak to attribute: {evidence[0].text})"
    if cause == Cause.UNKNOWN:
        absent = [_GROUP_TEXT.get(m, m) for m in missing]
        if absent:
            text += f"; no {', no '.join(absent)} on this node"
    return text + f"; confidence {confidence:.2f}"


# Evidence groups (signals.FAMILY_GROUPS) in words, for "no ... on this node".
_GROUP_TEXT = {
    "switch_pfc": "switch PFC counters",
    "nic_pfc": "host PFC counters",
    "congestion": "ECN/CNP counters",
    "link": "link state",
    "nvlink": "NVLink counters",
    "xid": "XID events",
    "storage": "storage counters",
}


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_json(inc: Incident) -> dict[str, Any]:
    """The ``fabricwatch.incident/v1`` document of an incident."""
    end = inc.ended_at if inc.ended_at is not None else inc.updated_at
    return {
        "schema": SCHEMA,
        "key": inc.key,
        "node": inc.node,
        "kind": inc.kind,
        "state": inc.state,
        "cause": inc.cause,
        "confidence": inc.confidence,
        "culprit": {
            "key": inc.culprit.key,
            "kind": inc.culprit.kind,
            "labels": dict(inc.culprit.labels),
        },
        "summary": inc.summary,
        "onset": _iso(inc.onset),
        "onset_unix": round(inc.onset, 3),
        "opened_at": _iso(inc.opened_at),
        "updated_at": _iso(inc.updated_at),
        "ended_at": _iso(inc.ended_at),
        "resolved_at": _iso(inc.resolved_at),
        "duration_seconds": round(max(0.0, end - inc.onset), 3),
        "gpus": list(inc.gpus),
        "job": inc.job or None,
        "gpu_seconds_lost": round(inc.gpu_seconds, 3),
        "cost_lost": None if inc.cost is None else round(inc.cost, 4),
        "episodes": inc.episodes,
        "evidence": [
            {
                "cause": e.cause,
                "family": e.family,
                "culprit": e.culprit.key,
                "labels": dict(e.culprit.labels),
                "score": round(e.score, 3),
                "value": e.value,
                "baseline": e.baseline,
                "text": e.text,
            }
            for e in inc.evidence
        ],
        "missing_families": list(inc.missing),
        "revision": inc.revision,
    }


def transition_json(tr: IncidentTransition) -> dict[str, Any]:
    """A transition as JSON: its kind and time plus the incident document."""
    return {"transition": tr.kind, "at": _iso(tr.at), "incident": to_json(tr.incident)}


def _unix(text: str | None) -> float | None:
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def from_json(doc: dict[str, Any]) -> Incident:
    """Rebuild an :class:`Incident` from its v1 document (times to the millisecond)."""
    if doc.get("schema") != SCHEMA:
        msg = f"not a {SCHEMA} document (schema={doc.get('schema')!r})"
        raise ValueError(msg)
    c = doc["culprit"]
    evidence = tuple(
        Evidence(
            e["cause"],
            e["family"],
            Culprit(
                e["culprit"],
                c["kind"] if e["culprit"] == c["key"] else "",
                tuple(e["labels"].items()),
            ),
            float(e["score"]),
            float(e["value"]),
            float(e["baseline"]),
            e["text"],
        )
        for e in doc["evidence"]
    )
    return Incident(
        key=doc["key"],
        node=doc["node"],
        kind=doc["kind"],
        state=doc["state"],
        cause=doc["cause"],
        confidence=float(doc["confidence"]),
        culprit=Culprit(c["key"], c["kind"], tuple(c["labels"].items())),
        summary=doc["summary"],
        onset=float(doc["onset_unix"]),
        opened_at=_unix(doc["opened_at"]) or 0.0,
        updated_at=_unix(doc["updated_at"]) or 0.0,
        ended_at=_unix(doc["ended_at"]),
        resolved_at=_unix(doc["resolved_at"]),
        gpus=tuple(doc["gpus"]),
        job=doc["job"] or "",
        gpu_seconds=float(doc["gpu_seconds_lost"]),
        cost=doc["cost_lost"],
        episodes=int(doc["episodes"]),
        evidence=evidence,
        missing=tuple(doc["missing_families"]),
        revision=int(doc["revision"]),
    )
