"""MQTT against a real Mosquitto on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import pytest

from fabricwatch.errors import ConfigError, DeliveryError
from fabricwatch.outputs.alerting import METRICS, outbox_readings
from fabricwatch.outputs.mqtt import (
    MqttPublisher,
    MqttSink,
    Publisher,
    Topics,
    publish_metrics,
    tls_context,
    topic_segment,
)
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.settings import MqttSettings
from fabricwatch.outputs.sinks import Route, Router
from fabricwatch.readings import Reading
from fabricwatch.settings import build
from tests.alerting.conftest import Mosquitto, opened, python_env

pytestmark = pytest.mark.integration


@dataclass
class Sub:
    """A real MQTT consumer that reconnects (bounded) and records what it gets."""

    port: int
    topic: str
    client_id: str | None = None
    persistent: bool = False
    messages: list[tuple[str, bytes, bool]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        for _ in range(200):  # bounded reconnects
            try:
                async with aiomqtt.Client(
                    "127.0.0.1",
                    self.port,
                    identifier=self.client_id,
                    clean_session=not self.persistent,
                ) as c:
                    await c.subscribe(self.topic, qos=1)
                    self.ready.set()
                    async for m in c.messages:
                        payload = (
                            m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
                        )
                        self.messages.append((m.topic.value, payload, m.retain))
            except aiomqtt.MqttError:
                self.ready.clear()
                await asyncio.sleep(0.1)

    async def __aenter__(self) -> Sub:
        self.task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def wait(self, pred: Callable[[], bool], within: float = 10.0) -> bool:
        for _ in range(int(within / 0.02)):
            if pred():
                return True
            await asyncio.sleep(0.02)
        return False

    def payloads(self, topic: str) -> list[bytes]:
        return [p for t, p, _ in self.messages if t == topic]


def settings(port: int, **kw: object) -> MqttSettings:
    base: dict[str, object] = {
        "enabled": True,
        "port": port,
        "keepalive": 5,
        "reconnect_initial": 0.05,
        "reconnect_max": 0.5,
        "publish_timeout": 3,
    }
    base.update(kw)
    return build(MqttSettings, base, prefix="mqtt")


@contextlib.asynccontextmanager
async def publisher(
    s: MqttSettings, node: str = "node-a", **kw: object
) -> AsyncIterator[MqttPublisher]:
    pub = MqttPublisher(s, node=node, cluster="Prod", **kw)  # type: ignore[arg-type]
    await pub.start()
    try:
        yield pub
    finally:
        await pub.close()


def test_topics_and_segments() -> None:
    assert topic_segment("GPU-Node.17.example") == "gpu-node-17-example"
    assert topic_segment("a/b+#") == "a-b"
    assert topic_segment("///") == "_"
    t = Topics.for_node("fabricwatch/v1", "Prod", "node 1")
    assert t.status == "fabricwatch/v1/prod/node-1/status"
    assert t.incidents.endswith("/incidents") and t.metrics.endswith("/metrics")
    with pytest.raises(ConfigError, match="topic_prefix"):
        build(MqttSettings, {"topic_prefix": "fabricwatch/#"}, prefix="mqtt")
    with pytest.raises(ConfigError, match="password_file needs username"):
        build(MqttSettings, {"password_file": "x"}, prefix="mqtt")
    assert build(MqttSettings, {"tls": True}).effective_port() == 8883


async def test_status_retained_incidents_qos1_and_clean_offline(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    s = settings(mosquitto.port)
    async with publisher(s) as pub:
        assert isinstance(pub, Publisher)
        assert await pub.wait_connected(10)
        assert pub.client_id.startswith("fabricwatch-node-a-")
        # A late subscriber still sees "online": it is retained.
        async with Sub(mosquitto.port, "fabricwatch/v1/+/+/#") as sub:
            assert await sub.wait(lambda: (pub.topics.status, b"online", True) in sub.messages)

            box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
            router = Router("prod", [Route("mqtt", min_severity="info")])
            with box.transaction() as conn:
                for i in range(3):
                    router(conn, opened(f"{i:016x}"))
            sender = OutboxSender(box, [MqttSink(pub, pub.topics.incidents)])
            await sender.start()
            try:
                assert await sender.drain(within=10)
            finally:
                await sender.close()
            assert await sub.wait(lambda: len(sub.payloads(pub.topics.incidents)) == 3)
            events = [json.loads(p) for p in sub.payloads(pub.topics.incidents)]
            assert [e["type"] for e in events] == ["incident.opened"] * 3
            assert len({e["event_id"] for e in events}) == 3
            assert all(e["data"]["schema"] == "fabricwatch.incident/v1" for e in events)
            assert not any(r for t, _, r in sub.messages if t == pub.topics.incidents)
            readings = outbox_readings(sender, box, pub, 0.0)
            names = {m.name for m in METRICS}
            assert {r.name for r in readings} <= names
            assert Reading("fabricwatch_mqtt_connected", (), 1.0) in readings
    # Clean shutdown: "offline" published by us (the Will does not fire on a clean disconnect).
    async with Sub(mosquitto.port, pub.topics.status) as late:
        assert await late.wait(lambda: late.messages != [])
        assert late.messages == [(pub.topics.status, b"offline", True)]


async def test_last_will_after_kill_9(mosquitto: Mosquitto, tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.alerting.driver", "mqtt", "--state-dir", str(tmp_path),
        "--port", str(mosquitto.port), "--node", "victim",
        env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines: list[bytes] = []
        for _ in range(50):  # log lines come first
            lines.append(await asyncio.wait_for(proc.stdout.readline(), 20))
            if lines[-1].strip() in (b"online", b""):
                break
        assert lines[-1].strip() == b"online", lines
        topic = "fabricwatch/v1/prod/victim/status"
        async with Sub(mosquitto.port, topic) as sub:
            assert await sub.wait(lambda: (topic, b"online", True) in sub.messages)
            proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), 10)
            assert await sub.wait(lambda: any(p == b"offline" for _, p, _ in sub.messages), 15)
        async with Sub(mosquitto.port, topic) as late:
            assert await late.wait(lambda: late.messages != [])
            assert late.messages == [(topic, b"offline", True)]
    finally:
        if proc.returncode is None:
            proc.kill()
            await asyncio.wait_for(proc.wait(), 10)


async def test_broker_outage_loses_nothing(mosquitto: Mosquitto, tmp_path: Path) -> None:
    # The issue asks for a 30 s outage; 3 s exercises the same path (publish fails,
    # rows stay pending, reconnect with backoff, drain on reconnect) within the
    # test budget: nothing in the code depends on how long the broker was away.
    s = settings(mosquitto.port)
    box = Outbox.open(tmp_path / "o.db")
    router = Router("prod", [Route("mqtt", min_severity="info")])
    expected: list[str] = []

    def produce(start: int, n: int) -> None:
        with box.transaction() as conn:
            for i in range(start, start + n):
                router(conn, opened(f"{i:016x}"))
        expected.extend(d.event_id for d in box.rows() if d.event_id not in expected)

    async with (
        Sub(mosquitto.port, "fabricwatch/v1/+/+/incidents", client_id="aggregator",
            persistent=True) as sub,
        publisher(s) as pub,
    ):  # fmt: skip
        assert await pub.wait_connected(10)
        sender = OutboxSender(
            box, [MqttSink(pub, pub.topics.incidents, timeout=3)],
            RetryPolicy(backoff_initial=0.1, backoff_max=0.5),
        )  # fmt: skip
        router.set_listener(sender.wake)
        pub.on_connect(lambda: sender.receiver_back("mqtt"))
        await sender.start()
        try:
            produce(0, 5)
            assert await sender.drain(within=10)
            # Let the consumer acknowledge what it got before the broker goes away, and
            # stop it off the event loop so the clients keep running meanwhile.
            assert await sub.wait(lambda: len(sub.payloads(pub.topics.incidents)) == 5)
            await asyncio.sleep(0.2)
            await asyncio.to_thread(mosquitto.stop)
            assert await sub.wait(lambda: not pub.connected, 10)
            produce(5, 10)  # incidents while the broker is away
            await asyncio.sleep(3.0)
            assert box.queue_stats()["mqtt"].depth == 10
            assert sender.stats()["mqtt"].failed >= 1
            assert pub.stats.connect_failures >= 1
            await asyncio.to_thread(mosquitto.start)
            assert await pub.wait_connected(15)
            assert await sender.drain(within=15)
            got = sub.payloads(pub.topics.incidents)
            assert await sub.wait(
                lambda: (
                    {json.loads(p)["event_id"] for p in sub.payloads(pub.topics.incidents)}
                    == set(expected)
                ),
                15,
            ), (len(got), len(expected))
        finally:
            await sender.close()
    ids = [json.loads(p)["event_id"] for p in sub.payloads(pub.topics.incidents)]
    assert len(set(ids)) == 15 == len(expected)
    # QoS 1 is at-least-once and consumers drop repeats by event_id; with every
    # acknowledgement through before the outage there is nothing to repeat.
    assert len(ids) == 15
    assert sender.stats()["mqtt"].succeeded == 15
    assert pub.stats.connects >= 2


async def test_password_from_file(tmp_path: Path) -> None:
    pwfile = tmp_path / "passwd"
    await asyncio.to_thread(
        subprocess.run,
        ["mosquitto_passwd", "-b", "-c", str(pwfile), "node17", "s3cret"],
        check=True,
    )
    work = tmp_path / "b"
    work.mkdir()
    broker = Mosquitto(work, extra=f"allow_anonymous false\npassword_file {pwfile}\n")
    broker.start()
    try:
        async with publisher(settings(broker.port, username="node17"), password="wrong") as bad:
            for _ in range(300):
                if bad.stats.connect_failures >= 2:
                    break
                await asyncio.sleep(0.02)
            assert not bad.connected and bad.stats.connect_failures >= 2
            with pytest.raises(DeliveryError, match="not connected"):
                await bad.publish("x", b"y", qos=1)
        secret = tmp_path / "mqtt-password"
        secret.write_text("s3cret\n")
        from fabricwatch.secrets import read_secret

        pw = read_secret(str(secret), key="mqtt.password_file")
        async with publisher(settings(broker.port, username="node17"), password=pw) as good:
            assert await good.wait_connected(10)
    finally:
        broker.stop()


def _certs(d: Path) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(d / "ca.key"),
        "-out",
        str(d / "ca.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    )
    run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(d / "srv.key"),
        "-out",
        str(d / "srv.csr"),
        "-subj",
        "/CN=localhost",
    )
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", str(d / "srv.csr"), "-CA", str(d / "ca.pem"),
        "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-out", str(d / "srv.pem"),
        "-days", "2", "-extfile", str(d / "ext"))  # fmt: skip


async def test_tls_with_verified_broker(tmp_path: Path) -> None:
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (Debian package openssl)")
    await asyncio.to_thread(_certs, tmp_path)
    work = tmp_path / "b"
    work.mkdir()
    broker = Mosquitto(
        work,
        extra=(
            "allow_anonymous true\n"
            f"cafile {tmp_path / 'ca.pem'}\ncertfile {tmp_path / 'srv.pem'}\n"
            f"keyfile {tmp_path / 'srv.key'}\n"
        ),
    )
    broker.start()
    try:
        s = settings(broker.port, tls=True, ca_file=str(tmp_path / "ca.pem"), host="127.0.0.1")
        async with publisher(s) as pub:
            assert await pub.wait_connected(10)
            await pub.publish(pub.topics.incidents, b"{}", qos=1)
        # Without our CA the broker's certificate is refused: never connects.
        bad = settings(broker.port, tls=True, host="127.0.0.1")
        async with publisher(bad) as pub2:
            await asyncio.sleep(0.5)
            assert not pub2.connected and "certificate" in pub2.last_error.lower()
    finally:
        broker.stop()
    with pytest.raises(ConfigError, match="TLS"):
        tls_context(settings(1, tls=True, ca_file=str(tmp_path / "missing.pem")))


async def test_metrics_summary_qos0_and_bounded_buffer(mosquitto: Mosquitto) -> None:
    # publish_metrics sends whatever its owner's summary callable returns (the
    # daemon's is ``Daemon._summary``); the document is opaque to it.
    summary = {"fabricwatch_switch_pfc_pause_ratio": {"series": 2, "max": 0.97, "min": 0.01}}
    s = settings(mosquitto.port, buffer=3)
    async with (
        publisher(s) as pub,
        # Persistent, with the broker queueing QoS 0 for it: it sees what is sent
        # while it is still reconnecting after the broker restart.
        Sub(
            mosquitto.port, pub.topics.metrics, client_id="metrics-consumer", persistent=True
        ) as sub,
    ):
        assert await pub.wait_connected(10)
        task = asyncio.create_task(publish_metrics(pub, lambda: summary, interval=0.05))
        try:
            assert await sub.wait(lambda: len(sub.messages) >= 2)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        doc = json.loads(sub.messages[0][1])
        assert doc["schema"] == "fabricwatch.metrics-summary/v1" and doc["node"] == "node-a"
        assert doc["metrics"]["fabricwatch_switch_pfc_pause_ratio"]["max"] == 0.97
        # Disconnected: at most `buffer` summaries kept, the oldest dropped, sent on reconnect.
        await asyncio.to_thread(mosquitto.stop)
        assert await sub.wait(lambda: not pub.connected, 10)
        for i in range(5):
            await pub.publish_or_buffer(pub.topics.metrics, f'{{"n":{i}}}'.encode())
        assert pub.stats.dropped == 2
        before = len(sub.messages)
        await asyncio.to_thread(mosquitto.start)
        assert await pub.wait_connected(15)
        assert await sub.wait(
            lambda: sum(1 for _, p, _ in sub.messages[before:] if p.startswith(b'{"n"')) == 3, 15
        )
        assert [p for _, p, _ in sub.messages[before:] if p.startswith(b'{"n"')] == [
            b'{"n":2}',
            b'{"n":3}',
            b'{"n":4}',
        ]
