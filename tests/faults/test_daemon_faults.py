"""The fault-injection suite: a real daemon process on the simulated node under
kill -9, SIGTERM, a full disk and misbehaving receivers; assertions on what the
receiver got (issue 17, "Show")."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from fabricwatch.engine.db import IncidentDB
from fabricwatch.outputs.outbox import Outbox
from tests.alerting.conftest import Mosquitto
from tests.alerting.test_mqtt import Sub
from tests.faults.conftest import SmallFs
from tests.faults.harness import FaultNode, Receiver, check_pages, new_key

pytestmark = pytest.mark.integration

WARMUP = 30.0
"""Virtual seconds of healthy training first: the job's GPUs arm and baselines form."""


async def _node(tmp_path: Path, state_dir: Path | None = None) -> FaultNode:
    secret = tmp_path / "secret"
    receiver = Receiver(new_key(secret))
    await receiver.start()
    root = tmp_path / "root"
    root.mkdir()
    return FaultNode(root, receiver, state_dir or tmp_path / "state", secret)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[FaultNode]:
    n = await _node(tmp_path)
    try:
        yield n
    finally:
        await n.stop()
        await n.receiver.stop()


@pytest.mark.parametrize(
    ("fault", "sig"),
    [
        ("pfc-storm", signal.SIGKILL),
        ("pfc-storm", signal.SIGTERM),
        ("checkpoint-stall", signal.SIGKILL),
        # systemd's watchdog (WatchdogSec=) ends a hung daemon with SIGABRT.
        ("checkpoint-stall", signal.SIGABRT),
    ],
)
async def test_restart_during_a_live_fault_is_no_all_clear(
    node: FaultNode, fault: str, sig: signal.Signals
) -> None:
    rec = node.receiver
    await node.start()
    await node.virtual(WARMUP)
    node.set_fault(fault)
    await node.until(lambda: bool(rec.of("opened")), "the opened page")
    rc = await node.signal(sig)
    assert rc == (0 if sig is signal.SIGTERM else -int(sig))
    await node.start()
    # Well past resolve_hold (10 s virtual) after the restart, with the fault holding.
    await node.virtual(60)
    assert not rec.of("resolved"), "false all-clear after the restart"
    node.set_fault("healthy")
    await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
    kinds = check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)
    assert len(kinds) == 1, kinds  # the fault paged once, across the restart
    assert next(iter(kinds.values()))[-1] == "resolved"


async def test_fault_cleared_while_down_resolves_after_restart(node: FaultNode) -> None:
    rec = node.receiver
    await node.start()
    await node.virtual(WARMUP)
    node.set_fault("pfc-storm")
    await node.until(lambda: bool(rec.of("opened")), "the opened page")
    await node.signal(signal.SIGKILL)
    node.set_fault("healthy")
    await node.start()
    await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
    kinds = check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)
    assert [k[0] for k in kinds.values()] == ["opened"] and len(kinds) == 1


async def test_receiver_401_403_500_and_hang_then_everything_arrives(node: FaultNode) -> None:
    rec = node.receiver
    rec.script = [401, 403, 500, ("hang", 6.0), 401]  # hangs past the sink's 5 s timeout
    await node.start()
    await node.virtual(WARMUP)
    node.set_fault("pfc-storm")
    await node.until(lambda: bool(rec.of("opened")), "the opened page after 5 refusals")
    await node.virtual(20)
    node.set_fault("healthy")
    await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
    assert rec.answered[:5] == [401, 403, 500, 503, 401]
    check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)
    dead = [e for e in node.events() if e.get("event") == "delivery_dead_lettered"]
    assert not dead, dead


@pytest.fixture
async def full_node(tmp_path: Path, small_fs: SmallFs) -> AsyncIterator[tuple[FaultNode, SmallFs]]:
    n = await _node(tmp_path, state_dir=small_fs.root / "state")
    try:
        yield n, small_fs
    finally:
        await n.stop()
        await n.receiver.stop()
        small_fs.empty()


async def test_disk_fills_while_running_then_empties(
    full_node: tuple[FaultNode, SmallFs],
) -> None:
    node, fs = full_node
    rec = node.receiver
    await node.start()
    await node.virtual(WARMUP)
    fs.fill()
    node.set_fault("pfc-storm")
    await node.until(lambda: node.metric("fabricwatch_state_writable") == 0.0, "writable 0")
    errors = node.metric("fabricwatch_state_write_errors_total")
    assert errors is not None and errors >= 1
    await node.virtual(20)
    assert not rec.pages  # not on disk yet: not paged (the outbox needs the disk)
    failed = [e for e in node.events() if e.get("event") == "state_write_failed"]
    assert failed and "full" in failed[0]["error"].lower(), failed[:1]
    assert "aside" not in failed[0]["error"]
    fs.empty()
    await node.until(lambda: bool(rec.of("opened")), "the opened page once space returns")
    assert node.metric("fabricwatch_state_writable") == 1.0
    node.set_fault("healthy")
    await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
    check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)


