"""The alerting outputs of one daemon, and their self metrics.

:class:`AlertingService` builds, from ``[alerting]`` and ``[mqtt]``, the
outbox on the incident database's connection, the router, the sender with one
worker per sink (the router wakes it when it enqueues), the MQTT publisher and
its job report sender (fed by the daemon's tick).
It installs nothing on the database: its owner makes :attr:`AlertingService.router`
the database's transition hook (``Daemon._attach_outputs``), so every
transition is enqueued in the transaction that records it. It has the shape
of a :class:`~fabricwatch.collector.Collector` (``name``, ``metrics``,
``collect``), but no supervisor runs it: the daemon's tick loop puts its
:meth:`AlertingService.collect` readings in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabricwatch.engine.db import IncidentDB
from fabricwatch.errors import ConfigError
from fabricwatch.outputs.jobreports import JobWorkSender
from fabricwatch.outputs.mqtt import MqttPublisher, MqttSink, publish_metrics
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, build_sender
from fabricwatch.outputs.settings import MQTT_SINK, AlertingSettings, MqttSettings
from fabricwatch.outputs.sinks import Route, Router
from fabricwatch.outputs.sinks.protocol import Sink
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.secrets import read_secret

ATTEMPTS = MetricSpec(
    "fabricwatch_alert_delivery_attempts",
    MetricKind.COUNTER,
    "Incident transitions handed to a sink (each retry counts again).",
    ("sink",),
)
DELIVERIES = MetricSpec(
    "fabricwatch_alert_deliveries",
    MetricKind.COUNTER,
    "Delivery attempt outcomes per transition: succeeded, failed (will retry), dead_lettered.",
    ("sink", "outcome"),
)
DEPTH = MetricSpec(
    "fabricwatch_alert_outbox_depth",
    MetricKind.GAUGE,
    "Transitions waiting in the outbox for a sink.",
    ("sink",),
)
OLDEST = MetricSpec(
    "fabricwatch_alert_outbox_oldest_age_seconds",
    MetricKind.GAUGE,
    "Age of the oldest undelivered transition of a sink (0 when none).",
    ("sink",),
)
DISABLED = MetricSpec(
    "fabricwatch_alert_sink_disabled",
    MetricKind.GAUGE,
    "1 when a receiver answered 410 Gone and the sink stopped until restart.",
    ("sink",),
)
MQTT_CONNECTED = MetricSpec(
    "fabricwatch_mqtt_connected",
    MetricKind.GAUGE,
    "1 while connected to the MQTT broker.",
)
MQTT_CONNECTS = MetricSpec(
    "fabricwatch_mqtt_connects",
    MetricKind.COUNTER,
    "Successful MQTT connections (reconnects included).",
)
MQTT_DROPPED = MetricSpec(
    "fabricwatch_mqtt_dropped_messages",
    MetricKind.COUNTER,
    "Summary, metric and job-report messages dropped because the disconnected buffer was full.",
)
METRICS: tuple[MetricSpec, ...] = (
    ATTEMPTS,
    DELIVERIES,
    DEPTH,
    OLDEST,
    DISABLED,
    MQTT_CONNECTED,
    MQTT_CONNECTS,
    MQTT_DROPPED,
)


def outbox_readings(
    sender: OutboxSender, outbox: Outbox, publisher: MqttPublisher | None, now: float
) -> list[Reading]:
    """Self-metric readings of the sender, the outbox and the MQTT publisher."""
    out: list[Reading] = []
    queues = outbox.queue_stats()
    for sink, st in sender.stats().items():
        out.append(Reading(ATTEMPTS.name, (sink,), float(st.attempted)))
        out.append(Reading(DELIVERIES.name, (sink, "succeeded"), float(st.succeeded)))
        out.append(Reading(DELIVERIES.name, (sink, "failed"), float(st.failed)))
        out.append(Reading(DELIVERIES.name, (sink, "dead_lettered"), float(st.dead)))
        q = queues.get(sink)
        out.append(Reading(DEPTH.name, (sink,), float(q.depth if q else 0)))
        oldest = q.oldest_created_at if q else None
        out.append(Reading(OLDEST.name, (sink,), max(0.0, now - oldest) if oldest else 0.0))
        out.append(Reading(DISABLED.name, (sink,), 1.0 if st.disabled else 0.0))
    if publisher is not None:
        out.append(Reading(MQTT_CONNECTED.name, (), 1.0 if publisher.connected else 0.0))
        out.append(Reading(MQTT_CONNECTS.name, (), float(publisher.stats.connects)))
        out.append(Reading(MQTT_DROPPED.name, (), float(publisher.stats.dropped)))
    return out


def secrets_fingerprint(alerting: AlertingSettings, mqtt: MqttSettings) -> str:
    """A digest of every secret file the outputs read, so a reload notices a
    rotated secret even when the config file itself did not change."""
    h = hashlib.sha256()
    files = [
        (f"alerting.sinks.{s.name}", f)
        for s in alerting.sinks
        for f in (s.routing_key_file, s.secret_file, s.bearer_token_file)
        if f
    ]
    if mqtt.password_file:
        files.append(("mqtt.password_file", mqtt.password_file))
    for key, path in files:
        try:
            value = read_secret(path, key=key) or ""
        except ConfigError as exc:
            value = f"<unreadable: {exc}>"
        h.update(key.encode() + b"\0" + value.encode() + b"\0")
    return h.hexdigest()


class AlertingService:
    """Outbox, router, sender and MQTT publisher of one daemon."""

    def __init__(
        self,
        alerting: AlertingSettings,
        mqtt: MqttSettings,
        db: IncidentDB,
        *,
        node: str,
        cluster: str,
        summary: Callable[[], Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.outbox = Outbox(db.connect(), clock=clock)
        self.publisher: MqttPublisher | None = None
        self.jobwork: JobWorkSender | None = None
        extra: list[tuple[Sink, Route]] = []
        if mqtt.enabled:
            password = (
                read_secret(mqtt.password_file, key="mqtt.password_file")
                if mqtt.password_file
                else None
            )
            self.publisher = MqttPublisher(mqtt, node=node, cluster=cluster, password=password)
            if mqtt.incidents:
                sink = MqttSink(
                    self.publisher, self.publisher.topics.incidents, timeout=mqtt.publish_timeout
                )
                # Every incident goes to the fleet; the aggregator decides what matters.
                extra.append((sink, Route(MQTT_SINK, min_severity="info")))
            if mqtt.jobwork:
                self.jobwork = JobWorkSender(self.publisher)
        built = build_sender(self.outbox, alerting, extra=extra, monotonic=monotonic, clock=clock)
        self.sender = built.sender
        self.router = Router(cluster, built.routes, clock=clock)
        self.router.set_listener(self.sender.wake)
        if self.publisher is not None:
            self.publisher.on_connect(lambda: self.sender.receiver_back(MQTT_SINK))
        self._summary = summary
        self._metrics_interval = mqtt.metrics_interval
        self._metrics_task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """Collector name of the self metrics."""
        return "alerting"

    def metrics(self) -> Sequence[MetricSpec]:
        """The self-metric families."""
        return METRICS

    async def start(self) -> None:
        """Connect MQTT (in the background) and start draining the outbox."""
        if self.publisher is not None:
            await self.publisher.start()
            if self._summary is not None and self._metrics_interval > 0:
                self._metrics_task = asyncio.create_task(
                    publish_metrics(self.publisher, self._summary, interval=self._metrics_interval),
                    name="mqtt-metrics",
                )
            if self.jobwork is not None:
                await self.jobwork.start()
        await self.sender.start()

    async def collect(self) -> Sequence[Reading]:
        """Self-metric readings."""
        return outbox_readings(self.sender, self.outbox, self.publisher, self._clock())

    async def close(self) -> None:
        """Stop the sender (pending rows stay), publish offline, disconnect."""
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metrics_task
        if self.jobwork is not None:
            await self.jobwork.close()
        await self.sender.close()
        if self.publisher is not None:
            await self.publisher.close()
