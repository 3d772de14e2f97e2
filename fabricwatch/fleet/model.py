"""Values of the fleet aggregator: node incidents as group members, grouping keys,
partitions and topics.

A node daemon publishes each incident transition on
``<prefix>/<cluster>/<node>/incidents`` as the ``fabricwatch.incident-event/v1``
envelope. :func:`parse_node_event` turns one into a :class:`Member` (garbage
raises :class:`~fabricwatch.errors.ParseError`); :func:`grouping_key` names the
shared culprit it belongs to; :func:`partition_of` and :func:`owner_of` decide
which replica owns that culprit's group.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from fabricwatch.errors import ParseError
from fabricwatch.fleet.settings import CliqueSettings, GroupBy
from fabricwatch.outputs.mqtt import topic_segment
from fabricwatch.outputs.outbox import EVENT_SCHEMA

MEMBER_SCHEMA = "fabricwatch.fleet-member/v1"
INCIDENT_SCHEMA = "fabricwatch.incident/v1"
FLEET_SEGMENT = "_fleet"
"""Topic segment under the prefix that holds the aggregator's own topics."""

MemberState = Literal["open", "resolved"]
_TRANSITIONS = ("opened", "updated", "resolved")
_EVIDENCE_KEPT = 3


@dataclass(frozen=True, slots=True)
class EvidenceLine:
    """One evidence item of a node incident, as far as a cluster incident needs it."""

    cause: str
    family: str
    culprit: str
    score: float
    text: str


@dataclass(frozen=True, slots=True)
class Member:
    """The latest known state of one node incident.

    Attributes:
        cluster: topic segment of the cluster.
        node: topic segment of the node (its identity in status topics).
        node_name: the node's own name (``data.node``).
        key: the node incident key.
        state: ``open`` or ``resolved``.
        published: unix time the node published this transition (envelope timestamp).
    """

    cluster: str
    node: str
    node_name: str
    key: str
    state: MemberState
    kind: str
    cause: str
    confidence: float
    culprit_key: str
    culprit_kind: str
    culprit_labels: tuple[tuple[str, str], ...]
    gpus: tuple[str, ...]
    job: str
    gpu_seconds: float
    cost: float | None
    onset: float
    resolved_at: float | None
    revision: int
    summary: str
    evidence: tuple[EvidenceLine, ...]
    published: float

    @property
    def ident(self) -> str:
        """``cluster/node/key``: unique across the fleet."""
        return f"{self.cluster}/{self.node}/{self.key}"

    def label(self, name: str) -> str:
        """A culprit label value, or ""."""
        for k, v in self.culprit_labels:
            if k == name:
                return v
        return ""


def _unix(text: Any, what: str, source: str) -> float:
    if isinstance(text, int | float) and not isinstance(text, bool) and math.isfinite(text):
        return float(text)
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected an RFC 3339 time, got {text!r}", source=source)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ParseError(f"{what}: not an RFC 3339 time: {text[:40]!r}", source=source) from None


def _str(doc: Mapping[str, Any], key: str, source: str, *, required: bool = True) -> str:
    value = doc.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ParseError(f"{key}: expected a non-empty string, got {value!r}"[:200], source=source)
    return value


def _num(doc: Mapping[str, Any], key: str, source: str, default: float | None = None) -> float:
    value = doc.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParseError(f"{key}: expected a finite number, got {value!r}"[:200], source=source)
    return float(value)


