"""``[fleet]``: the fleet aggregator role (``fabricwatch fleet``).

The aggregator reads the broker connection from ``[mqtt]``, its sinks from
``[alerting]`` and the web-config file from ``[web]``; this table holds what
only the aggregator needs. Example::

    [fleet]
    replica_id = "fleet-a"          # stable per replica (its SQLite file and MQTT id)
    listen = "0.0.0.0:9478"
    settle = "3s"                   # collect a storm's first reports before paging

    [[fleet.cliques]]               # NVLink domains (incidents do not carry the clique)
    name = "nvl72-rack3"
    nodes = ["gpu-r3-*"]
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fabricwatch.settings import option

GroupBy = Literal["switch", "storage", "nvlink", "job"]
DEFAULT_GROUP_BY: list[GroupBy] = ["switch", "storage", "nvlink", "job"]
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(kw_only=True)
class CliqueSettings:
    """One ``[[fleet.cliques]]`` entry: the nodes of one NVLink domain."""

    name: str = option("", "Clique name (e.g. nvidia.com/gpu.clique: <ClusterUUID>.<CliqueId>).")
    nodes: list[str] = option([], "Node name glob patterns in this clique.")

    def validate(self) -> None:
        """A clique needs a name and at least one node pattern."""
        if not self.name or not self.nodes:
            msg = "a clique needs a name and nodes"
            raise ValueError(msg)


@dataclass(kw_only=True)
class FleetSettings:
    """``[fleet]``: grouping, partitioning and outputs of the fleet aggregator."""

    replica_id: str = option(
        "", "This replica's id ([a-z0-9_-]; empty = the host name). Stable across restarts."
    )
    name: str = option(
        "fleet",
        "Aggregator fleet name: the MQTT shared-subscription group; replicas with the same "
        "name share the work.",
    )
    clusters: list[str] = option([], "Clusters to aggregate (empty: every cluster).")
    listen: str = option("0.0.0.0:9478", "host:port of /metrics and /api/v1/incidents.")
    state_dir: str = option(
        "", "Directory of this replica's fleet.sqlite3 (empty: <daemon.state_dir>/fleet)."
    )
    partitions: int = option(
        64, "Partitions of the grouping-key space (same on every replica).", min=1, max=4096
    )
    group_by: list[GroupBy] = option(
        list(DEFAULT_GROUP_BY),
        "Shared culprits tried in order: switch, storage (target/NFS server), nvlink "
        "(clique), job. An incident matching none is grouped per node.",
    )
    cliques: list[CliqueSettings] = option([], "NVLink cliques ([[fleet.cliques]] tables).")
    settle: float = option(
        3.0,
        "Wait this long after a group's first node incident before paging, so the page "
        "already counts the nodes of a storm.",
        min=0.0,
        max=600.0,
        duration=True,
    )
    job_link_wait: float = option(
        2.0,
        "A job incident with no node evidence waits this long after `settle` for a "
        "switch/storage/NVLink group (any replica's) holding its origin, so one fault pages "
        "once; then it pages as `unknown` with the nodes that stalled first.",
        min=0.0,
        max=600.0,
        duration=True,
    )
    job_origin_window: float = option(
        60.0,
        "A node incident of a job in a switch/storage/NVLink group counts as the job "
        "incident's origin only if it started within this long of the job's stalls (the "
        "origin stalls first; an older fault is another episode). At least the sample "
        "spacing of the slowest node.",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    join_window: float = option(
        300.0,
        "A node incident joins an open group of its culprit when their times overlap; a "
        "resolved one that started this long before the group still joins.",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    update_interval: float = option(
        30.0,
        "Send at most one `updated` transition per group this often (when it changed).",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    resolve_hold: float = option(
        5.0,
        "Resolve a group once all its node incidents stayed resolved this long.",
        min=0.0,
        max=3600.0,
        duration=True,
    )
    offline_grace: float = option(
        300.0,
        "A member whose node went offline counts as ended after this long (it cannot "
        "report its resolve).",
        min=0.0,
        max=86400.0,
        duration=True,
    )
    handover_delay: float = option(
        2.0,
        "After gaining a partition, collect its retained state this long before paging.",
        min=0.0,
        max=600.0,
        duration=True,
    )
    retain_resolved: float = option(
        3600.0,
        "Keep a resolved group's retained announcement on the broker this long.",
        min=1.0,
        max=30 * 86400.0,
        duration=True,
    )
    job_expiry: float = option(
        3600.0,
        "The ledger's per-job series of a job with no open incident expire this long after "
        "its last one (the fleet learns that a job ended only from its silence).",
        min=1.0,
        max=30 * 86400.0,
        duration=True,
    )
    cost_per_gpu_hour: float = option(
        0.0,
        "Price of one GPU-hour: the job ledger adds money lost (0: GPU-seconds only).",
        min=0.0,
        max=1e6,
    )
    tick: float = option(0.2, "Grouping tick in seconds.", min=0.01, max=60.0, duration=True)
    max_message_bytes: int = option(
        262_144, "Larger incident messages are rejected.", min=1024, max=16_777_216
    )

    def validate(self) -> None:
        """Ids are topic-safe; the grouping order has no duplicates."""
        for what, value in (("replica_id", self.replica_id), ("name", self.name)):
            if value and (not set(value) <= _ID_CHARS or len(value) > 64):
                msg = f"{what} must be 1-64 characters of [a-z0-9_-], got {value!r}"
                raise ValueError(msg)
        if not self.name:
            msg = "name must not be empty"
            raise ValueError(msg)
        if len(set(self.group_by)) != len(self.group_by):
            msg = "group_by lists a strategy twice"
            raise ValueError(msg)
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535 or not host:
            msg = f"listen must be host:port, got {self.listen!r}"
            raise ValueError(msg)

    def replica(self) -> str:
        """The configured replica id, else the host name made topic-safe."""
        if self.replica_id:
            return self.replica_id
        raw = socket.gethostname().lower()
        return "".join(c if c in _ID_CHARS else "-" for c in raw).strip("-")[:64] or "replica"

    def state_path(self, daemon_state_dir: Path) -> Path:
        """The directory holding this replica's database."""
        return Path(self.state_dir) if self.state_dir else daemon_state_dir / "fleet"
