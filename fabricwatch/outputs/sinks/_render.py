"""Text shared by the sinks: evidence lines, runbook links, short summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fabricwatch.engine.incidents import gpu_list
from fabricwatch.outputs.outbox import Delivery


def culprit_of(incident: Mapping[str, Any]) -> str:
    """The culprit key (``switch:leaf1/swp12``), or ``none``."""
    culprit = incident.get("culprit") or {}
    key = culprit.get("key") if isinstance(culprit, Mapping) else None
    return str(key) if key else "none"


def gpus_of(incident: Mapping[str, Any]) -> str:
    """``0-7`` style GPU list, or ``-``."""
    gpus = incident.get("gpus") or []
    return gpu_list(str(g) for g in gpus) or "-"


def evidence_lines(incident: Mapping[str, Any], limit: int = 3) -> list[str]:
    """The top evidence texts, strongest first."""
    out: list[str] = []
    for e in incident.get("evidence") or []:
        if isinstance(e, Mapping) and e.get("text"):
            out.append(str(e["text"]))
        if len(out) >= limit:
            break
    return out


def runbook(template: str, incident: Mapping[str, Any]) -> str:
    """The runbook URL with ``{cause}`` filled in ("" when not configured)."""
    return template.replace("{cause}", str(incident.get("cause", "unknown"))) if template else ""


def latest_per_incident(batch: Sequence[Delivery]) -> list[Delivery]:
    """Keep the last transition of each incident (receivers keyed by incident need only that)."""
    last: dict[str, Delivery] = {}
    for d in batch:
        last.pop(d.dedup_key, None)
        last[d.dedup_key] = d
    return list(last.values())