def _evidence(raw: Any, source: str) -> tuple[EvidenceLine, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ParseError("evidence: expected a list", source=source)
    out: list[EvidenceLine] = []
    for e in raw[:_EVIDENCE_KEPT]:
        if not isinstance(e, dict):
            raise ParseError("evidence: expected objects", source=source)
        out.append(
            EvidenceLine(
                str(e.get("cause", "")),
                str(e.get("family", "")),
                str(e.get("culprit", "")),
                _num(e, "score", source, 0.0),
                str(e.get("text", ""))[:500],
            )
        )
    return tuple(out)


def member_from_incident(
    data: Mapping[str, Any], *, cluster: str, node: str, published: float, source: str
) -> Member:
    """A :class:`Member` from a ``fabricwatch.incident/v1`` document."""
    if data.get("schema") != INCIDENT_SCHEMA:
        raise ParseError(f"data is not a {INCIDENT_SCHEMA} document", source=source)
    key = _str(data, "key", source)
    if len(key) > 64 or not all(c.isalnum() or c in "_-" for c in key):
        raise ParseError(f"key: not an incident key: {key[:70]!r}", source=source)
    state = data.get("state")
    if state not in ("open", "resolved"):
        raise ParseError(f"state: expected open or resolved, got {state!r}", source=source)
    culprit = data.get("culprit") or {}
    if not isinstance(culprit, dict):
        raise ParseError("culprit: expected an object", source=source)
    labels = culprit.get("labels") or {}
    if not isinstance(labels, dict):
        raise ParseError("culprit.labels: expected an object", source=source)
    gpus = data.get("gpus") or []
    if not isinstance(gpus, list) or len(gpus) > 4096:
        raise ParseError("gpus: expected a list", source=source)
    cost = data.get("cost_lost")
    onset = (
        _num(data, "onset_unix", source)
        if data.get("onset_unix") is not None
        else _unix(data.get("onset"), "onset", source)
    )
    resolved_raw = data.get("resolved_at")
    return Member(
        cluster=cluster,
        node=node,
        node_name=_str(data, "node", source, required=False) or node,
        key=key,
        state=state,
        kind=_str(data, "kind", source),
        cause=_str(data, "cause", source),
        confidence=_num(data, "confidence", source, 0.0),
        culprit_key=str(culprit.get("key") or ""),
        culprit_kind=str(culprit.get("kind") or ""),
        culprit_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        gpus=tuple(str(g) for g in gpus),
        job=str(data.get("job") or ""),
        gpu_seconds=max(0.0, _num(data, "gpu_seconds_lost", source, 0.0)),
        cost=None if cost is None else _num(data, "cost_lost", source),
        onset=onset,
        resolved_at=None if resolved_raw is None else _unix(resolved_raw, "resolved_at", source),
        revision=int(_num(data, "revision", source, 0.0)),
        summary=str(data.get("summary") or "")[:1000],
        evidence=_evidence(data.get("evidence"), source),
        published=published,
    )


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One parsed node incident transition."""

    event_id: str
    transition: str
    member: Member


def split_node_topic(topic: str, prefix: str, leaf: str) -> tuple[str, str]:
    """``<prefix>/<cluster>/<node>/<leaf>`` -> (cluster, node); ParseError otherwise."""
    head = prefix.strip("/") + "/"
    parts = topic[len(head) :].split("/") if topic.startswith(head) else []
    if len(parts) != 3 or parts[2] != leaf or not parts[0] or not parts[1]:
        raise ParseError(f"not a node {leaf} topic", source=topic)
    if parts[0] == FLEET_SEGMENT:
        raise ParseError("the fleet's own topic space", source=topic)
    return parts[0], parts[1]


def parse_node_event(
    payload: bytes, topic: str, *, prefix: str, max_bytes: int = 262_144
) -> NodeEvent:
    """Parse an incident event a node published; :class:`ParseError` on anything else."""
    cluster, node = split_node_topic(topic, prefix, "incidents")
    if len(payload) > max_bytes:
        raise ParseError(f"message of {len(payload)} bytes exceeds {max_bytes}", source=topic)
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"not JSON: {exc}", source=topic) from None
    if not isinstance(doc, dict) or doc.get("schema") != EVENT_SCHEMA:
        raise ParseError(f"not a {EVENT_SCHEMA} envelope", source=topic)
    transition = _str(doc, "type", topic).removeprefix("incident.")
    if transition not in _TRANSITIONS:
        raise ParseError(f"type: unknown transition {doc.get('type')!r}", source=topic)
    data = doc.get("data")
    if not isinstance(data, dict):
        raise ParseError("data: expected an object", source=topic)
    published = _unix(doc.get("timestamp"), "timestamp", topic)
    member = member_from_incident(
        data, cluster=cluster, node=node, published=published, source=topic
    )
    return NodeEvent(_str(doc, "event_id", topic), transition, member)


def member_to_json(m: Member) -> dict[str, Any]:
    """The compact document re-published on a partition topic."""
    return {
        "schema": MEMBER_SCHEMA,
        "cluster": m.cluster,
        "node": m.node,
        "node_name": m.node_name,
        "key": m.key,
        "state": m.state,
        "kind": m.kind,
        "cause": m.cause,
        "confidence": m.confidence,
        "culprit": {"key": m.culprit_key, "kind": m.culprit_kind, "labels": dict(m.culprit_labels)},
        "gpus": list(m.gpus),
        "job": m.job or None,
        "gpu_seconds_lost": m.gpu_seconds,
        "cost_lost": m.cost,
        "onset_unix": m.onset,
        "resolved_unix": m.resolved_at,
        "revision": m.revision,
        "summary": m.summary,
        "evidence": [
            {
                "cause": e.cause,
                "family": e.family,
                "culprit": e.culprit,
                "score": e.score,
                "text": e.text,
            }
            for e in m.evidence
        ],
        "published_unix": m.published,
    }


def member_from_json(payload: bytes, *, source: str) -> Member:
    """Read back :func:`member_to_json`; :class:`ParseError` on garbage."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"not JSON: {exc}", source=source) from None
    if not isinstance(doc, dict) or doc.get("schema") != MEMBER_SCHEMA:
        raise ParseError(f"not a {MEMBER_SCHEMA} document", source=source)
    data = dict(doc)
    data["schema"] = INCIDENT_SCHEMA
    data["resolved_at"] = doc.get("resolved_unix")
    m = member_from_incident(
        data,
        cluster=topic_segment(_str(doc, "cluster", source)),
        node=topic_segment(_str(doc, "node", source)),
        published=_num(doc, "published_unix", source, 0.0),
        source=source,
    )
    return replace(m, node_name=_str(doc, "node_name", source, required=False) or m.node)


@dataclass(frozen=True, slots=True)
class GroupKey:
    """The shared culprit of a group.

    Attributes:
        kind: ``switch``, ``storage``, ``nvlink``, ``job`` or ``node``.
        name: the switch, storage target, clique, job or node.
    """

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def subject(self) -> str:
        """For people: ``switch leaf-7``."""
        return f"{self.kind} {self.name}"


def clique_of(node: str, cliques: Sequence[CliqueSettings]) -> str:
    """The configured NVLink clique of a node, or ""."""
    for c in cliques:
        if any(fnmatch.fnmatchcase(node, p) for p in c.nodes):
            return c.name
    return ""


def grouping_key(
    m: Member, strategies: Sequence[GroupBy], cliques: Sequence[CliqueSettings] = ()
) -> GroupKey:
    """The shared culprit ``m`` is grouped by: the first strategy that applies.

    A culprit on a switch groups by switch (every node behind a leaf reports its
    own port on it); a storage culprit by its server/target label, else by the
    path name (nodes mount a shared target under the same name); an NVLink or
    GPU-fabric fault by the node's clique; anything else by job; an incident
    with none of these stands alone (per node).
    """
    ck = m.culprit_key
    for s in strategies:
        if s == "switch" and ck.startswith("switch:"):
            switch = m.label("switch") or ck.split(":")[1]
            if switch:
                return GroupKey("switch", switch)
        elif s == "storage" and ck.startswith("storage:"):
            target = m.label("server") or m.label("target") or ck.removeprefix("storage:")
            if target:
                return GroupKey("storage", target)
        elif s == "nvlink" and (m.culprit_kind == "nvlink" or m.cause == "nvlink_degraded"):
            clique = (
                m.label("clique") or clique_of(m.node_name, cliques) or clique_of(m.node, cliques)
            )
            if clique:
                return GroupKey("nvlink", clique)
        elif s == "job" and m.job:
            return GroupKey("job", m.job)
    return GroupKey("node", m.node_name)


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def partition_of(cluster: str, key: GroupKey, partitions: int) -> int:
    """The partition of a grouping key (stable across replicas and restarts)."""
    return _h64(f"{cluster}|{key}") % max(1, partitions)


def owner_of(partition: int, replicas: Sequence[str]) -> str | None:
    """Rendezvous (highest-random-weight) hashing: the replica owning ``partition``.

    When a replica joins or leaves, only the partitions it gains or held move.
    """
    if not replicas:
        return None
    return max(replicas, key=lambda r: (_h64(f"{r}|{partition}"), r))


def group_topic_id(cluster: str, key: GroupKey) -> str:
    """The topic segment of a grouping key's announcement topic."""
    return hashlib.sha256(f"{cluster}|{key}".encode()).hexdigest()[:16]


def cluster_incident_key(cluster: str, key: GroupKey, onset: float) -> str:
    """The cluster incident key: stable for one episode of one shared culprit."""
    raw = f"fleet|{cluster}|{key}|{round(onset * 1000)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class FleetTopics:
    """The topics of one aggregator fleet under ``<prefix>``."""

    prefix: str
    name: str

    @property
    def base(self) -> str:
        """``<prefix>/_fleet/<name>``."""
        return f"{self.prefix.strip('/')}/{FLEET_SEGMENT}/{self.name}"

    def incidents_filter(self, cluster: str = "+") -> str:
        """Node incident events of one cluster (``+``: all), shared by the replicas."""
        return f"$share/{self.name}/{self.prefix.strip('/')}/{cluster}/+/incidents"

    def status_filter(self, cluster: str = "+") -> str:
        """Node status of one cluster (every replica reads all of them)."""
        return f"{self.prefix.strip('/')}/{cluster}/+/status"

    def jobwork_filter(self, cluster: str = "+") -> str:
        """Node job reports (``fabricwatch.node-jobwork/v1``); every replica reads all."""
        return f"{self.prefix.strip('/')}/{cluster}/+/jobwork"

    def node_jobwork(self, cluster: str, node: str) -> str:
        """Where one node publishes its job reports."""
        return f"{self.prefix.strip('/')}/{topic_segment(cluster)}/{topic_segment(node)}/jobwork"

    def member(self, partition: int, m: Member) -> str:
        """Retained latest state of one node incident; ``/o`` open, ``/r`` resolved."""
        leaf = "r" if m.state == "resolved" else "o"
        return f"{self.base}/p/{partition}/{m.cluster}/{m.node}/{m.key}/{leaf}"

    def member_topics(self, partition: int, m: Member) -> tuple[str, str]:
        """Both retained topics of a member (to clear them)."""
        stem = f"{self.base}/p/{partition}/{m.cluster}/{m.node}/{m.key}"
        return f"{stem}/o", f"{stem}/r"

    def partition_filter(self, partition: int) -> str:
        """Every member of one partition."""
        return f"{self.base}/p/{partition}/#"

    def partition_from(self, topic: str) -> int | None:
        """The partition number of a member topic, or None."""
        head = f"{self.base}/p/"
        if not topic.startswith(head):
            return None
        num = topic[len(head) :].split("/", 1)[0]
        return int(num) if num.isdigit() else None

    def group(self, cluster: str, topic_id: str) -> str:
        """Retained announcement of a group's latest cluster incident."""
        return f"{self.base}/groups/{cluster}/{topic_id}"

    def job(self, cluster: str, job: str) -> str:
        """Retained latest job incident of one job, with its ledger entry
        (``fabricwatch.job-event/v1``), for consumers following jobs."""
        return f"{self.base}/jobs/{cluster}/{topic_segment(job)}"

    @property
    def jobs_filter(self) -> str:
        """Every job's event topic."""
        return f"{self.base}/jobs/#"

    @property
    def groups_filter(self) -> str:
        """Every group announcement."""
        return f"{self.base}/groups/#"

    def replica(self, replica: str) -> str:
        """Retained ``online``/``offline`` of one replica (also its Will)."""
        return f"{self.base}/replicas/{replica}"

    @property
    def replicas_filter(self) -> str:
        """Every replica's status."""
        return f"{self.base}/replicas/+"
