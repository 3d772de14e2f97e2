"""The fleet aggregator service: MQTT in, grouping, SQLite, outbox and HTTP out.

One replica runs one :class:`FleetAggregator`. Message flow::

    node .../<cluster>/<node>/incidents ──$share/<name>──► any one replica (ingest)
        parse, dedup on event_id, grouping key -> partition
        ──► retained  <prefix>/_fleet/<name>/p/<partition>/<cluster>/<node>/<key>/{o,r}
    partition owner (rendezvous hash over live replicas) subscribes p/<partition>/#
        grouper -> opened / updated / resolved
        SQLite (incident + outbox rows, one transaction) -> sinks (the node daemon's code)
        ──► retained  <prefix>/_fleet/<name>/groups/<cluster>/<group id>   (every replica)
    <prefix>/_fleet/<name>/replicas/<id>   retained online / offline (Will)
    <prefix>/<cluster>/<node>/status       every replica tracks node status

Member and group topics are retained, so a replica that starts, restarts or
takes over a partition rebuilds its state from the broker; announcements tell
a new owner what was already paged, so it continues the same incident instead
of paging again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sqlite3
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiomqtt
import structlog

from fabricwatch.errors import FabricwatchError, ParseError, StoreError
from fabricwatch.fleet import jobwork
from fabricwatch.fleet.api import FLEET_METRICS, FleetAPI
from fabricwatch.fleet.db import FleetDB
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.ledger import LEDGER_METRICS, Ledger
from fabricwatch.fleet.membership import Membership
from fabricwatch.fleet.model import (
    FleetTopics,
    GroupKey,
    member_from_json,
    member_to_json,
    parse_node_event,
    split_node_topic,
)
from fabricwatch.fleet.nccl import with_nccl
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.fleet.stragglers import LiveStragglers, StragglerTransition
from fabricwatch.fleet.transport import INFLIGHT, FleetTransport
from fabricwatch.outputs.alerting import METRICS as ALERT_METRICS
from fabricwatch.outputs.alerting import MQTT_CONNECTED, MQTT_CONNECTS, outbox_readings
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.outbox import Outbox, iso, settle_pending
from fabricwatch.outputs.sender import build_sender
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.outputs.sinks import Route, Router
from fabricwatch.outputs.web import WebServer
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.webconfig import WebConfig

log = structlog.get_logger("fabricwatch.fleet")

_DEDUP_MAX = 100_000
_SENDER_START_LIMIT = 30.0


class FleetAggregator:
    """One replica of the fleet aggregator."""

    def __init__(
        self,
        fleet: FleetSettings,
        mqtt: MqttSettings,
        alerting: AlertingSettings,
        *,
        state_dir: Path,
        web_config: WebConfig | None = None,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = fleet
        self.mqtt = mqtt
        self.replica = fleet.replica()
        self.topics = FleetTopics(mqtt.topic_prefix, fleet.name)
        self._wall = wall
        self._mono = monotonic
        self._web_config = web_config or WebConfig()
        self.db = FleetDB.in_dir(state_dir)
        self.grouper = Grouper(fleet, self.replica)
        self.outbox = Outbox(self.db.connect(), clock=wall)
        built = build_sender(self.outbox, alerting, monotonic=monotonic, clock=wall)
        self._routes: list[Route] = built.routes
        self.sender = built.sender
        self._routers: dict[str, Router] = {}
        # Every tick re-ingests every live series: one not refreshed for a few ticks
        # is gone (a resolved cause, an expired job), not left at its last value.
        self.store = SnapshotStore(history=2, stale_after=max(10.0, 20 * fleet.tick))
        self.store.register("fleet", FLEET_METRICS)
        self.store.register("ledger", LEDGER_METRICS)
        self.ledger = Ledger(job_expiry=fleet.job_expiry, cost_per_gpu_hour=fleet.cost_per_gpu_hour)
        # A restarted replica's badput still counts the GPU time reported before it.
        for cluster, kept in self.db.reports(since=wall() - fleet.job_expiry):
            self.ledger.observe(cluster, kept, wall())
        self._pruned_at = -math.inf
        self._unsaved: deque[tuple[str, jobwork.JobWork]] = deque(maxlen=100_000)
        self.stragglers = LiveStragglers(horizon=max(fleet.job_expiry, 600.0))
        self.store.register("alerting", ALERT_METRICS)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.transition_counts: Counter[str] = Counter()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._pending_announce: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending_jobs: list[tuple[str, str, dict[str, Any]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._publishes: set[asyncio.Task[None]] = set()
        self._inflight = asyncio.Semaphore(INFLIGHT)
        self._wake = asyncio.Event()
        self._closing = False
        self._sender_started = False
        self._started_at = monotonic()
        self.web: WebServer | None = None
        self.reload = ReloadStatus(successful=True, success_timestamp=wall())
        self.on_transition: Callable[[GroupTransition], None] | None = None
        self.membership = Membership(
            self.replica, fleet.partitions, self.grouper, self.topics,
            wall=wall, monotonic=monotonic,
        )  # fmt: skip
        self.transport = FleetTransport(
            mqtt, self.topics, name=fleet.name, replica=self.replica,
            clusters=fleet.clusters, on_message=self._dispatch,
            on_down=self.membership.disconnected,
        )  # fmt: skip
        self.api = FleetAPI(self)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, listen: tuple[str, int] | None = None) -> None:
        """Serve HTTP (when ``listen`` is given), connect MQTT, start ticking."""
        if listen is not None:
            registry = build_registry(self.store, list, self.reload)
            self.web = WebServer(registry, self.ready, self._web_config, self.api.routes())
            await self.web.start(*listen)
        self._tasks.append(asyncio.create_task(self.transport.run(), name="fleet-mqtt"))
        self._tasks.append(asyncio.create_task(self._tick_loop(), name="fleet-tick"))

    @property
    def closing(self) -> bool:
        """:meth:`close` has begun."""
        return self._closing

    def ready(self) -> bool:
        """Connected and owning its share of partitions."""
        return self.connected and self.membership.first_owned_at is not None

    @property
    def connected(self) -> bool:
        """Connected to the broker now."""
        return self.transport.connected.is_set()

    @property
    def connects(self) -> int:
        """Broker connections made so far."""
        return self.transport.connects

    def wall(self) -> float:
        """Wall-clock time now (the aggregator's clock)."""
        return self._wall()

    def live_replicas(self) -> list[str]:
        """Replicas seen online (this one included while connected)."""
        return self.membership.live(self.connected)

    def readings(self) -> list[Reading]:
        """Cluster-level and self metrics."""
        return self.api.readings()

    def status(self) -> dict[str, Any]:
        """Replica view: who is live, what this one owns, its open groups."""
        return self.api.status()

    async def wait_ready(self, within: float) -> bool:
        """Wait up to ``within`` seconds for :meth:`ready`."""
        deadline = self._mono() + within
        while not self.ready() and self._mono() < deadline:  # noqa: ASYNC110 - two conditions
            await asyncio.sleep(0.02)
        return self.ready()

    async def close(self) -> None:
        """Publish ``offline``, disconnect, stop the sender (pending rows stay)."""
        self._closing = True
        self.transport.stop()
        await self.transport.say_offline()
        pending = {*self._tasks, *self._publishes}
        for _ in range(5):
            # Python 3.11's wait_for can swallow a cancel that races with its inner
            # future (aiomqtt waits that way): cancel again until every task is done.
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=1.0)
            if not pending:
                break
        self._tasks.clear()
        await self.sender.close()
        if self.web is not None:
            await self.web.stop()
        self._keep_reports()
        self.db.close()

    # -- MQTT ---------------------------------------------------------------------

    def _count(self, topic: str, outcome: str) -> None:
        self.counts[(topic, outcome)] += 1

    async def _dispatch(self, client: aiomqtt.Client, msg: aiomqtt.Message) -> None:
        topic = msg.topic.value
        payload = msg.payload if isinstance(msg.payload, bytes | bytearray) else b""
        try:
            if topic.startswith(self.topics.base + "/"):
                await self._fleet_message(topic, bytes(payload))
            elif topic.endswith("/incidents"):
                await self._ingest(client, topic, bytes(payload))
            elif topic.endswith("/status"):
                self._status(topic, bytes(payload))
            elif topic.endswith("/jobwork"):
                self._jobwork(topic, bytes(payload))
        except ParseError as exc:
            log.warning("fleet_bad_message", topic=topic[:200], error=str(exc)[:300])
        except StoreError as exc:
            log.error("fleet_database_error", error=str(exc))

    async def _ingest(self, client: aiomqtt.Client, topic: str, payload: bytes) -> None:
        """Stage 1 (shared): a node's incident event -> its partition's retained topic."""
        try:
            ev = parse_node_event(
                payload,
                topic,
                prefix=self.mqtt.topic_prefix,
                max_bytes=self.settings.max_message_bytes,
            )
        except ParseError:
            self._count("incident", "invalid")
            raise
        if ev.event_id in self._seen:
            self._count("incident", "duplicate")
            return
        self._seen[ev.event_id] = None
        while len(self._seen) > _DEDUP_MAX:
            self._seen.popitem(last=False)
        m = ev.member
        p = self.grouper.partition(m.cluster, self.grouper.key_of(m))
        body = json.dumps(member_to_json(m), separators=(",", ":")).encode()
        # Not awaited inline: waiting for each PUBACK would cap ingest at one broker
        # round trip per event. The semaphore bounds what is in flight.
        await self._inflight.acquire()
        task = asyncio.create_task(self._republish(client, self.topics.member(p, m), body))
        self._publishes.add(task)
        task.add_done_callback(self._publishes.discard)
        self._count("incident", "accepted")

    async def _republish(self, client: aiomqtt.Client, topic: str, body: bytes) -> None:
        try:
            await client.publish(topic, body, qos=1, retain=True)
        except aiomqtt.MqttError as exc:
            # The connection dropped under it: the event is lost to the fleet (as one
            # arriving while no replica is connected would be); the loop reconnects.
            self._count("incident", "lost")
            log.warning("fleet_republish_failed", topic=topic, error=str(exc))
        finally:
            self._inflight.release()

    def _status(self, topic: str, payload: bytes) -> None:
        try:
            cluster, node = split_node_topic(topic, self.mqtt.topic_prefix, "status")
        except ParseError:
            self._count("status", "invalid")
            raise
        text = payload.strip().decode("utf-8", "replace")
        if text not in ("online", "offline"):
            self._count("status", "invalid")
            if not text:
                return  # a cleared retained status
            raise ParseError(f"status must be online or offline, got {text[:40]!r}", source=topic)
        self.grouper.on_status(cluster, node, text == "online", self._wall())
        self._count("status", "accepted")

    def _jobwork(self, topic: str, payload: bytes) -> None:
        """A node's job report: its jobs' GPU wall time (badput) and work (stragglers)."""
        try:
            cluster, _node = split_node_topic(topic, self.mqtt.topic_prefix, "jobwork")
            report = jobwork.parse(payload, source=topic, max_bytes=self.settings.max_message_bytes)
        except ParseError:
            self._count("jobwork", "invalid")
            raise
        fresh = self.ledger.observe(cluster, report, self._wall())
        if fresh:
            # Written once a tick in one transaction (_keep_reports), not one
            # fsync per message: a large fleet sends several reports a second.
            self._unsaved.append((cluster, report))
            self.stragglers.add(cluster, report)
            self._wake.set()
        self._count("jobwork", "accepted" if fresh else "duplicate")

    async def _fleet_message(self, topic: str, payload: bytes) -> None:
        t = self.topics
        rest = topic[len(t.base) + 1 :].split("/")
        if rest[0] == "replicas" and len(rest) == 2:
            text = payload.decode("utf-8", "replace")
            online = text == "online"
            self.membership.on_replica(rest[1], online)
            self._count("replica", "accepted")
        elif rest[0] == "groups" and len(rest) == 3:
            if not payload:
                self.grouper.on_announcement(rest[1], rest[2], None)
                return
            try:
                doc = json.loads(payload)
                if not isinstance(doc, dict) or "key" not in doc:
                    raise ValueError("not a cluster incident")
            except ValueError as exc:
                self._count("group", "invalid")
                raise ParseError(f"bad announcement: {exc}", source=topic) from None
            self.grouper.on_announcement(rest[1], rest[2], doc)
            self.db.remember(doc)
            self.ledger.apply(doc, self._wall())
            self._count("group", "accepted")
        elif rest[0] == "p":
            if not payload:
                return  # our own (or a peer's) clear
            try:
                m = member_from_json(payload, source=topic)
            except ParseError:
                self._count("member", "invalid")
                raise
            owned = self.grouper.on_member(m, self._wall())
            self._wake.set()
            self._count("member", "accepted" if owned else "not_owned")

    # -- ticking ---------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while not self._closing:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except aiomqtt.MqttError as exc:
                log.warning("fleet_publish_failed", error=str(exc))
            except (FabricwatchError, sqlite3.Error) as exc:
                log.error("fleet_tick_failed", error=str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug must not stop paging for good
                log.error("fleet_tick_error", error=f"{type(exc).__name__}: {exc}")
            # Woken early when members arrive, so a page does not wait a whole tick;
            # never more often than every 10 ms however fast messages come.
            await asyncio.sleep(min(0.01, self.settings.tick))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.tick)
            self._wake.clear()

    async def _tick(self) -> None:
        now = self._wall()
        client = self.transport.client
        if client is not None and self.membership.dirty and self.connected:
            await self.membership.apply(client)
        await self._maybe_start_sender()
        transitions = self.grouper.tick(now)
        while self.grouper.adopted:
            self._adopt(self.grouper.adopted.pop(0), now)
        for tr in transitions:
            self._record(tr)
        for st in self.stragglers.tick(now):
            self._record_straggler(st)
        if client is not None and self.connected:
            await self._publish_pending(client)
        self._ingest_metrics()

    def _router(self, cluster: str) -> Router:
        r = self._routers.get(cluster)
        if r is None:
            r = Router(cluster, self._routes, clock=self._wall)
            r.set_listener(self.sender.wake)
            self._routers[cluster] = r
        return r

    def _record(self, tr: GroupTransition, *, announce: bool = True) -> None:
        router = self._router(tr.cluster)
        if tr.doc.get("group", {}).get("kind") == "job":
            # NCCL evidence from the nodes' job reports, the same function as fleet replay.
            tr.doc.update(with_nccl(tr.doc, self._job_reports(tr.cluster)))
        self.ledger.apply(tr.doc, tr.at)
        if tr.doc.get("group", {}).get("kind") == "job":
            # The job's ledger entry rides along: webhooks and MQTT followers get the
            # incident and what the job has lost so far in one message.
            entries = self.ledger.entries(cluster=tr.cluster, job=str(tr.doc["job"]))
            tr.doc["ledger"] = dict(entries[0]) if entries else None
        # A job incident covered by a switch/storage/NVLink incident is recorded and
        # announced, not paged: that incident's page is the one page for the fault.
        paged = tr.doc.get("paged") is not False
        self.db.record(
            tr.kind,
            tr.at,
            tr.doc,
            (lambda conn: router.route(conn, tr.kind, tr.at, tr.doc)) if paged else None,
        )
        self.transition_counts[tr.kind] += 1
        if announce:
            self._pending_announce[(tr.cluster, tr.topic_id)] = tr.doc
        if tr.doc.get("group", {}).get("kind") == "job":
            job = str(tr.doc["job"])
            self._pending_jobs.append((tr.cluster, job, job_event(tr.kind, tr.at, tr.doc)))
        log.info(
            f"cluster_incident_{tr.kind}",
            incident=tr.doc["key"],
            cluster=tr.cluster,
            group=tr.doc["culprit"]["key"],
            cause=tr.doc["cause"],
            nodes=tr.doc.get("node_count"),
            gpus=tr.doc.get("gpu_count"),
            summary=tr.doc["summary"],
            revision=tr.doc["revision"],
        )
        if self.on_transition is not None:
            self.on_transition(tr)

    def _job_reports(self, cluster: str) -> dict[str, list[jobwork.JobWork]]:
        """The job reports of a cluster's nodes this replica holds (node -> reports)."""
        return {n: rs for (c, n), rs in self.stragglers.reports.items() if c == cluster}

    def _record_straggler(self, st: StragglerTransition) -> None:
        """Record and page a straggler incident of a job this replica owns (every replica
        detects every job, so one that takes a job over continues its incident)."""
        p = self.grouper.partition(st.cluster, GroupKey("job", st.job))
        if p not in self.grouper.owned:
            return
        doc = dict(st.doc, owner=self.replica, partition=p)
        tid = str(doc["group"]["id"])
        self._record(GroupTransition(st.kind, st.at, st.cluster, tid, p, doc), announce=False)

    def _adopt(self, doc: Mapping[str, Any], now: float) -> None:
        """Take over a peer's open incident: record that its sinks were told (by the
        peer), so this replica sends them the updates and the resolve, not the open."""
        cluster = str(doc.get("cluster", ""))
        router = self._router(cluster)
        transition = str(doc.get("transition") or "opened")
        peer = str(doc.get("owner", "?"))

        def told(conn: sqlite3.Connection) -> None:
            if doc.get("paged") is False:
                return
            router.route(conn, transition, now, doc)
            settle_pending(
                conn,
                str(doc["key"]),
                up_to_revision=int(doc["revision"]),
                now=now,
                reason=f"delivered by peer replica {peer}",
            )

        self.db.record("adopted", now, doc, told)
        log.info(
            "cluster_incident_adopted", incident=doc["key"], peer=peer, revision=doc["revision"]
        )

    async def _publish_pending(self, client: aiomqtt.Client) -> None:
        t = self.topics
        for (cluster, tid), doc in list(self._pending_announce.items()):
            body = json.dumps(doc, separators=(",", ":")).encode()
            await client.publish(t.group(cluster, tid), body, qos=1, retain=True)
            del self._pending_announce[(cluster, tid)]
        # In order, every transition: a follower sees each one, the retained message
        # is the latest.
        while self._pending_jobs:
            cluster, job, ev = self._pending_jobs[0]
            body = json.dumps(ev, separators=(",", ":")).encode()
            await client.publish(t.job(cluster, job), body, qos=1, retain=True)
            self._pending_jobs.pop(0)
        while self.grouper.clears:
            c = self.grouper.clears[0]
            for topic in t.member_topics(c.partition, c.member):
                await client.publish(topic, b"", qos=1, retain=True)
            self.grouper.clears.pop(0)
        while self.grouper.clear_groups:
            cluster, tid = self.grouper.clear_groups[0]
            await client.publish(t.group(cluster, tid), b"", qos=1, retain=True)
            self.grouper.clear_groups.pop(0)

    async def _maybe_start_sender(self) -> None:
        """Start delivering once this replica knows what its peers already paged."""
        if self._sender_started:
            return
        first = self.membership.first_owned_at
        settled = first is not None and self._mono() - first >= self.settings.handover_delay
        if not settled and self._mono() - self._started_at < _SENDER_START_LIMIT:
            return
        self._supersede()
        self._sender_started = True
        await self.sender.start()

    def _supersede(self) -> None:
        """Pending rows of incidents a peer has since announced at the same or a later
        revision were handled by that peer (this replica died, it took over)."""
        by_key = {
            str(doc.get("key")): doc
            for doc in self.grouper.announced.values()
            if doc.get("owner") != self.replica
        }
        rows = self.outbox.rows(state="pending")
        stale = {
            d.incident_key
            for d in rows
            if d.incident_key in by_key and int(by_key[d.incident_key]["revision"]) >= d.revision
        }
        if stale:
            settled = 0
            with self.outbox.transaction() as conn:
                for key in sorted(stale):
                    settled += settle_pending(
                        conn,
                        key,
                        up_to_revision=int(by_key[key]["revision"]),
                        now=self._wall(),
                        reason="superseded: a peer replica took over",
                    )
            log.info("fleet_outbox_superseded", rows=settled)

    # -- metrics ---------------------------------------------------------------

    def _keep_reports(self) -> None:
        """Write the job reports received since the last tick (kept in memory, at
        most 100,000, while the database refuses them)."""
        if not self._unsaved:
            return
        try:
            self.db.add_reports(list(self._unsaved))
        except StoreError as exc:
            # The live ledger has them; only a later `incidents --by job --fleet`
            # or a restart would miss their GPU time if they are never written.
            log.warning("fleet.jobwork_not_kept", error=str(exc), pending=len(self._unsaved))
            return
        self._unsaved.clear()

    def _ingest_metrics(self) -> None:
        now = self._mono()
        self.store.ingest("fleet", self.readings(), now)
        alert = outbox_readings(self.sender, self.outbox, None, self._wall())
        alert.append(Reading(MQTT_CONNECTED.name, (), 1.0 if self.connected else 0.0))
        alert.append(Reading(MQTT_CONNECTS.name, (), float(self.connects)))
        self.store.ingest("alerting", alert, now)
        wall = self._wall()
        self.ledger.expire(wall)
        self._keep_reports()
        if wall - self._pruned_at >= 3600.0:
            # Resolved incidents and job reports past the retention, once an hour.
            self._pruned_at = wall
            try:
                self.db.prune(wall)
            except (StoreError, sqlite3.DatabaseError) as exc:
                log.warning("fleet.prune_failed", error=str(exc))
        self.store.ingest("ledger", self.ledger.readings(), now)
        self.store.expire(now)


JOB_EVENT_SCHEMA = "fabricwatch.job-event/v1"


def job_event(transition: str, at: float, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The retained message on ``.../_fleet/<name>/jobs/<cluster>/<job>``: the job's
    latest job incident (paged or covered) and its ledger entry (``doc["ledger"]``)."""
    return {
        "schema": JOB_EVENT_SCHEMA,
        "type": f"job_incident.{transition}",
        "timestamp": iso(at),
        "cluster": doc.get("cluster"),
        "job": doc.get("job"),
        "incident": dict(doc),
        "ledger": doc.get("ledger"),
    }


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` -> (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - the operator's choice


__all__: Sequence[str] = ("FleetAggregator", "listen_address")
