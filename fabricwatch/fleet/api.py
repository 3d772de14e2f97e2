"""The fleet aggregator's HTTP API and metrics: what one replica shows.

``/api/v1/incidents`` (cluster incidents), ``/api/v1/jobs`` (the job ledger and
job incidents), ``/api/v1/nodes`` (node MQTT status), ``/api/v1/replicas``
(live replicas and owned partitions), and the fleet's own metric families.
Reads the aggregator's state; changes nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from fabricwatch.outputs.web import Route as WebRoute
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.settings import parse_duration

if TYPE_CHECKING:
    from fabricwatch.fleet.service import FleetAggregator

OPEN = MetricSpec(
    "fabricwatch_fleet_incidents_open",
    MetricKind.GAUGE,
    "Open cluster incidents owned by this replica (sum over replicas).",
    ("cluster", "cause"),
)
NODES_AFFECTED = MetricSpec(
    "fabricwatch_fleet_nodes_affected",
    MetricKind.GAUGE,
    "Nodes in open cluster incidents owned by this replica, by the incident's cause.",
    ("cluster", "cause"),
)
GPUS_AFFECTED = MetricSpec(
    "fabricwatch_fleet_gpus_affected",
    MetricKind.GAUGE,
    "GPUs in open cluster incidents owned by this replica, by the incident's cause.",
    ("cluster", "cause"),
)
LOST = MetricSpec(
    "fabricwatch_fleet_open_gpu_seconds_lost",
    MetricKind.GAUGE,
    "GPU-seconds lost so far by open cluster incidents owned by this replica.",
    ("cluster", "cause"),
)
NODES = MetricSpec(
    "fabricwatch_fleet_nodes",
    MetricKind.GAUGE,
    "Nodes by MQTT status (online/offline); the same on every replica (use max).",
    ("cluster", "status"),
)
REPLICAS = MetricSpec(
    "fabricwatch_fleet_replicas",
    MetricKind.GAUGE,
    "Aggregator replicas this replica sees online (itself included).",
)
PARTITIONS = MetricSpec(
    "fabricwatch_fleet_partitions_owned",
    MetricKind.GAUGE,
    "Grouping-key partitions this replica owns.",
)
MESSAGES = MetricSpec(
    "fabricwatch_fleet_messages",
    MetricKind.COUNTER,
    "MQTT messages handled, by topic kind (incident, member, status, group, replica) "
    "and outcome (accepted, duplicate, invalid, not_owned, lost).",
    ("topic", "outcome"),
)
TRANSITIONS = MetricSpec(
    "fabricwatch_fleet_transitions",
    MetricKind.COUNTER,
    "Cluster incident transitions this replica recorded.",
    ("transition",),
)
FLEET_METRICS: tuple[MetricSpec, ...] = (
    OPEN,
    NODES_AFFECTED,
    GPUS_AFFECTED,
    LOST,
    NODES,
    REPLICAS,
    PARTITIONS,
    MESSAGES,
    TRANSITIONS,
)


class FleetAPI:
    """HTTP handlers and metric readings over one :class:`FleetAggregator`."""

    def __init__(self, agg: FleetAggregator) -> None:
        self.agg = agg

    def routes(self) -> list[WebRoute]:
        """The JSON routes beside ``/metrics``."""
        return [
            WebRoute("/api/v1/incidents", self.incidents, "cluster incidents (JSON)"),
            WebRoute("/api/v1/nodes", self.nodes, "node status (JSON)"),
            WebRoute("/api/v1/replicas", self.replicas, "replicas and partitions (JSON)"),
            WebRoute("/api/v1/jobs", self.jobs, "per-job ledger of lost GPU-hours (JSON)"),
        ]

    def readings(self) -> list[Reading]:
        """Cluster-level and self metrics."""
        out: list[Reading] = []
        open_: Counter[tuple[str, str]] = Counter()
        nodes: Counter[tuple[str, str]] = Counter()
        gpus: Counter[tuple[str, str]] = Counter()
        lost: dict[tuple[str, str], float] = {}
        for g in self.agg.grouper.groups.values():
            if g.state != "open" or not g.doc:
                continue
            k = (g.cluster, str(g.doc["cause"]))
            open_[k] += 1
            nodes[k] += int(g.doc["node_count"])
            gpus[k] += int(g.doc["gpu_count"])
            lost[k] = lost.get(k, 0.0) + float(g.doc["gpu_seconds_lost"])
        for spec, counter in ((OPEN, open_), (NODES_AFFECTED, nodes), (GPUS_AFFECTED, gpus)):
            out.extend(Reading(spec.name, k, float(v)) for k, v in sorted(counter.items()))
        out.extend(Reading(LOST.name, k, v) for k, v in sorted(lost.items()))
        status: Counter[tuple[str, str]] = Counter()
        for (cluster, _node), st in self.agg.grouper.nodes.items():
            status[(cluster, "online" if st.online else "offline")] += 1
        out.extend(Reading(NODES.name, k, float(v)) for k, v in sorted(status.items()))
        out.append(Reading(REPLICAS.name, (), float(len(self.agg.live_replicas()))))
        out.append(Reading(PARTITIONS.name, (), float(len(self.agg.grouper.owned))))
        out.extend(Reading(MESSAGES.name, k, float(v)) for k, v in sorted(self.agg.counts.items()))
        out.extend(
            Reading(TRANSITIONS.name, (k,), float(v))
            for k, v in sorted(self.agg.transition_counts.items())
        )
        return out

    async def incidents(self, request: web.Request) -> web.Response:
        """``GET /api/v1/incidents?state=open&since=1h&cluster=prod&limit=100``."""
        q = request.query
        try:
            since = self.agg.wall() - parse_duration(q["since"]) if "since" in q else None
            limit = max(1, min(int(q.get("limit", "1000")), 10_000))
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        state = q.get("state")
        if state not in (None, "open", "resolved"):
            return web.json_response({"error": "state must be open or resolved"}, status=400)
        docs = self.agg.db.incidents(
            since=since, state=state, cluster=q.get("cluster"), limit=limit
        )
        return web.json_response(
            {
                "schema": "fabricwatch.cluster-incidents/v1",
                "replica": self.agg.replica,
                "incidents": docs,
            }
        )

    async def jobs(self, request: web.Request) -> web.Response:
        """``GET /api/v1/jobs?cluster=prod&job=slurm:8812``: the job ledger; with ``job``,
        that job's job incidents too (origin, cause, waiting nodes)."""
        q = request.query
        job = q.get("job")
        entries = self.agg.ledger.entries(cluster=q.get("cluster"), job=job)
        body: dict[str, Any] = {
            "schema": "fabricwatch.job-ledgers/v1",
            "replica": self.agg.replica,
            "jobs": entries,
        }
        if job is not None:
            docs = self.agg.db.incidents(cluster=q.get("cluster"), limit=10_000)
            body["incidents"] = [
                d for d in docs if d.get("group", {}).get("kind") == "job" and d.get("job") == job
            ]
        return web.json_response(body)

    async def nodes(self, _request: web.Request) -> web.Response:
        nodes = [
            {"cluster": c, "node": n, "online": st.online, "since": st.since}
            for (c, n), st in sorted(self.agg.grouper.nodes.items())
        ]
        return web.json_response({"schema": "fabricwatch.fleet-nodes/v1", "nodes": nodes})

    async def replicas(self, _request: web.Request) -> web.Response:
        return web.json_response(self.status())

    def status(self) -> dict[str, Any]:
        """Replica view: who is live, what this one owns, its open groups."""
        return {
            "schema": "fabricwatch.fleet-replica/v1",
            "replica": self.agg.replica,
            "connected": self.agg.connected,
            "live": self.agg.live_replicas(),
            "partitions": sorted(self.agg.grouper.owned),
            "open": sorted(
                str(g.incident_key) for g in self.agg.grouper.groups.values() if g.state == "open"
            ),
        }
