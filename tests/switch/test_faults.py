"""Fault containment: agent down, wrong community, malformed and truncated replies."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from fabricwatch.collectors.switch._ber import decode_request, enc_unsigned, encode_response
from fabricwatch.collectors.switch._client import (
    NativeV2cSession,
    SnmpError,
    SnmpMalformed,
    SnmpTimeout,
)
from fabricwatch.collectors.switch._settings import TargetSettings
from fabricwatch.testing.sim_snmp import SimAgent, demo_switch
from tests.conftest import free_port

from .conftest import Harness, ManualClock, community_file

UP = "fabricwatch_switch_target_up"


def _target(tmp_path: Path, port: int, community: str = "fw-sim") -> TargetSettings:
    return TargetSettings(
        name="leaf1",
        host="127.0.0.1",
        port=port,
        community_file=community_file(tmp_path, community),
        timeout=0.2,
        retries=1,
    )


async def test_agent_down_backoff_and_recovery(
    tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    clock = ManualClock()
    port = free_port(kind=socket.SOCK_DGRAM)
    h = make_harness([_target(tmp_path, port)], clock=clock, backoff_initial=2.0, backoff_max=8.0)
    await h.collector.start()
    st = h.collector.target_state("leaf1")
    delays = []
    with structlog.testing.capture_logs() as logs:
        for _ in range(4):
            await h.poll()  # nobody listens: times out
            delays.append(st.next_attempt - clock())
            clock.advance(st.next_attempt - clock())
    assert h.value(UP, "leaf1") == 0.0
    assert [round(d) for d in delays] == [2, 4, 8, 8]  # exponential, capped
    assert h.value("fabricwatch_switch_poll_errors", "leaf1", "timeout") == 4.0
    assert h.value("fabricwatch_switch_timeouts", "leaf1") == 4.0
    failed = [e for e in logs if e["event"] == "switch_poll_failed"]
    assert len(failed) == 4 and failed[0]["reason"] == "timeout"
    # While backing off the target is not polled at all (no new timeouts).
    clock.advance(-1)
    await h.poll()
    assert h.value("fabricwatch_switch_timeouts", "leaf1") == 4.0
    clock.advance(1)
    # The agent comes back on the same port: the next poll recovers.
    sw = demo_switch(2, node="gpu-node-1", clock=clock)
    agent = await SimAgent(sw, community="fw-sim").start(port=port)
    try:
        with structlog.testing.capture_logs() as logs:
            await h.poll()
        assert h.value(UP, "leaf1") == 1.0
        assert any(e["event"] == "switch_recovered" for e in logs)
        assert st.failures == 0
        assert sorted(st.ports.values()) == ["Ethernet0", "Ethernet4"]
    finally:
        agent.close()


async def test_wrong_community_marks_target_down_with_clear_log(
    tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    sw = demo_switch(2)
    agent = await SimAgent(sw, community="right").start()
    try:
        h = make_harness([_target(tmp_path, agent.port, community="wrong")])
        await h.collector.start()
        with structlog.testing.capture_logs() as logs:
            await h.poll()
        assert h.value(UP, "leaf1") == 0.0
        (event,) = [e for e in logs if e["event"] == "switch_poll_failed"]
        assert "community" in event["error"] and event["switch"] == "leaf1"
        assert agent.requests == 0  # the agent never accepted a request
    finally:
        agent.close()


async def test_garbage_and_truncated_replies_are_counted_not_fatal(
    tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    clock = ManualClock()
    sw = demo_switch(2, clock=clock)
    agent = await SimAgent(sw, community="fw-sim").start()
    try:
        h = make_harness([_target(tmp_path, agent.port)], clock=clock, backoff_initial=0.0)
        await h.collector.start()
        await h.poll()
        assert h.value(UP, "leaf1") == 1.0
        for fault in ("garbage", "truncated"):
            agent.fault = fault
            clock.advance(1)
            with structlog.testing.capture_logs() as logs:
                await h.poll()
            assert h.value(UP, "leaf1") == 0.0
            assert any(e.get("reason") == "malformed" for e in logs), fault
        malformed = h.value("fabricwatch_switch_malformed_responses", "leaf1")
        # The first fault's poll GETs in a size larger than any answered so far: a
        # probe of the agent's size, sent once; the second's rediscovery GET twice.
        assert malformed is not None and malformed >= 3
        assert h.value("fabricwatch_switch_poll_errors", "leaf1", "malformed") == 2.0
        agent.fault = "none"
        clock.advance(1)
        await h.poll()
        assert h.value(UP, "leaf1") == 1.0
    finally:
        agent.close()


async def test_raw_session_errors() -> None:
    sw = demo_switch(1)
    agent = await SimAgent(sw).start()
    s = NativeV2cSession("127.0.0.1", agent.port, "public", timeout=0.2, retries=0)
    try:
        agent.fault = "truncated"
        try:
            await s.get([(1, 3, 6, 1, 2, 1, 1, 5, 0)])
        except SnmpMalformed as exc:
            assert "truncated" in str(exc)
        else:
            raise AssertionError("truncated reply accepted")
        agent.fault = "silent"
        try:
            await s.get([(1, 3, 6, 1, 2, 1, 1, 5, 0)])
        except SnmpTimeout:
            pass
        else:
            raise AssertionError("silence accepted")
        agent.fault = "none"
        ((_, value),) = await s.get([(1, 3, 6, 1, 2, 1, 1, 5, 0)])
        assert value == b"sim-leaf1"
        # A late answer to an earlier try is still matched (same future).
        assert s.stats.timeouts == 2
    finally:
        await s.close()
        agent.close()


class _NamesAgent(asyncio.DatagramProtocol):
    """Answers each GET with its OIDs and value 7, except as ``mode`` says: ``other``
    (a different name in the first varbind), ``short`` (the last varbind left out)."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.mode = "other"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        community, _, rid, _, _, oids = decode_request(data)
        if self.mode == "other":
            oids = [(*oids[0][:-1], oids[0][-1] + 1), *oids[1:]]
        elif self.mode == "short":
            oids = oids[:-1]
        reply = encode_response(community, rid, [(o, 0x41, enc_unsigned(7)) for o in oids])
        assert self.transport is not None
        self.transport.sendto(reply, addr)


