"""Grouping node incidents into cluster incidents: a pure state machine.

The grouper holds the node incidents (members) of the partitions this replica
owns, the node statuses, and the announcements every replica made of its
groups. :meth:`Grouper.tick` applies the lifecycle and returns transitions:

- a group is *pending* from its first member until ``settle`` has passed (so
  one page already counts the nodes of a storm), then *opened*;
- members whose times overlap join the open group of their shared culprit;
  a changed node count, GPU count, node status or cause marks it dirty and
  yields at most one *updated* per ``update_interval``;
- once every member ended (resolved, or its node offline for
  ``offline_grace``) for ``resolve_hold``, the group is *resolved*.

A group another replica announced as open is adopted, not re-opened: the new
owner continues its key and revision, so a takeover never pages twice. Time
is passed in, no I/O happens here; the service does MQTT, SQLite and outputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fabricwatch.engine.incidents import CAUSE_TEXT, TransitionKind, gpu_list
from fabricwatch.fleet.model import (
    GroupKey,
    Member,
    cluster_incident_key,
    group_topic_id,
    grouping_key,
    partition_of,
)
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.outputs.outbox import iso

CLUSTER_SCHEMA = "fabricwatch.cluster-incident/v1"
GroupState = Literal["pending", "open", "resolved"]
_EVIDENCE_MAX = 5
_PORTS_SHOWN = 8


@dataclass(slots=True)
class Tracked:
    """A member as the grouper tracks it."""

    member: Member
    partition: int
    key: GroupKey
    ended_seen: float | None = None
    """Local wall time the member was first seen resolved."""


@dataclass(slots=True)
class NodeStatus:
    """A node's latest status (from its retained ``status`` topic / Will)."""

    online: bool
    since: float


@dataclass(slots=True)
class Group:
    """One shared culprit's current episode."""

    cluster: str
    key: GroupKey
    partition: int
    topic_id: str
    first_seen: float
    members: dict[str, Tracked] = field(default_factory=dict)
    incident_key: str = ""
    state: GroupState = "pending"
    onset: float = 0.0
    opened_at: float = 0.0
    updated_at: float = 0.0
    resolved_at: float | None = None
    revision: int = 0
    last_sent: float = 0.0
    signature: tuple[Any, ...] = ()
    ended_since: float | None = None
    doc: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupTransition:
    """A cluster incident opened, updated or resolved at wall time ``at``."""

    kind: TransitionKind
    at: float
    cluster: str
    topic_id: str
    partition: int
    doc: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Clear:
    """Retained member topics to clear (the member is folded into a resolved group)."""

    partition: int
    member: Member


