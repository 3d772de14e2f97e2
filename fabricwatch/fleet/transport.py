"""The fleet aggregator's MQTT connection: connect, subscribe, reconnect with backoff.

One MQTT v5 client per replica, with a retained ``offline`` Last Will on its
replica topic. On each connect it announces ``online`` and subscribes, in this
order: replicas and group announcements (their retained state must arrive
before any member), node status, node job reports, and node incidents (a
shared subscription: each event reaches one replica). Messages go to the
aggregator's handler; a lost connection is retried with jittered exponential
backoff until :meth:`FleetTransport.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence

import aiomqtt
import structlog

from fabricwatch.fleet.model import FleetTopics
from fabricwatch.outputs.mqtt import tls_context, topic_segment
from fabricwatch.outputs.settings import MqttSettings
from fabricwatch.secrets import read_secret

log = structlog.get_logger("fabricwatch.fleet")

INFLIGHT = 256
"""Publishes one replica keeps in flight (node events republished to partitions)."""

Handler = Callable[[aiomqtt.Client, aiomqtt.Message], Awaitable[None]]


class FleetTransport:
    """One replica's MQTT client and its reconnect loop."""

    def __init__(
        self,
        mqtt: MqttSettings,
        topics: FleetTopics,
        *,
        name: str,
        replica: str,
        clusters: Sequence[str],
        on_message: Handler,
        on_down: Callable[[], None],
    ) -> None:
        self.mqtt = mqtt
        self.topics = topics
        self.name = name
        self.replica = replica
        self.clusters = list(clusters)
        self._on_message = on_message
        self._on_down = on_down
        self._password = (
            read_secret(mqtt.password_file, key="mqtt.password_file")
            if mqtt.password_file
            else None
        )
        self._tls = tls_context(mqtt)
        self.client: aiomqtt.Client | None = None
        self.connected = asyncio.Event()
        self.connects = 0
        self._stopping = False
        self._rng = random.Random()  # noqa: S311 - reconnect jitter

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopping

    def stop(self) -> None:
        """End the loop after the current message (the caller cancels its task)."""
        self._stopping = True

    async def say_offline(self) -> None:
        """Publish the retained ``offline`` now (a clean stop; the Will covers a crash)."""
        client = self.client
        if client is not None and self.connected.is_set():
            with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                await asyncio.wait_for(
                    client.publish(
                        self.topics.replica(self.replica), b"offline", qos=1, retain=True
                    ),
                    5.0,
                )

    def _client_for(self) -> aiomqtt.Client:
        m = self.mqtt
        return aiomqtt.Client(
            m.host,
            m.effective_port(),
            identifier=f"fabricwatch-fleet-{self.name}-{self.replica}",
            username=m.username or None,
            password=self._password,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(self.topics.replica(self.replica), b"offline", qos=1, retain=True),
            keepalive=max(1, round(m.keepalive)),
            timeout=m.publish_timeout,
            clean_start=True,
            tls_context=self._tls,
        )

    async def run(self) -> None:
        """Connect and hand every message on, reconnecting until :meth:`stop`."""
        failures = 0
        while not self._stopping:
            try:
                client = self._client_for()
                # Hundreds of publishes in flight are normal here, not a warning.
                client.pending_calls_threshold = 10 * INFLIGHT
                async with client:
                    await self._on_connect(client)
                    failures = 0
                    async for msg in client.messages:
                        await self._on_message(client, msg)
                        if self.stopping:
                            break
            except aiomqtt.MqttError as exc:
                log.warning("fleet_mqtt_disconnected", error=str(exc), attempt=failures + 1)
            finally:
                self.client = None
                self.connected.clear()
                self._on_down()
            failures += 1
            base = min(self.mqtt.reconnect_max, self.mqtt.reconnect_initial * 2.0 ** (failures - 1))
            await asyncio.sleep(base / 2.0 + self._rng.uniform(0.0, base / 2.0))

    async def _on_connect(self, client: aiomqtt.Client) -> None:
        t = self.topics
        await client.publish(t.replica(self.replica), b"online", qos=1, retain=True)
        clusters = [topic_segment(c) for c in self.clusters] or ["+"]
        # Replicas and announcements first: their retained state arrives before any
        # member, so ownership and "already paged" are known when members come in.
        await client.subscribe([(t.replicas_filter, 1), (t.groups_filter, 1)])
        await client.subscribe([(t.status_filter(c), 1) for c in clusters])
        await client.subscribe([(t.jobwork_filter(c), 1) for c in clusters])
        await client.subscribe([(t.incidents_filter(c), 1) for c in clusters])
        self.client = client
        self.connects += 1
        self.connected.set()
        log.info("fleet_connected", replica=self.replica, host=self.mqtt.host)
