"""Drive the real fleet aggregator with a multi-node scenario over real MQTT, and score it.

The node engines run first, offline (:func:`fabricwatch.testing.sim_fleet.all_transitions`):
cheap, and the same engine code as live. Their incident transitions are then
published on each node's own topic in time order, paced by a :class:`SimClock`
that runs scenario time ``speed`` times faster than real time; the aggregator
under test is given the same clock (``FleetAggregator(wall=clock.now)``), so its
``settle``, ``job_link_wait`` and resolve holds mean scenario seconds and the
page latency is measured in scenario seconds.

:func:`score` compares what the aggregator paged and recorded with the ground
truth of each fault.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiomqtt

from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.fleet.jobwork import JobWork
from fabricwatch.fleet.model import FleetTopics
from fabricwatch.outputs.mqtt import Topics
from fabricwatch.outputs.outbox import build_event
from fabricwatch.outputs.sinks import severity_of
from fabricwatch.testing.sim_fleet import FaultTruth, window


class SimClock:
    """Scenario time running ``speed`` times faster than the monotonic clock."""

    def __init__(
        self, sim0: float, speed: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.sim0 = sim0
        self.speed = speed
        self._mono = monotonic
        self.m0 = monotonic()

    def now(self) -> float:
        """Scenario time now."""
        return self.sim0 + (self._mono() - self.m0) * self.speed

    def at_monotonic(self, mono: float) -> float:
        """Scenario time of a monotonic timestamp."""
        return self.sim0 + (mono - self.m0) * self.speed

    async def sleep_until(self, t: float) -> None:
        """Sleep until scenario time ``t``."""
        delay = (t - self.now()) / self.speed
        if delay > 0:
            await asyncio.sleep(delay)


async def publish_in_time(
    events: Sequence[tuple[str, IncidentTransition]],
    clock: SimClock,
    *,
    port: int,
    cluster: str,
    prefix: str = "fabricwatch/v1",
    host: str = "127.0.0.1",
    reports: Sequence[JobWork] = (),
) -> int:
    """Publish each node transition on ``<prefix>/<cluster>/<node>/incidents`` (QoS 1)
    at its scenario time, as the node's MQTT sink would, and each job report on
    ``.../<node>/jobwork`` at its window's end; returns how many incidents."""
    timeline: list[tuple[float, int, str, IncidentTransition | JobWork]] = [
        (tr.at, 1, node, tr) for node, tr in events
    ]
    timeline += [(r.end, 0, r.node, r) for r in reports]
    timeline.sort(key=lambda x: (x[0], x[1], x[2]))
    async with aiomqtt.Client(host, port, identifier=f"fw-sim-{time.monotonic_ns()}") as c:
        for at, _, node, item in timeline:
            await clock.sleep_until(at)
            if isinstance(item, JobWork):
                topic = FleetTopics(prefix, "").node_jobwork(cluster, node)
                await c.publish(topic, item.body(), qos=1)
                continue
            tr = item
            doc = to_json(tr.incident)
            ev = build_event(
                transition=tr.kind,
                at=tr.at,
                incident=doc,
                cluster=cluster,
                severity=severity_of(doc),
            )
            topic = Topics.for_node(prefix, cluster, node).incidents
            await c.publish(topic, json.dumps(ev, separators=(",", ":")).encode(), qos=1)
    return len(events)


@dataclass(frozen=True, slots=True)
class Page:
    """A page a sink received: the cluster incident and when (scenario time)."""

    at: float
    transition: str
    doc: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class FaultScore:
    """How the fleet did on one fault.

    Attributes:
        truth: the fault's ground truth.
        pages: pages (``opened`` at a sink) in its episode.
        page_group: grouping-key kind of the first page ("" when none).
        job_incidents: job incidents recorded per stalled job (want 1 each).
        origin_right: every job incident names an allowed origin (or none for
            ``unknown``) and the right cause.
        victims_named: job incidents naming a node that is not an allowed origin.
        latency: scenario seconds from the first stall to the first page.
    """

    truth: FaultTruth
    pages: int
    page_group: str
    job_incidents: dict[str, int]
    origin_right: bool
    victims_named: int
    latency: float | None


def score(
    truths: Sequence[FaultTruth], pages: Sequence[Page], recorded: Sequence[Mapping[str, Any]]
) -> list[FaultScore]:
    """Score each fault: ``pages`` the sinks got, ``recorded`` every cluster
    incident document the fleet recorded (latest revision of each, paged or not)."""
    out: list[FaultScore] = []
    for t in truths:
        opened = [
            p for p in pages if p.transition == "opened" and window(t, float(p.doc["onset_unix"]))
        ]
        opened.sort(key=lambda p: p.at)
        jobs_docs = [
            d
            for d in recorded
            if d.get("group", {}).get("kind") == "job" and window(t, float(d["onset_unix"]))
        ]
        per_job: dict[str, int] = dict.fromkeys(t.jobs, 0)
        right = True
        victims = 0
        for d in jobs_docs:
            job = str(d.get("job"))
            per_job[job] = per_job.get(job, 0) + 1
            origin = d.get("origin")
            if t.origins:
                if not isinstance(origin, dict) or d.get("cause") != t.cause:
                    right = False
                elif origin.get("node") not in t.origins:
                    right = False
                    victims += 1
            elif origin is not None or d.get("cause") != "unknown" or not d.get("first_stalled"):
                right = False
                victims += origin is not None
        if not jobs_docs:
            right = False
        first = opened[0] if opened else None
        out.append(
            FaultScore(
                truth=t,
                pages=len(opened),
                page_group=str(first.doc["group"]["kind"]) if first else "",
                job_incidents=per_job,
                origin_right=right,
                victims_named=victims,
                latency=None if first is None else first.at - t.onset,
            )
        )
    return out


def summary(scores: Sequence[FaultScore]) -> dict[str, Any]:
    """Ratios over all faults (for the bench and the test's failure message)."""
    n = max(1, len(scores))
    lat = [s.latency for s in scores if s.latency is not None]
    one_job = sum(all(v == 1 for v in s.job_incidents.values()) for s in scores)
    return {
        "faults": len(scores),
        "origin_right": sum(s.origin_right for s in scores) / n,
        "one_page": sum(s.pages == 1 for s in scores) / n,
        "one_job_incident_per_job": one_job / n,
        "pages_per_fault": sum(s.pages for s in scores) / n,
        "victims_named": sum(s.victims_named for s in scores),
        "page_group_right": sum(s.page_group == s.truth.page_group for s in scores) / n,
        "latency_median_s": statistics.median(lat) if lat else None,
        "latency_max_s": max(lat) if lat else None,
    }
