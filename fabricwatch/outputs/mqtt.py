"""MQTT publishing with aiomqtt 2.x, behind a small :class:`Publisher` protocol.

Topics (segments lower-cased to ``[a-z0-9_-]``)::

    <prefix>/<cluster>/<node>/status      "online" / "offline", QoS 1, retained;
                                          "offline" is also the Last Will, so a
                                          node that dies reads offline.
    <prefix>/<cluster>/<node>/incidents   incident events, QoS 1, not retained,
                                          published by the outbox (none is lost
                                          while the broker is away); consumers
                                          deduplicate on ``event_id``.
    <prefix>/<cluster>/<node>/metrics     optional summary, QoS 0, not retained.
    <prefix>/<cluster>/<node>/jobwork     one job report per fleet window
                                          (``fabricwatch.node-jobwork/v1``),
                                          QoS 1, not retained.

The connection loop is ours (aiomqtt does not reconnect): connect with the
Will set, publish ``online``, wait for the connection to drop, back off with
jitter, reconnect. On a clean shutdown ``offline`` is published before the
disconnect, because a clean disconnect does not fire the Will. While
disconnected the summary and job reports are buffered up to ``buffer``
messages in all (oldest dropped), each re-sent at its own QoS on reconnect;
incident messages wait in the outbox instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import re
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

from fabricwatch.errors import ConfigError, DeliveryError
from fabricwatch.outputs.outbox import Delivery, iso
from fabricwatch.outputs.settings import MQTT_SINK, MqttSettings
from fabricwatch.outputs.sinks.protocol import SinkError

if TYPE_CHECKING:
    # aiomqtt (and paho-mqtt under it) is imported by the publisher when it connects:
    # [mqtt] is off by default and the daemon should not pay for it (issue #19).
    import aiomqtt

log = structlog.get_logger("fabricwatch.mqtt")

SUMMARY_SCHEMA = "fabricwatch.metrics-summary/v1"
_SEGMENT_BAD = re.compile(r"[^a-z0-9_-]+")


def topic_segment(text: str) -> str:
    """A name as one topic segment: lower case, ``[a-z0-9_-]``, never empty."""
    seg = _SEGMENT_BAD.sub("-", text.lower()).strip("-")
    return seg or "_"


def default_client_id(cluster: str, node: str) -> str:
    """``fabricwatch-<node segment>-<hash>``: readable, and distinct for names that
    share a segment (``gpu.1`` and ``gpu:1``), which would otherwise kick each other
    off the broker (MQTT allows one session per client id)."""
    digest = hashlib.sha256(f"{cluster}\0{node}".encode()).hexdigest()[:8]
    return f"fabricwatch-{topic_segment(node)[:40]}-{digest}"


@dataclass(frozen=True, slots=True)
class Topics:
    """The topics of one node."""

    status: str
    incidents: str
    metrics: str
    jobwork: str

    @classmethod
    def for_node(cls, prefix: str, cluster: str, node: str) -> Topics:
        """``<prefix>/<cluster>/<node>/...``."""
        base = f"{prefix.strip('/')}/{topic_segment(cluster)}/{topic_segment(node)}"
        return cls(f"{base}/status", f"{base}/incidents", f"{base}/metrics", f"{base}/jobwork")


@runtime_checkable
class Publisher(Protocol):
    """What the outputs need from an MQTT client."""

    @property
    def connected(self) -> bool:
        """Whether a publish can be attempted now."""
        ...

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 0, retain: bool = False
    ) -> None:
        """Publish; for QoS 1 return once the broker acknowledged. Raise DeliveryError."""
        ...


def tls_context(settings: MqttSettings) -> ssl.SSLContext | None:
    """The client TLS context of ``settings`` (None without TLS)."""
    if not settings.tls:
        return None
    try:
        ctx = ssl.create_default_context(cafile=settings.ca_file or None)
        if settings.cert_file:
            ctx.load_cert_chain(settings.cert_file, settings.key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS files: {exc}", key="mqtt") from None
    if settings.tls_insecure:
        ctx.check_hostname = False
    return ctx


@dataclass(slots=True)
class MqttStats:
    """Counters since start (self metrics)."""

    connects: int = 0
    connect_failures: int = 0
    published: int = 0
    publish_failures: int = 0
    dropped: int = 0


class MqttPublisher:
    """An aiomqtt client with status/Will, reconnect and a bounded disconnected buffer."""

    def __init__(
        self,
        settings: MqttSettings,
        *,
        node: str,
        cluster: str,
        password: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.topics = Topics.for_node(settings.topic_prefix, cluster, node)
        self.client_id = settings.client_id or default_client_id(cluster, node)
        self._password = password
        self._tls = tls_context(settings)
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._buffer: deque[tuple[str, bytes, int]] = deque(maxlen=max(1, settings.buffer))
        self._listeners: list[Callable[[], None]] = []
        self._closing = False
        self.stats = MqttStats()
        self.last_error = ""

    @property
    def connected(self) -> bool:
        """Connected and ``online`` published."""
        return self._connected.is_set() and self._client is not None

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each (re)connection (e.g. to drain the outbox now)."""
        self._listeners.append(callback)

    async def start(self) -> None:
        """Start the connection loop (returns at once; the broker may be down)."""
        if self._task is None:
            self._closing = False
            self._task = asyncio.create_task(self._run(), name="mqtt")

    async def wait_connected(self, within: float) -> bool:
        """Wait up to ``within`` seconds for a connection."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), within)
        return self.connected

    def _make_client(self) -> aiomqtt.Client:
        import aiomqtt

        s = self.settings
        return aiomqtt.Client(
            s.host,
            s.effective_port(),
            identifier=self.client_id,
            username=s.username or None,
            password=self._password,
            will=aiomqtt.Will(self.topics.status, b"offline", qos=1, retain=True),
            keepalive=max(1, round(s.keepalive)),
            timeout=s.publish_timeout,
            clean_session=True,
            tls_context=self._tls,
        )

    async def _run(self) -> None:
        import aiomqtt

        failures = 0
        while not self._closing:
            try:
                async with self._make_client() as client:
                    await client.publish(self.topics.status, b"online", qos=1, retain=True)
                    self._client = client
                    self._connected.set()
                    self.stats.connects += 1
                    failures = 0
                    log.info("mqtt_connected", host=self.settings.host, client_id=self.client_id)
                    await self._flush(client)
                    for cb in self._listeners:
                        cb()
                    # No subscriptions: the iterator only ends when the connection drops.
                    async for _ in client.messages:
                        pass
            except aiomqtt.MqttError as exc:
                self.last_error = str(exc)
                if self._connected.is_set():
                    log.warning("mqtt_disconnected", error=str(exc))
                else:
                    self.stats.connect_failures += 1
                    log.warning("mqtt_connect_failed", error=str(exc), attempt=failures + 1)
            finally:
                self._connected.clear()
                self._client = None
            failures += 1
            base = min(
                self.settings.reconnect_max,
                self.settings.reconnect_initial * 2.0 ** (failures - 1),
            )
            await asyncio.sleep(base / 2.0 + self._rng.uniform(0.0, base / 2.0))

    async def _flush(self, client: aiomqtt.Client) -> None:
        while self._buffer:
            topic, payload, qos = self._buffer[0]
            await client.publish(topic, payload, qos=qos, timeout=self.settings.publish_timeout)
            self._buffer.popleft()
            self.stats.published += 1

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 0, retain: bool = False
    ) -> None:
        """Publish now; raise :class:`DeliveryError` when disconnected or unacknowledged."""
        client = self._client
        if client is None or not self._connected.is_set():
            self.stats.publish_failures += 1
            raise DeliveryError(f"MQTT not connected ({self.last_error or 'connecting'})")
        import aiomqtt  # loaded already: a client exists (see _make_client)

        try:
            await client.publish(
                topic, payload, qos=qos, retain=retain, timeout=self.settings.publish_timeout
            )
        except aiomqtt.MqttError as exc:
            self.stats.publish_failures += 1
            raise DeliveryError(f"MQTT publish failed: {exc}") from None
        self.stats.published += 1

    async def publish_or_buffer(self, topic: str, payload: bytes, *, qos: int = 0) -> None:
        """Publish if connected (for QoS 1 up to ``publish_timeout`` for the PUBACK),
        else keep the newest ``buffer`` messages for the next connection."""
        if self.connected:
            with contextlib.suppress(DeliveryError):
                await self.publish(topic, payload, qos=qos)
                return
        if len(self._buffer) == self._buffer.maxlen:
            self.stats.dropped += 1
        self._buffer.append((topic, payload, qos))

    async def close(self) -> None:
        """Publish ``offline`` (retained), disconnect cleanly, stop reconnecting."""
        self._closing = True
        if self.connected:
            try:
                await asyncio.wait_for(
                    self.publish(self.topics.status, b"offline", qos=1, retain=True), 5.0
                )
            except (DeliveryError, TimeoutError) as exc:
                log.warning("mqtt_offline_not_published", error=str(exc))
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class MqttSink:
    """The outbox sink that publishes incident events on ``.../incidents`` at QoS 1."""

    def __init__(self, publisher: Publisher, topic: str, *, timeout: float = 10.0) -> None:
        self._pub = publisher
        self._topic = topic
        self._timeout = timeout

    @property
    def name(self) -> str:
        """The reserved sink name ``mqtt``."""
        return MQTT_SINK

    @property
    def max_batch(self) -> int:
        """One incident event per message."""
        return 1

    @property
    def timeout(self) -> float:
        """PUBACK wait."""
        return self._timeout

    async def start(self) -> None:
        """The publisher is started by its owner."""

    async def close(self) -> None:
        """The publisher is closed by its owner."""

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Publish each event; the outbox retries while the broker is away."""
        for d in batch:
            if not self._pub.connected:
                raise SinkError("MQTT broker not connected")
            try:
                await self._pub.publish(self._topic, d.body(), qos=1, retain=False)
            except DeliveryError as exc:
                raise SinkError(str(exc)) from None


async def publish_metrics(
    publisher: MqttPublisher,
    summary: Callable[[], Mapping[str, Any]],
    *,
    interval: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Publish ``summary()`` on the metrics topic every ``interval`` seconds (QoS 0); runs
    until cancelled."""
    while True:
        doc = {
            "schema": SUMMARY_SCHEMA,
            "node": publisher.node,
            "ts": iso(clock()),
            "metrics": dict(summary()),
        }
        await publisher.publish_or_buffer(
            publisher.topics.metrics, json.dumps(doc, separators=(",", ":")).encode()
        )
        await sleep(interval)
