"""Fleet grouping offline: the live aggregator's :class:`~fabricwatch.fleet.grouper.Grouper`
driven by node incident transitions in time order, with their own timestamps as the
clock (no broker, no sinks).

``fabricwatch replay`` over several nodes' telemetry runs each node's engine,
then :func:`group_offline` over all their transitions: the same grouping code
and the same settings as the live fleet, so the same job incidents, origins and
members come out ("which node stalled job X last Tuesday?").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.model import member_from_incident
from fabricwatch.fleet.settings import FleetSettings
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
