"""Routing: which sinks hear about an incident transition.

A :class:`Router` is the engine's transition hook (``IncidentDB.add_transition_hook``):
inside the transaction that records a transition it decides, per sink, whether
the transition goes there and enqueues it. Filters (minimum severity, causes,
node globs) decide whether a sink hears about an incident at all; once a sink
was told an incident opened, it hears every later transition of it (so a page
is always resolved, even if the incident's severity dropped meanwhile).
"""

from __future__ import annotations

import fnmatch
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.outputs.outbox import build_event, enqueue, has_incident
from fabricwatch.outputs.settings import SEVERITIES, Severity


def severity_of(incident: Mapping[str, Any]) -> Severity:
    """The page severity of an incident document.

    A stall with an attributed cause idles GPUs for a known reason: critical.
    An unattributed stall still idles GPUs but nobody knows why yet: error.
    A slowdown costs throughput, not the job: warning.
    """
    if incident.get("kind") == "stall":
        return "error" if incident.get("cause") == "unknown" else "critical"
    return "warning"


@dataclass(frozen=True, slots=True)
class Route:
    """One sink's filters.

    Attributes:
        sink: the sink name.
        min_severity: lowest severity routed.
        causes: causes routed (empty: all).
        nodes: node glob patterns routed (empty: all).
        send_updates: also route ``updated`` transitions.
    """

    sink: str
    min_severity: Severity = "warning"
    causes: frozenset[str] = frozenset()
    nodes: tuple[str, ...] = ()
    send_updates: bool = True

    def accepts(self, incident: Mapping[str, Any], severity: Severity) -> bool:
        """Whether the filters let this incident through."""
        if SEVERITIES.index(severity) < SEVERITIES.index(self.min_severity):
            return False
        if self.causes and incident.get("cause") not in self.causes:
            return False
        node = str(incident.get("node", ""))
        return not self.nodes or any(fnmatch.fnmatchcase(node, p) for p in self.nodes)


class Router:
    """Routes incident transitions into the outbox (the engine's transition hook)."""

    def __init__(
        self,
        cluster: str,
        routes: Sequence[Route],
        *,
        on_enqueue: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.routes = list(routes)
        self._on_enqueue = on_enqueue
        self._clock = clock

    def set_listener(self, on_enqueue: Callable[[str], None] | None) -> None:
        """Called with the sink name after each enqueue (wakes the sender)."""
        self._on_enqueue = on_enqueue

    def __call__(self, conn: sqlite3.Connection, tr: IncidentTransition) -> None:
        """``IncidentDB`` hook: route one transition inside its transaction."""
        self.route(conn, tr.kind, tr.at, to_json(tr.incident))

    def route(
        self, conn: sqlite3.Connection, transition: str, at: float, incident: Mapping[str, Any]
    ) -> list[str]:
        """Enqueue ``transition`` of ``incident`` for every matching sink; returns them."""
        severity = severity_of(incident)
        event = build_event(
            transition=transition,
            at=at,
            incident=incident,
            cluster=self.cluster,
            severity=severity,
        )
        key = str(incident["key"])
        now = self._clock()
        routed: list[str] = []
        for r in self.routes:
            if has_incident(conn, r.sink, key):
                if transition == "updated" and not r.send_updates:
                    continue
            elif transition == "resolved" or not r.accepts(incident, severity):
                # A sink that never heard of the incident gets no resolve for it; an
                # update that first makes it match is its first news of it.
                continue
            if enqueue(conn, r.sink, event, now=now):
                routed.append(r.sink)
        if self._on_enqueue is not None:
            for sink in routed:
                self._on_enqueue(sink)
        return routed