class Grouper:
    """Members, groups and announcements of one replica (no I/O)."""

    def __init__(self, settings: FleetSettings, replica: str) -> None:
        self.settings = settings
        self.replica = replica
        self.owned: set[int] = set()
        self._warm_at: dict[int, float] = {}
        self.groups: dict[tuple[str, str], Group] = {}
        self.nodes: dict[tuple[str, str], NodeStatus] = {}
        self.announced: dict[tuple[str, str], dict[str, Any]] = {}
        self._done: dict[str, float] = {}
        self.clears: list[Clear] = []
        self.adopted: list[dict[str, Any]] = []
        """Announcements of peers this replica took over (drained by the service)."""
        self.clear_groups: list[tuple[str, str]] = []

    # -- ownership -------------------------------------------------------------

    def set_owned(self, partitions: Iterable[int], now: float) -> tuple[set[int], set[int]]:
        """Own exactly ``partitions``; returns (gained, lost).

        Gained partitions are warm (may page) only after ``handover_delay``:
        their retained members and the previous owner's last announcements
        arrive meanwhile. Lost ones are forgotten at once.
        """
        new = set(partitions)
        gained, lost = new - self.owned, self.owned - new
        for p in gained:
            self._warm_at[p] = now + self.settings.handover_delay
        for p in lost:
            self._warm_at.pop(p, None)
        self.groups = {k: g for k, g in self.groups.items() if g.partition not in lost}
        self.owned = new
        return gained, lost

    def warm(self, partition: int, now: float) -> bool:
        """Whether this replica may page for ``partition`` now."""
        at = self._warm_at.get(partition)
        return at is not None and now >= at

    def partition(self, cluster: str, key: GroupKey) -> int:
        """The partition of a grouping key."""
        return partition_of(cluster, key, self.settings.partitions)

    def key_of(self, m: Member) -> GroupKey:
        """The grouping key of a member."""
        return grouping_key(m, self.settings.group_by, self.settings.cliques)

    # -- inputs ----------------------------------------------------------------

    def on_status(self, cluster: str, node: str, online: bool, now: float) -> None:
        """A node's status changed (or was replayed)."""
        prev = self.nodes.get((cluster, node))
        if prev is None or prev.online != online:
            self.nodes[(cluster, node)] = NodeStatus(online, now)

    def online(self, cluster: str, node: str) -> bool | None:
        """A node's status, None if never seen."""
        st = self.nodes.get((cluster, node))
        return None if st is None else st.online

    def on_announcement(self, cluster: str, topic_id: str, doc: Mapping[str, Any] | None) -> None:
        """A replica announced (or cleared, ``doc=None``) a group's cluster incident."""
        if doc is None:
            self.announced.pop((cluster, topic_id), None)
            return
        prev = self.announced.get((cluster, topic_id))
        if (
            prev is not None
            and prev.get("key") == doc.get("key")
            and int(prev.get("revision", 0)) > int(doc.get("revision", 0))
        ):
            return  # a stale duplicate
        self.announced[(cluster, topic_id)] = dict(doc)
        if doc.get("state") == "resolved":
            expiry = float(doc.get("resolved_unix") or 0.0) + self.settings.retain_resolved
            for m in doc.get("members") or []:
                if isinstance(m, dict):
                    self._done[f"{cluster}/{m.get('node')}/{m.get('incident')}"] = expiry
        g = self.groups.get((cluster, topic_id))
        if g is not None and g.incident_key == doc.get("key"):
            # Another replica touched our group (an ownership overlap): never go back.
            g.revision = max(g.revision, int(doc.get("revision", 0)))

    def on_member(self, m: Member, now: float) -> bool:
        """Apply a member's latest state; False when its partition is not owned here."""
        key = self.key_of(m)
        p = self.partition(m.cluster, key)
        if p not in self.owned:
            return False
        ident = m.ident
        if ident in self._done:
            self.clears.append(Clear(p, m))  # a late duplicate of a finished incident
            return True
        tid = group_topic_id(m.cluster, key)
        g = self.groups.get((m.cluster, tid))
        if g is not None and g.state == "resolved":
            if ident in g.members:
                self.clears.append(Clear(p, m))
                return True
            g = None
        if g is None:
            # A resolve with no group yet waits in a pending group: it joins a group
            # that opens within the join window (or an announced one), else is dropped.
            g = Group(m.cluster, key, p, tid, first_seen=now)
            self.groups[(m.cluster, tid)] = g
        old = g.members.get(ident)
        if old is not None:
            om = old.member
            newer = m.revision > om.revision or (m.state == "resolved" and om.state == "open")
            if not newer:
                return True
            old.member = m
            if m.state == "resolved" and old.ended_seen is None:
                old.ended_seen = now
            return True
        if (
            g.state == "open"
            and m.state == "resolved"
            and (m.resolved_at or m.onset) < g.onset - self.settings.join_window
        ):
            self._finish(ident, p, m, now)
            return True
        g.members[ident] = Tracked(m, p, key, now if m.state == "resolved" else None)
        return True

    def _finish(self, ident: str, partition: int, m: Member, now: float) -> None:
        self._done[ident] = now + self.settings.retain_resolved
        self.clears.append(Clear(partition, m))

    # -- lifecycle -------------------------------------------------------------

    def _ended(self, t: Tracked, now: float) -> float | None:
        """Local time since which a member counts as ended, or None."""
        if t.member.state == "resolved":
            return t.ended_seen if t.ended_seen is not None else now
        st = self.nodes.get((t.member.cluster, t.member.node))
        if st is not None and not st.online and now - st.since >= self.settings.offline_grace:
            return st.since + self.settings.offline_grace
        return None

    def tick(self, now: float) -> list[GroupTransition]:
        """Advance every owned, warm group; return the transitions to record and send."""
        s = self.settings
        out: list[GroupTransition] = []
        self._adopt_orphans(now)
        for (cluster, tid), g in list(self.groups.items()):
            if not self.warm(g.partition, now):
                continue
            if g.state == "pending":
                self._tick_pending(g, now, out)
            elif g.state == "open":
                self._tick_open(g, now, out)
            elif g.resolved_at is not None and now - g.resolved_at >= s.retain_resolved:
                del self.groups[(cluster, tid)]
                self.clear_groups.append((cluster, tid))
        for ident, expiry in list(self._done.items()):
            if expiry < now:
                del self._done[ident]
        return out

    def _adopt_orphans(self, now: float) -> None:
        """An open announcement in an owned partition with no members left here:
        take it over so it gets resolved (its members resolved while nobody owned it)."""
        for (cluster, tid), doc in self.announced.items():
            if doc.get("state") != "open" or (cluster, tid) in self.groups:
                continue
            p = doc.get("partition")
            if not isinstance(p, int) or p not in self.owned or not self.warm(p, now):
                continue
            gk = doc.get("group") or {}
            key = GroupKey(str(gk.get("kind", "node")), str(gk.get("name", "")))
            g = Group(cluster, key, p, tid, first_seen=now)
            self._adopt(g, doc, now)
            self.groups[(cluster, tid)] = g

    def _adopt(self, g: Group, doc: Mapping[str, Any], now: float) -> None:
        g.state = "open"
        g.incident_key = str(doc["key"])
        g.onset = float(doc.get("onset_unix") or now)
        g.opened_at = float(doc.get("opened_unix") or now)
        g.revision = int(doc.get("revision", 0))
        g.last_sent = now
        g.signature = tuple(doc.get("signature") or ())
        g.doc = dict(doc)
        self.adopted.append(g.doc)

    def _tick_pending(self, g: Group, now: float, out: list[GroupTransition]) -> None:
        s = self.settings
        opened = [t for t in g.members.values() if t.member.state == "open"]
        announced = self.announced.get((g.cluster, g.topic_id))
        if announced is not None and announced.get("state") == "open":
            self._adopt(g, announced, now)
            self._prune_non_overlapping(g, now)
            self._tick_open(g, now, out)
            return
        if not opened:
            if now - g.first_seen >= max(s.settle, s.join_window):
                for ident, t in g.members.items():
                    self._finish(ident, t.partition, t.member, now)
                del self.groups[(g.cluster, g.topic_id)]
            return
        if now - g.first_seen < s.settle:
            return
        g.onset = min(t.member.onset for t in opened)
        self._prune_non_overlapping(g, now)
        g.onset = min(t.member.onset for t in g.members.values())
        g.incident_key = cluster_incident_key(g.cluster, g.key, g.onset)
        g.state = "open"
        g.opened_at = now
        out.append(self._transition(g, "opened", now))

    def _prune_non_overlapping(self, g: Group, now: float) -> None:
        window = self.settings.join_window
        for ident, t in list(g.members.items()):
            m = t.member
            if m.state == "resolved" and (m.resolved_at or m.onset) < g.onset - window:
                del g.members[ident]
                self._finish(ident, t.partition, m, now)

    def _tick_open(self, g: Group, now: float, out: list[GroupTransition]) -> None:
        s = self.settings
        ends = [self._ended(t, now) for t in g.members.values()]
        if all(e is not None for e in ends):
            since = max((e for e in ends if e is not None), default=now)
            if g.ended_since is None:
                g.ended_since = since
            if now - g.ended_since >= s.resolve_hold:
                g.state = "resolved"
                g.resolved_at = now
                out.append(self._transition(g, "resolved", now))
                for ident, t in g.members.items():
                    self._finish(ident, t.partition, t.member, now)
                return
        else:
            g.ended_since = None
        if (
            g.members  # an adopted orphan has nothing new to say until it resolves
            and self._signature(g, now) != g.signature
            and now - g.last_sent >= s.update_interval
        ):
            out.append(self._transition(g, "updated", now))

    def _signature(self, g: Group, now: float) -> tuple[Any, ...]:
        nodes = {(t.member.node) for t in g.members.values()}
        offline = {t.member.node for t in g.members.values() if self._offline(t)}
        ended = sum(1 for t in g.members.values() if self._ended(t, now) is not None)
        return (len(nodes), _gpu_count(g), len(offline), _cause(g)[0], ended)

    def _offline(self, t: Tracked) -> bool:
        st = self.nodes.get((t.member.cluster, t.member.node))
        return st is not None and not st.online

    def _transition(self, g: Group, kind: TransitionKind, now: float) -> GroupTransition:
        g.revision += 1
        g.updated_at = now
        g.last_sent = now
        g.signature = self._signature(g, now)
        g.doc = self.render(g, now)
        g.doc["transition"] = kind
        return GroupTransition(kind, now, g.cluster, g.topic_id, g.partition, g.doc)

    # -- rendering -------------------------------------------------------------

    def render(self, g: Group, now: float) -> dict[str, Any]:
        """The ``fabricwatch.cluster-incident/v1`` document of a group.

        A superset of the node incident fields the sinks read (``node`` is the
        group's subject, ``culprit.key`` the shared culprit), plus ``nodes``,
        ``members`` and counts.
        """
        members = sorted(g.members.values(), key=lambda t: (t.member.node_name, t.member.key))
        cause, confidence = _cause(g)
        node_names = sorted({t.member.node_name for t in members})
        offline = sorted({t.member.node_name for t in members if self._offline(t)})
        gpu_seconds, cost = _lost(members, now)
        ports = sorted({t.member.label("port") for t in members if t.member.label("port")})
        kind = "stall" if any(t.member.kind == "stall" for t in members) else "slowdown"
        where = _where(g.key, ports)
        n_gpus = _gpu_count(g)
        verb = "stalled" if kind == "stall" else "slowed down"
        summary = (
            f"{where}: {CAUSE_TEXT.get(cause, cause)} {verb} {len(node_names)} "
            f"node{'s' if len(node_names) != 1 else ''} / {n_gpus} GPU{'s' if n_gpus != 1 else ''}"
        )
        if offline:
            summary += f" ({len(offline)} offline)"
        summary += f"; {gpu_seconds:,.0f} GPU-seconds lost"
        if cost is not None:
            summary += f" ({cost:,.2f} cost)"
        resolved = g.state == "resolved"
        ended = g.resolved_at if resolved else None
        labels: dict[str, str] = {g.key.kind: g.key.name}
        if ports:
            shown = ports[:_PORTS_SHOWN]
            more = len(ports) - len(shown)
            labels["ports"] = ",".join(shown) + (f",+{more}" if more else "")
        by_cause: Counter[str] = Counter()
        for name in node_names:
            causes = {t.member.cause for t in members if t.member.node_name == name}
            by_cause.update(causes)
        return {
            "schema": CLUSTER_SCHEMA,
            "key": g.incident_key,
            "cluster": g.cluster,
            "group": {"kind": g.key.kind, "name": g.key.name, "id": g.topic_id},
            "partition": g.partition,
            "owner": self.replica,
            "node": g.key.subject,
            "kind": kind,
            "state": "resolved" if resolved else "open",
            "cause": cause,
            "confidence": confidence,
            "culprit": {"key": str(g.key), "kind": g.key.kind, "labels": labels},
            "summary": summary,
            "onset": iso(g.onset),
            "onset_unix": round(g.onset, 3),
            "opened_at": iso(g.opened_at),
            "opened_unix": round(g.opened_at, 3),
            "updated_at": iso(now),
            "updated_unix": round(now, 3),
            "ended_at": None if ended is None else iso(ended),
            "resolved_at": None if ended is None else iso(ended),
            "resolved_unix": None if ended is None else round(ended, 3),
            "duration_seconds": round(max(0.0, (ended or now) - g.onset), 3),
            "node_count": len(node_names),
            "nodes": node_names,
            "nodes_offline": offline,
            "nodes_by_cause": dict(sorted(by_cause.items())),
            "gpu_count": n_gpus,
            "gpus": [f"{name}:{gpu_list(gpus)}" for name, gpus in _gpus_by_node(members).items()],
            "jobs": sorted({t.member.job for t in members if t.member.job}),
            "job": _top_job(members),
            "gpu_seconds_lost": round(gpu_seconds, 3),
            "cost_lost": None if cost is None else round(cost, 4),
            "episodes": 1,
            "evidence": _evidence(members),
            "missing_families": [],
            "members": [
                {
                    "node": t.member.node,
                    "node_name": t.member.node_name,
                    "incident": t.member.key,
                    "state": t.member.state,
                    "online": not self._offline(t),
                    "cause": t.member.cause,
                    "culprit": t.member.culprit_key,
                    "gpus": list(t.member.gpus),
                    "job": t.member.job or None,
                    "onset_unix": round(t.member.onset, 3),
                    "gpu_seconds_lost": round(t.member.gpu_seconds, 3),
                }
                for t in members
            ],
            "signature": list(g.signature),
            "revision": g.revision,
        }


