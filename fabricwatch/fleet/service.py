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
import random
import sqlite3
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiomqtt
import structlog
from aiohttp import web

from fabricwatch.errors import FabricwatchError, ParseError, StoreError
from fabricwatch.fleet.db import FleetDB
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.ledger import LEDGER_METRICS, Ledger
from fabricwatch.fleet.model import (
    FleetTopics,
    member_from_json,
    member_to_json,
    owner_of,
    parse_node_event,
    split_node_topic,
)
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.outputs.alerting import METRICS as ALERT_METRICS
from fabricwatch.outputs.alerting import MQTT_CONNECTED, MQTT_CONNECTS, outbox_readings
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.mqtt import tls_context, topic_segment
from fabricwatch.outputs.outbox import Outbox, iso, settle_pending
from fabricwatch.outputs.sender import build_sender
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.outputs.sinks import Route, Router
from fabricwatch.outputs.web import Route as WebRoute
from fabricwatch.outputs.web import WebServer
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.secrets import read_secret
from fabricwatch.settings import parse_duration
from fabricwatch.store import SnapshotStore
from fabricwatch.webconfig import WebConfig

log = structlog.get_logger("fabricwatch.fleet")

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
_DEDUP_MAX = 100_000
_SENDER_START_LIMIT = 30.0
_INFLIGHT = 256


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
        self._password = (
            read_secret(mqtt.password_file, key="mqtt.password_file")
            if mqtt.password_file
            else None
        )
        self._tls = tls_context(mqtt)
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
        self.store.register("alerting", ALERT_METRICS)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.transition_counts: Counter[str] = Counter()
        self.replicas: dict[str, bool] = {}
        self._ring_dirty = True
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
        self._subscribed: set[int] = set()
        self._pending_announce: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending_jobs: list[tuple[str, str, dict[str, Any]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._publishes: set[asyncio.Task[None]] = set()
        self._inflight = asyncio.Semaphore(_INFLIGHT)
        self._wake = asyncio.Event()
        self._closing = False
        self._sender_started = False
        self._started_at = monotonic()
        self._first_owned_at: float | None = None
        self._rng = random.Random()  # noqa: S311 - reconnect jitter
        self.connects = 0
        self.web: WebServer | None = None
        self.reload = ReloadStatus(successful=True, success_timestamp=wall())
        self.on_transition: Callable[[GroupTransition], None] | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, listen: tuple[str, int] | None = None) -> None:
        """Serve HTTP (when ``listen`` is given), connect MQTT, start ticking."""
        if listen is not None:
            registry = build_registry(self.store, list, self.reload)
            routes = [
                WebRoute("/api/v1/incidents", self._api_incidents, "cluster incidents (JSON)"),
                WebRoute("/api/v1/nodes", self._api_nodes, "node status (JSON)"),
                WebRoute("/api/v1/replicas", self._api_replicas, "replicas and partitions (JSON)"),
                WebRoute("/api/v1/jobs", self._api_jobs, "per-job ledger of lost GPU-hours (JSON)"),
            ]
            self.web = WebServer(registry, self.ready, self._web_config, routes)
            await self.web.start(*listen)
        self._tasks.append(asyncio.create_task(self._mqtt_loop(), name="fleet-mqtt"))
        self._tasks.append(asyncio.create_task(self._tick_loop(), name="fleet-tick"))

    @property
    def closing(self) -> bool:
        """:meth:`close` has begun."""
        return self._closing

    def ready(self) -> bool:
        """Connected and owning its share of partitions."""
        return self._connected.is_set() and self._first_owned_at is not None

    async def wait_ready(self, within: float) -> bool:
        """Wait up to ``within`` seconds for :meth:`ready`."""
        deadline = self._mono() + within
        while not self.ready() and self._mono() < deadline:  # noqa: ASYNC110 - two conditions
            await asyncio.sleep(0.02)
        return self.ready()

    async def close(self) -> None:
        """Publish ``offline``, disconnect, stop the sender (pending rows stay)."""
        self._closing = True
        client = self._client
        if client is not None and self._connected.is_set():
            with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                await asyncio.wait_for(
                    client.publish(
                        self.topics.replica(self.replica), b"offline", qos=1, retain=True
                    ),
                    5.0,
                )
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
        self.db.close()

    # -- MQTT ---------------------------------------------------------------------

    def _client_for(self) -> aiomqtt.Client:
        m = self.mqtt
        return aiomqtt.Client(
            m.host,
            m.effective_port(),
            identifier=f"fabricwatch-fleet-{self.settings.name}-{self.replica}",
            username=m.username or None,
            password=self._password,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(self.topics.replica(self.replica), b"offline", qos=1, retain=True),
            keepalive=max(1, round(m.keepalive)),
            timeout=m.publish_timeout,
            clean_start=True,
            tls_context=self._tls,
        )

    async def _mqtt_loop(self) -> None:
        failures = 0
        while not self._closing:
            try:
                client = self._client_for()
                # Hundreds of publishes in flight are normal here, not a warning.
                client.pending_calls_threshold = 10 * _INFLIGHT
                async with client:
                    await self._on_connect(client)
                    failures = 0
                    async for msg in client.messages:
                        await self._dispatch(client, msg)
                        if self.closing:
                            break
            except aiomqtt.MqttError as exc:
                log.warning("fleet_mqtt_disconnected", error=str(exc), attempt=failures + 1)
            finally:
                self._client = None
                self._connected.clear()
                self._subscribed.clear()
                # Without the broker this replica cannot know who owns what: stop paging
                # until it has reconnected and re-read the retained state.
                self.grouper.set_owned((), self._wall())
                self._ring_dirty = True
            failures += 1
            base = min(self.mqtt.reconnect_max, self.mqtt.reconnect_initial * 2.0 ** (failures - 1))
            await asyncio.sleep(base / 2.0 + self._rng.uniform(0.0, base / 2.0))

    async def _on_connect(self, client: aiomqtt.Client) -> None:
        t = self.topics
        await client.publish(t.replica(self.replica), b"online", qos=1, retain=True)
        clusters = [topic_segment(c) for c in self.settings.clusters] or ["+"]
        # Replicas and announcements first: their retained state arrives before any
        # member, so ownership and "already paged" are known when members come in.
        await client.subscribe([(t.replicas_filter, 1), (t.groups_filter, 1)])
        await client.subscribe([(t.status_filter(c), 1) for c in clusters])
        await client.subscribe([(t.incidents_filter(c), 1) for c in clusters])
        self._client = client
        self.connects += 1
        self._connected.set()
        self._ring_dirty = True
        log.info("fleet_connected", replica=self.replica, host=self.mqtt.host)

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

    async def _fleet_message(self, topic: str, payload: bytes) -> None:
        t = self.topics
        rest = topic[len(t.base) + 1 :].split("/")
        if rest[0] == "replicas" and len(rest) == 2:
            text = payload.decode("utf-8", "replace")
            online = text == "online"
            if self.replicas.get(rest[1]) != online:
                self.replicas[rest[1]] = online
                self._ring_dirty = True
                log.info("fleet_replica", replica=rest[1], online=online)
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

    # -- ownership -------------------------------------------------------------

    def live_replicas(self) -> list[str]:
        """Replicas seen online (this one included while connected)."""
        live = {r for r, up in self.replicas.items() if up}
        if self._connected.is_set():
            live.add(self.replica)
        return sorted(live)

    async def _apply_ring(self, client: aiomqtt.Client) -> None:
        self._ring_dirty = False
        live = self.live_replicas()
        want = {p for p in range(self.settings.partitions) if owner_of(p, live) == self.replica}
        gained, lost = self.grouper.set_owned(want, self._wall())
        t = self.topics
        if lost:
            for p in sorted(lost):
                await client.unsubscribe(t.partition_filter(p))
                self._subscribed.discard(p)
        if gained:
            await client.subscribe([(t.partition_filter(p), 1) for p in sorted(gained)])
            self._subscribed |= gained
        if gained or lost:
            log.info(
                "fleet_partitions",
                replica=self.replica,
                live=live,
                owned=len(want),
                gained=len(gained),
                lost=len(lost),
            )
        if self._first_owned_at is None:
            self._first_owned_at = self._mono()

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
        client = self._client
        if client is not None and self._ring_dirty and self._connected.is_set():
            await self._apply_ring(client)
        await self._maybe_start_sender()
        transitions = self.grouper.tick(now)
        while self.grouper.adopted:
            self._adopt(self.grouper.adopted.pop(0), now)
        for tr in transitions:
            self._record(tr)
        if client is not None and self._connected.is_set():
            await self._publish_pending(client)
        self._ingest_metrics()

    def _router(self, cluster: str) -> Router:
        r = self._routers.get(cluster)
        if r is None:
            r = Router(cluster, self._routes, clock=self._wall)
            r.set_listener(self.sender.wake)
            self._routers[cluster] = r
        return r

    def _record(self, tr: GroupTransition) -> None:
        router = self._router(tr.cluster)
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
        self.ledger.apply(tr.doc, tr.at)
        self._pending_announce[(tr.cluster, tr.topic_id)] = tr.doc
        if tr.doc.get("group", {}).get("kind") == "job":
            job = str(tr.doc["job"])
            entries = self.ledger.entries(cluster=tr.cluster, job=job)
            self._pending_jobs.append((tr.cluster, job, job_event(tr.kind, tr.at, tr.doc, entries)))
        log.info(
            f"cluster_incident_{tr.kind}",
            incident=tr.doc["key"],
            cluster=tr.cluster,
            group=tr.doc["culprit"]["key"],
            cause=tr.doc["cause"],
            nodes=tr.doc["node_count"],
            gpus=tr.doc["gpu_count"],
            summary=tr.doc["summary"],
            revision=tr.doc["revision"],
        )
        if self.on_transition is not None:
            self.on_transition(tr)

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
        first = self._first_owned_at
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

    # -- metrics and API -----------------------------------------------------------

    def readings(self) -> list[Reading]:
        """Cluster-level and self metrics."""
        out: list[Reading] = []
        open_: Counter[tuple[str, str]] = Counter()
        nodes: Counter[tuple[str, str]] = Counter()
        gpus: Counter[tuple[str, str]] = Counter()
        lost: dict[tuple[str, str], float] = {}
        for g in self.grouper.groups.values():
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
        for (cluster, _node), st in self.grouper.nodes.items():
            status[(cluster, "online" if st.online else "offline")] += 1
        out.extend(Reading(NODES.name, k, float(v)) for k, v in sorted(status.items()))
        out.append(Reading(REPLICAS.name, (), float(len(self.live_replicas()))))
        out.append(Reading(PARTITIONS.name, (), float(len(self.grouper.owned))))
        out.extend(Reading(MESSAGES.name, k, float(v)) for k, v in sorted(self.counts.items()))
        out.extend(
            Reading(TRANSITIONS.name, (k,), float(v))
            for k, v in sorted(self.transition_counts.items())
        )
        return out

    def _ingest_metrics(self) -> None:
        now = self._mono()
        self.store.ingest("fleet", self.readings(), now)
        alert = outbox_readings(self.sender, self.outbox, None, self._wall())
        alert.append(Reading(MQTT_CONNECTED.name, (), 1.0 if self._connected.is_set() else 0.0))
        alert.append(Reading(MQTT_CONNECTS.name, (), float(self.connects)))
        self.store.ingest("alerting", alert, now)
        self.ledger.expire(self._wall())
        self.store.ingest("ledger", self.ledger.readings(), now)
        self.store.expire(now)

    async def _api_incidents(self, request: web.Request) -> web.Response:
        """``GET /api/v1/incidents?state=open&since=1h&cluster=prod&limit=100``."""
        q = request.query
        try:
            since = self._wall() - parse_duration(q["since"]) if "since" in q else None
            limit = max(1, min(int(q.get("limit", "1000")), 10_000))
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        state = q.get("state")
        if state not in (None, "open", "resolved"):
            return web.json_response({"error": "state must be open or resolved"}, status=400)
        docs = self.db.incidents(since=since, state=state, cluster=q.get("cluster"), limit=limit)
        return web.json_response(
            {
                "schema": "fabricwatch.cluster-incidents/v1",
                "replica": self.replica,
                "incidents": docs,
            }
        )

    async def _api_jobs(self, request: web.Request) -> web.Response:
        """``GET /api/v1/jobs?cluster=prod&job=slurm:8812``: the job ledger; with ``job``,
        that job's job incidents too (origin, cause, waiting nodes)."""
        q = request.query
        job = q.get("job")
        entries = self.ledger.entries(cluster=q.get("cluster"), job=job)
        body: dict[str, Any] = {
            "schema": "fabricwatch.job-ledgers/v1",
            "replica": self.replica,
            "jobs": entries,
        }
        if job is not None:
            docs = self.db.incidents(cluster=q.get("cluster"), limit=10_000)
            body["incidents"] = [
                d for d in docs if d.get("group", {}).get("kind") == "job" and d.get("job") == job
            ]
        return web.json_response(body)

    async def _api_nodes(self, _request: web.Request) -> web.Response:
        nodes = [
            {"cluster": c, "node": n, "online": st.online, "since": st.since}
            for (c, n), st in sorted(self.grouper.nodes.items())
        ]
        return web.json_response({"schema": "fabricwatch.fleet-nodes/v1", "nodes": nodes})

    async def _api_replicas(self, _request: web.Request) -> web.Response:
        return web.json_response(self.status())

    def status(self) -> dict[str, Any]:
        """Replica view: who is live, what this one owns, its open groups."""
        return {
            "schema": "fabricwatch.fleet-replica/v1",
            "replica": self.replica,
            "connected": self._connected.is_set(),
            "live": self.live_replicas(),
            "partitions": sorted(self.grouper.owned),
            "open": sorted(
                str(g.incident_key) for g in self.grouper.groups.values() if g.state == "open"
            ),
        }


JOB_EVENT_SCHEMA = "fabricwatch.job-event/v1"


def job_event(
    transition: str, at: float, doc: Mapping[str, Any], ledger: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The retained message on ``.../_fleet/<name>/jobs/<cluster>/<job>``: the job's
    latest job incident (paged or covered) and its ledger entry."""
    return {
        "schema": JOB_EVENT_SCHEMA,
        "type": f"job_incident.{transition}",
        "timestamp": iso(at),
        "cluster": doc.get("cluster"),
        "job": doc.get("job"),
        "incident": dict(doc),
        "ledger": dict(ledger[0]) if ledger else None,
    }


def summarize_counts(counts: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """``{"incident/accepted": 3, ...}`` for logs and benchmarks."""
    return {f"{t}/{o}": n for (t, o), n in sorted(counts.items())}


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` -> (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - the operator's choice


__all__: Sequence[str] = ("FLEET_METRICS", "FleetAggregator", "listen_address")