@pytest.mark.parametrize("existing", [False, True])
async def test_disk_full_at_startup_monitors_anyway(
    full_node: tuple[FaultNode, SmallFs], existing: bool
) -> None:
    node, fs = full_node
    rec = node.receiver
    if existing:
        # The database of an earlier run (WAL mode, outbox tables), closed cleanly.
        db = IncidentDB.in_state_dir(node.state_dir)
        Outbox(db.connect())
        db.close()
    fs.fill()
    await node.start()  # ready, although the state store cannot be opened
    assert node.get("/metrics")[0] == 200
    unavailable = [e for e in node.events() if e.get("event") == "state_db_unavailable"]
    assert unavailable, node.log.read_text()[-2000:]
    assert "corrupt" not in unavailable[0]["error"]
    await node.virtual(WARMUP)
    node.set_fault("pfc-storm")
    await node.until(
        lambda: (node.metric("fabricwatch_state_pending_transitions") or 0) >= 1,
        "the incident detected and kept in memory",
    )
    fs.empty()
    await node.until(lambda: bool(rec.of("opened")), "the opened page once the store opens")
    node.set_fault("healthy")
    await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
    check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)


async def test_mosquitto_stopped_and_frozen(node: FaultNode, tmp_path: Path) -> None:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (Debian package mosquitto)")
    work = tmp_path / "mosquitto"
    work.mkdir()
    broker = Mosquitto(work)
    broker.start()
    topic = "fabricwatch/v1/+/+/incidents"
    try:
        # A persistent QoS 1 session: what is published while it is away is kept for it.
        async with Sub(broker.port, topic, client_id="fault-checker", persistent=True):
            pass
        node.mqtt_port = broker.port
        rec = node.receiver
        await node.start()
        await node.virtual(WARMUP)
        broker.stop()  # the broker goes away (SIGTERM: it saves its sessions)
        node.set_fault("pfc-storm")
        await node.until(lambda: bool(rec.of("opened")), "the webhook page while MQTT is down")
        await node.virtual(10)
        broker.start()
        assert broker.proc is not None
        await node.until(
            lambda: (node.metric("fabricwatch_mqtt_connected") or 0) == 1.0, "reconnected"
        )
        os.kill(broker.proc.pid, signal.SIGSTOP)  # frozen: TCP open, no PUBACK
        try:
            node.set_fault("healthy")
            await node.until(lambda: bool(rec.of("resolved")), "the webhook resolve")
            await asyncio.sleep(2.0)  # publish timeouts and retries against the frozen broker
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        async with Sub(broker.port, topic, client_id="fault-checker", persistent=True) as sub:

            def both() -> bool:
                kinds = [json.loads(p)["type"] for _, p, _ in sub.messages]
                return "incident.opened" in kinds and "incident.resolved" in kinds

            assert await sub.wait(both, within=30), sub.messages
            kinds = [json.loads(p)["type"] for _, p, _ in sub.messages]
        assert kinds.index("incident.opened") < kinds.index("incident.resolved")
        check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)
    finally:
        if broker.proc is not None:
            os.kill(broker.proc.pid, signal.SIGCONT)
        broker.stop()


class JunkAgent(asyncio.DatagramProtocol):
    """An SNMP "agent" answering every request with junk: random bytes, truncated
    BER, a valid header around garbage, or silence."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.requests = 0
        self.rng = random.Random(17)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector datagram transport does not subclass DatagramTransport.
        self.transport = cast("asyncio.DatagramTransport", transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.requests += 1
        assert self.transport is not None
        kind = self.requests % 4
        if kind == 0:
            reply = self.rng.randbytes(self.rng.randint(1, 1400))
        elif kind == 1:
            reply = data[: max(1, len(data) // 2)]
        elif kind == 2:
            reply = b"\x30\x82\xff\xff" + self.rng.randbytes(64)
        else:
            return
        self.transport.sendto(reply, addr)


async def test_junk_from_the_snmp_target_degrades_only_the_switch_collector(
    node: FaultNode,
) -> None:
    loop = asyncio.get_running_loop()
    transport, junk = await loop.create_datagram_endpoint(JunkAgent, local_addr=("127.0.0.1", 0))
    try:
        node.snmp_port = transport.get_extra_info("sockname")[1]
        rec = node.receiver
        await node.start()
        await node.until(
            lambda: node.metric('fabricwatch_switch_target_up{switch="leaf1"}') == 0.0,
            "the switch target down",
        )
        assert junk.requests > 0
        # Its only target failing, the switch collector itself is down.
        await node.until(
            lambda: node.metric('fabricwatch_collector_up{collector="switch"}') == 0.0,
            "the switch collector down",
        )
        polls = [e for e in node.events() if e.get("event") == "switch_poll_failed"]
        assert polls and polls[0]["reason"] == "malformed"
        assert node.metric('fabricwatch_collector_up{collector="gpu"}') == 1.0
        await node.virtual(WARMUP)
        node.set_fault("checkpoint-stall")
        await node.until(lambda: bool(rec.of("opened")), "the checkpoint stall paged")
        node.set_fault("healthy")
        await node.until(lambda: bool(rec.of("resolved")), "the resolved page")
        check_pages(rec.pages, cleared_at=node.cleared_at, in_flight=node.in_flight)
        assert node.proc is not None and node.proc.returncode is None
    finally:
        transport.close()