async def test_get_responses_are_checked_against_the_names_asked() -> None:
    loop = asyncio.get_running_loop()
    transport, agent = await loop.create_datagram_endpoint(_NamesAgent, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    s = NativeV2cSession("127.0.0.1", port, "public", timeout=0.2, retries=1)
    oids = [(1, 3, 6, 1, 2, 1, 2, 2, 1, 13, i) for i in (1, 2, 3)]
    try:
        # Another name than asked: malformed, counted, retried, then given up on.
        with pytest.raises(SnmpMalformed, match="not the name asked"):
            await s.get_values(oids)
        assert s.stats.malformed == 2 and s.stats.timeouts == 1
        agent.mode = "short"
        with pytest.raises(SnmpError, match="GET of 3 OIDs answered with 2 varbinds"):
            await s.get_values(oids)
        agent.mode = "none"  # recovers on the same session
        assert await s.get_values(oids) == [7, 7, 7]
        assert await s.get(oids) == [(o, 7) for o in oids]
    finally:
        await s.close()
        transport.close()


async def test_collection_of_one_target_never_blocks_another(
    tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    sw = demo_switch(2)
    agent = await SimAgent(sw, community="fw-sim").start()
    dead = free_port(kind=socket.SOCK_DGRAM)
    try:
        good = _target(tmp_path, agent.port)
        bad = _target(tmp_path, dead)
        bad.name = "dead"
        h = make_harness([bad, good])
        await h.collector.start()
        await asyncio.wait_for(h.poll(), 5)
        assert h.value(UP, "leaf1") == 1.0
        assert h.value(UP, "dead") == 0.0
    finally:
        agent.close()
