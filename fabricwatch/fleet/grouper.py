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

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fabricwatch.engine.incidents import CAUSE_TEXT, TransitionKind, gpu_list
from fabricwatch.fleet.jobs import (
    INFRA_KINDS,
    Candidate,
    Verdict,
    candidate,
    candidate_from_doc,
    job_summary,
    jobs_text,
    origin_json,
    rank,
)
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
    paged: bool = True
    """False for a job incident whose origin is in a shared-culprit group: that
    group's page is the page; this one is recorded and announced only."""
    covered_by: str = ""
    """The grouping key of that shared-culprit group."""


@dataclass(frozen=True, slots=True)
class _Linked:
    """A job's member in a shared-culprit group, with when it ended (inf: open)."""

    candidate: Candidate
    end: float


def _with_end(c: Candidate, end: float | None) -> _Linked:
    return _Linked(c, math.inf if end is None else end)


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
        self._links: dict[tuple[str, str], list[_Linked]] | None = None
        self._covers: dict[tuple[str, str], dict[str, int]] | None = None

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
        self._links = None  # members and announcements changed since the last tick
        self._covers = None
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
        g.paged = doc.get("paged") is not False
        cover = doc.get("covered_by")
        g.covered_by = str(cover.get("group") or "") if isinstance(cover, dict) else ""
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
        verdict = self._job_verdict(g, now) if g.key.kind == "job" else None
        if (
            verdict is not None
            and verdict.origin is None
            and now - g.first_seen < s.settle + s.job_link_wait
        ):
            return  # no evidence yet: a shared-culprit group (any replica's) may announce it
        self._prune_non_overlapping(g, now)
        g.onset = min(t.member.onset for t in g.members.values())
        g.incident_key = cluster_incident_key(g.cluster, g.key, g.onset)
        g.state = "open"
        g.opened_at = now
        if (
            verdict is not None
            and verdict.origin is not None
            and verdict.origin.group != str(g.key)
        ):
            g.paged = False
            g.covered_by = verdict.origin.group
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
        if g.key.kind == "job":
            v = self._job_verdict(g, now)
            origin = v.origin.node if v.origin is not None else ""
            cause = v.origin.cause if v.origin is not None else "unknown"
            return (len(nodes), _gpu_count(g), len(offline), cause, ended, origin)
        base = (len(nodes), _gpu_count(g), len(offline), _cause(g)[0], ended)
        if g.key.kind in INFRA_KINDS:
            return (*base, tuple(sorted(self._waiting_by_job(g).items())))
        return base

    # -- jobs --------------------------------------------------------------------

    def _link_index(self, now: float) -> dict[tuple[str, str], list[_Linked]]:
        """(cluster, job) -> the job's members in shared-culprit groups, local
        (owned here) or announced by any replica; built once per tick."""
        if self._links is not None:
            return self._links
        idx: dict[tuple[str, str], list[_Linked]] = {}
        for og in self.groups.values():
            if og.key.kind not in INFRA_KINDS:
                continue
            for t in og.members.values():
                if t.member.job:
                    c = candidate(t.member, str(og.key), og.incident_key)
                    idx.setdefault((og.cluster, t.member.job), []).append(
                        _with_end(c, t.member.resolved_at if t.member.state == "resolved" else None)
                    )
        for (cluster, tid), doc in self.announced.items():
            gk = doc.get("group") or {}
            if (cluster, tid) in self.groups or gk.get("kind") not in INFRA_KINDS:
                continue
            name = f"{gk.get('kind')}:{gk.get('name')}"
            for e in doc.get("members") or []:
                if isinstance(e, dict) and e.get("job"):
                    c = candidate_from_doc(e, name, str(doc.get("key") or ""))
                    end = doc.get("resolved_unix") if e.get("state") == "resolved" else None
                    idx.setdefault((cluster, str(e["job"])), []).append(
                        _with_end(c, float(end) if isinstance(end, int | float) else None)
                    )
        self._links = idx
        return idx

    def _job_candidates(self, g: Group, now: float) -> list[Candidate]:
        gk = str(g.key)
        own = [candidate(t.member, gk, g.incident_key) for t in g.members.values()]
        if not own:
            return own
        w = self.settings.job_origin_window
        lo = min(c.onset for c in own) - w
        hi = max(c.onset for c in own) + w
        linked = self._link_index(now).get((g.cluster, g.key.name), [])
        # The same episode: the shared-culprit member began within the window of the
        # job's stalls and had not ended before them.
        return own + [c.candidate for c in linked if lo <= c.candidate.onset <= hi and c.end >= lo]

    def _job_verdict(self, g: Group, now: float) -> Verdict:
        return rank(self._job_candidates(g, now))

    def _waiting_by_job(self, g: Group) -> dict[str, int]:
        """Nodes of each job that waited on this shared-culprit group (from the job
        incidents it covers, local or announced)."""
        return dict(self._cover_index().get((g.cluster, str(g.key)), {}))

    def _cover_index(self) -> dict[tuple[str, str], dict[str, int]]:
        """(cluster, covering group key) -> job -> waiting nodes; built once per tick
        (every open shared-culprit group asks, every tick)."""
        if self._covers is not None:
            return self._covers
        idx: dict[tuple[str, str], dict[str, int]] = {}
        for jg in self.groups.values():
            if jg.key.kind == "job" and jg.covered_by and jg.doc:
                idx.setdefault((jg.cluster, jg.covered_by), {})[jg.key.name] = int(
                    jg.doc.get("waiting_count") or 0
                )
        for (cluster, tid), doc in self.announced.items():
            cover = doc.get("covered_by")
            if (
                isinstance(cover, dict)
                and (cluster, tid) not in self.groups
                and doc.get("state") == "open"
            ):
                key = (cluster, str(cover.get("group") or ""))
                idx.setdefault(key, {})[str(doc.get("job") or "")] = int(
                    doc.get("waiting_count") or 0
                )
        self._covers = idx
        return idx

    def _group_incident(self, cluster: str, key: str) -> str:
        for og in self.groups.values():
            if og.cluster == cluster and str(og.key) == key:
                return og.incident_key
        for (c, _tid), doc in self.announced.items():
            gk = doc.get("group") or {}
            if c == cluster and f"{gk.get('kind')}:{gk.get('name')}" == key:
                return str(doc.get("key") or "")
        return ""

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
        g.doc["paged"] = g.paged
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
        n_gpus = _gpu_count(g)
        summary = _group_summary(
            _where(g.key, ports), cause, kind, nodes=len(node_names), gpus=n_gpus,
            offline=len(offline), lost=(gpu_seconds, cost),
        )  # fmt: skip
        resolved = g.state == "resolved"
        ended = g.resolved_at if resolved else None
        labels = _culprit_labels(g.key, ports)
        by_cause = _by_cause(members, node_names)
        jobs = sorted({t.member.job for t in members if t.member.job})
        job_fields: dict[str, Any] = {}
        culprit: dict[str, Any] = {"key": str(g.key), "kind": g.key.kind, "labels": labels}
        if g.key.kind == "job":
            summary, cause, confidence, job_fields = self._job_fields(
                g, now, node_names=node_names, kind=kind, lost=(gpu_seconds, cost), labels=labels
            )
            jobs = [g.key.name]
        elif g.key.kind in INFRA_KINDS:
            summary, job_fields = self._infra_fields(g, members, summary, jobs)
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
            "culprit": culprit,
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
            "nodes_by_cause": by_cause,
            "gpu_count": n_gpus,
            "gpus": [f"{name}:{gpu_list(gpus)}" for name, gpus in _gpus_by_node(members).items()],
            "jobs": jobs,
            "job": g.key.name if g.key.kind == "job" else _top_job(members),
            "gpu_seconds_lost": round(gpu_seconds, 3),
            "cost_lost": None if cost is None else round(cost, 4),
            "episodes": 1,
            "evidence": _evidence(members),
            "missing_families": [],
            "members": [self._member_json(t) for t in members],
            "signature": list(g.signature),
            "revision": g.revision,
            **job_fields,
        }

    def _infra_fields(
        self, g: Group, members: Sequence[Tracked], summary: str, jobs: list[str]
    ) -> tuple[str, dict[str, Any]]:
        """A switch/storage/NVLink group's origin and the jobs waiting on it."""
        verdict = rank(candidate(t.member, str(g.key), g.incident_key) for t in members)
        waiting_by_job = self._waiting_by_job(g)
        if jobs:
            summary += "; " + jobs_text(waiting_by_job, jobs)
        return summary, {
            "origin": origin_json(verdict.origin),
            "jobs_waiting": dict(sorted(waiting_by_job.items())),
        }

    def _member_json(self, t: Tracked) -> dict[str, Any]:
        m = t.member
        return {
            "node": m.node,
            "node_name": m.node_name,
            "incident": m.key,
            "state": m.state,
            "online": not self._offline(t),
            "cause": m.cause,
            "confidence": round(m.confidence, 3),
            "culprit": m.culprit_key,
            "culprit_kind": m.culprit_kind,
            "evidence": next((e.text for e in m.evidence if e.cause == m.cause), ""),
            "gpus": list(m.gpus),
            "job": m.job or None,
            "onset_unix": round(m.onset, 3),
            "gpu_seconds_lost": round(m.gpu_seconds, 3),
        }

    def _job_fields(
        self,
        g: Group,
        now: float,
        *,
        node_names: list[str],
        kind: str,
        lost: tuple[float, float | None],
        labels: dict[str, str],
    ) -> tuple[str, str, float, dict[str, Any]]:
        """A job group's summary, cause, confidence and job fields (origin, waiting)."""
        gpu_seconds, cost = lost
        ended = g.resolved_at if g.state == "resolved" else None
        verdict = self._job_verdict(g, now)
        origin_nodes = verdict.culprit_nodes
        waiting = [n for n in node_names if n not in origin_nodes]
        all_nodes = sorted(set(node_names) | origin_nodes)
        seconds = max(0.0, (ended or now) - g.onset)
        paged_as = ""
        cover = None
        if g.covered_by:
            paged_as = g.covered_by.replace(":", " ", 1)
            cover = {"group": g.covered_by, "key": self._group_incident(g.cluster, g.covered_by)}
        summary = job_summary(
            job=g.key.name, nodes=len(all_nodes), seconds=seconds, kind=kind, verdict=verdict,
            waiting=len(waiting), paged_as=paged_as,
        )  # fmt: skip
        summary += f"; {gpu_seconds:,.0f} GPU-seconds lost"
        if cost is not None:
            summary += f" ({cost:,.2f} cost)"
        if verdict.origin is not None:
            cause, confidence = verdict.origin.cause, round(verdict.origin.confidence, 3)
            labels["origin"] = verdict.origin.node
        else:
            cause, confidence = "unknown", 0.0
        fields = {
            "origin": origin_json(verdict.origin),
            "also": [origin_json(c) for c in verdict.also],
            "waiting": waiting,
            "waiting_count": len(waiting),
            "first_stalled": [c.node for c in verdict.first],
            "covered_by": cover,
            "job_nodes": all_nodes,
        }
        return summary, cause, confidence, fields