def _gpus_by_node(members: Iterable[Tracked]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for t in members:
        out.setdefault(t.member.node_name, set()).update(t.member.gpus)
    return dict(sorted(out.items()))


def _gpu_count(g: Group) -> int:
    per_node: dict[str, set[str]] = {}
    for t in g.members.values():
        per_node.setdefault(t.member.node, set()).update(t.member.gpus)
    return sum(len(v) for v in per_node.values())


def _cause(g: Group) -> tuple[str, float]:
    """The cause covering most GPUs (then most nodes), and its best confidence."""
    gpus: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    conf: dict[str, float] = {}
    for t in g.members.values():
        m = t.member
        gpus[m.cause] += max(1, len(m.gpus))
        nodes[m.cause] += 1
        conf[m.cause] = max(conf.get(m.cause, 0.0), m.confidence)
    if not gpus:
        return "unknown", 0.0
    best = max(gpus, key=lambda c: (c != "unknown", gpus[c], nodes[c], c))
    return best, round(conf[best], 3)


def _lost(members: Iterable[Tracked], now: float) -> tuple[float, float | None]:
    """GPU-seconds and cost lost so far; open stalls are extrapolated to ``now``."""
    total = 0.0
    cost: float | None = None
    for t in members:
        m = t.member
        reported = m.gpu_seconds
        est = reported
        if m.state == "open" and m.kind == "stall":
            est = max(reported, len(m.gpus) * max(0.0, now - m.onset))
        total += est
        if m.cost is not None:
            scale = est / reported if reported > 0 else 1.0
            cost = (cost or 0.0) + m.cost * scale
    return total, cost


def _where(key: GroupKey, ports: list[str]) -> str:
    if key.kind == "switch":
        if len(ports) == 1:
            return f"{key.name} {ports[0]}"
        if ports:
            return f"{key.name} ({len(ports)} ports)"
        return key.name
    return key.subject


def _top_job(members: Iterable[Tracked]) -> str | None:
    jobs = Counter(t.member.job for t in members if t.member.job)
    return jobs.most_common(1)[0][0] if jobs else None


def _evidence(members: Iterable[Tracked]) -> list[dict[str, Any]]:
    """Strongest distinct evidence across members, with how many nodes share it."""
    seen: dict[str, tuple[float, Any, set[str]]] = {}
    for t in members:
        for e in t.member.evidence:
            if not e.text:
                continue
            score, ev, nodes = seen.get(e.text, (e.score, e, set()))
            nodes.add(t.member.node_name)
            seen[e.text] = (max(score, e.score), ev, nodes)
    ranked = sorted(seen.values(), key=lambda x: (-x[0], x[1].text))[:_EVIDENCE_MAX]
    out: list[dict[str, Any]] = []
    for score, e, nodes in ranked:
        who = f"{len(nodes)} nodes" if len(nodes) > 1 else next(iter(nodes))
        out.append(
            {
                "cause": e.cause,
                "family": e.family,
                "culprit": e.culprit,
                "labels": {},
                "score": round(score, 3),
                "value": None,
                "baseline": None,
                "text": f"{e.text} ({who})",
                "nodes": len(nodes),
            }
        )
    return out
