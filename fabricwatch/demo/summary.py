"""The demo's verdict: incidents the daemon reported against the injected ground truth.

Pure functions over ``fabricwatch.incident/v1`` documents (as the daemon's
``/api/v1/incidents`` returns them) and the :class:`Injected` record the
driver keeps, so they are tested without running anything.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fabricwatch.demo.receiver import Page
from fabricwatch.demo.scenarios import Scenario, Truth

SCHEMA = "fabricwatch.demo/v1"
MATCH_SLACK = 5.0
"""Seconds around a fault within which an incident's onset counts as caused by it."""


@dataclass(slots=True)
class Injected:
    """What the driver did in one scenario, in the daemon's wall-clock seconds.

    Attributes:
        scenario: the scenario.
        start / end: the scenario's span.
        fault_start / fault_end: when the fault was injected and cleared (None if healthy).
        gpu_seconds: GPU-seconds of work the fault took away (ground truth).
    """

    scenario: Scenario
    start: float
    end: float = 0.0
    fault_start: float | None = None
    fault_end: float | None = None
    gpu_seconds: float = 0.0


@dataclass(slots=True)
class Verdict:
    """One scenario's outcome."""

    injected: Injected
    incidents: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = False
    reason: str = ""
    latency: float | None = None
    open_delay: float | None = None
    pages: list[Page] = field(default_factory=list)


def unix(doc: Mapping[str, Any], key: str) -> float | None:
    """An ISO timestamp field of an incident document as Unix seconds."""
    text = doc.get(key)
    if not isinstance(text, str):
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _matches(truth: Truth, doc: Mapping[str, Any]) -> bool:
    culprit = doc.get("culprit", {}).get("key", "")
    return doc.get("cause") == truth.cause and culprit in truth.culprits


def judge(
    injected: Sequence[Injected],
    incidents: Sequence[Mapping[str, Any]],
    pages: Sequence[Page],
    *,
    alerting: bool,
) -> tuple[list[Verdict], list[dict[str, Any]]]:
    """Assign incidents to scenarios by onset; return verdicts and incidents nobody caused.

    A fault scenario is right when its first incident has the injected cause
    and one of the accepted culprits (and, with alerting wired, was paged);
    ``healthy`` is right when no incident began during it.
    """
    docs = sorted((dict(d) for d in incidents), key=lambda d: float(d.get("onset_unix", 0.0)))
    used: set[str] = set()
    verdicts: list[Verdict] = []
    for inj in injected:
        v = Verdict(inj)
        if inj.fault_start is None or inj.fault_end is None:
            lo, hi = inj.start, inj.end
        else:
            lo, hi = inj.fault_start - MATCH_SLACK, inj.fault_end + MATCH_SLACK
        for d in docs:
            if d["key"] not in used and lo <= float(d.get("onset_unix", 0.0)) <= hi:
                v.incidents.append(d)
                used.add(d["key"])
        keys = {d["key"] for d in v.incidents}
        v.pages = [p for p in pages if p.incident in keys]
        truth = inj.scenario.truth
        if truth is None:
            v.ok = not v.incidents
            v.reason = "no incident" if v.ok else f"{len(v.incidents)} unexpected incident(s)"
        elif not v.incidents:
            v.reason = "not detected"
        else:
            first = v.incidents[0]
            opened = unix(first, "opened_at")
            if opened is not None and inj.fault_start is not None:
                v.latency = max(0.0, opened - inj.fault_start)
                v.open_delay = max(0.0, opened - float(first.get("onset_unix", opened)))
            if not _matches(truth, first):
                got = f"{first.get('cause')} on {first.get('culprit', {}).get('key') or '-'}"
                v.reason = f"expected {truth.cause} on {' or '.join(truth.culprits)}, got {got}"
            elif alerting and not any(
                p.incident == first["key"] and p.transition == "opened" for p in v.pages
            ):
                v.reason = "detected, but no page arrived"
            else:
                v.ok = True
                v.reason = "matches the injected fault"
        verdicts.append(v)
    stray = [d for d in docs if d["key"] not in used]
    return verdicts, stray


def gpu_seconds_by_cause(incidents: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """GPU-seconds lost per cause, largest first."""
    out: dict[str, float] = {}
    for d in incidents:
        cause = str(d.get("cause", "unknown"))
        out[cause] = out.get(cause, 0.0) + float(d.get("gpu_seconds_lost", 0.0))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def report(
    verdicts: Sequence[Verdict],
    stray: Sequence[Mapping[str, Any]],
    incidents: Sequence[Mapping[str, Any]],
    pages: Sequence[Page],
    *,
    speed: float,
    tick: float,
    storage_backend: str,
    alerting: bool,
) -> dict[str, Any]:
    """The machine-readable summary (``--summary-json``)."""
    latencies = [v.latency for v in verdicts if v.latency is not None]
    delays = [v.open_delay for v in verdicts if v.open_delay is not None]
    scenarios = []
    for v in verdicts:
        truth = v.injected.scenario.truth
        scenarios.append(
            {
                "name": v.injected.scenario.name,
                "title": v.injected.scenario.title,
                "expected": None
                if truth is None
                else {"cause": truth.cause, "culprits": list(truth.culprits), "kind": truth.kind},
                "incidents": [
                    {
                        "key": d["key"],
                        "kind": d.get("kind"),
                        "cause": d.get("cause"),
                        "culprit": d.get("culprit", {}).get("key", ""),
                        "confidence": d.get("confidence"),
                        "state": d.get("state"),
                        "gpu_seconds_lost": d.get("gpu_seconds_lost"),
                        "summary": d.get("summary"),
                    }
                    for d in v.incidents
                ],
                "detection_latency_seconds": None if v.latency is None else round(v.latency, 3),
                "onset_to_open_seconds": None if v.open_delay is None else round(v.open_delay, 3),
                "injected_gpu_seconds": round(v.injected.gpu_seconds, 1),
                "pages": [
                    {"transition": p.transition, "incident": p.incident, "severity": p.severity}
                    for p in v.pages
                ],
                "ok": v.ok,
                "reason": v.reason,
            }
        )
    return {
        "schema": SCHEMA,
        "speed": speed,
        "storage_backend": storage_backend,
        "alerting": alerting,
        "scenarios": scenarios,
        "unexpected_incidents": [d["key"] for d in stray],
        "gpu_seconds_by_cause": {
            k: round(v, 1) for k, v in gpu_seconds_by_cause(incidents).items()
        },
        "detection_latency_seconds": {
            "median": round(statistics.median(latencies), 3) if latencies else None,
            "max": round(max(latencies), 3) if latencies else None,
            "median_ticks": round(statistics.median(latencies) / tick, 2) if latencies else None,
        },
        "onset_to_open_seconds": {
            "median": round(statistics.median(delays), 3) if delays else None,
            "median_ticks": round(statistics.median(delays) / tick, 2) if delays else None,
        },
        "pages_received": len(pages),
        "ok": all(v.ok for v in verdicts) and not stray,
    }