def _group_summary(
    where: str,
    cause: str,
    kind: str,
    *,
    nodes: int,
    gpus: int,
    offline: int,
    lost: tuple[float, float | None],
) -> str:
    """``leaf-7 swp12: PFC pause storm stalled 32 nodes / 256 GPUs; 8,192 GPU-seconds lost``."""
    verb = "stalled" if kind == "stall" else "slowed down"
    summary = (
        f"{where}: {CAUSE_TEXT.get(cause, cause)} {verb} {nodes} "
        f"node{'s' if nodes != 1 else ''} / {gpus} GPU{'s' if gpus != 1 else ''}"
    )
    if offline:
        summary += f" ({offline} offline)"
    summary += f"; {lost[0]:,.0f} GPU-seconds lost"
    if lost[1] is not None:
        summary += f" ({lost[1]:,.2f} cost)"
    return summary


def _culprit_labels(key: GroupKey, ports: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {key.kind: key.name}
    if ports:
        shown = ports[:_PORTS_SHOWN]
        more = len(ports) - len(shown)
        labels["ports"] = ",".join(shown) + (f",+{more}" if more else "")
    return labels


def _by_cause(members: Sequence[Tracked], node_names: Sequence[str]) -> dict[str, int]:
    """Nodes per cause (a node counts once per cause among its members)."""
    by_cause: Counter[str] = Counter()
    for name in node_names:
        by_cause.update({t.member.cause for t in members if t.member.node_name == name})
    return dict(sorted(by_cause.items()))


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
