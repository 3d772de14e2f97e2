"""GETs sized to the agent: they grow while it answers, and shrink to what it answers
when it refuses (tooBig) or drops a response too large to send, within the poll.

Against net-snmp's snmpd capped at 1472-byte responses, and a simulated switch with
the same cap (the collector end to end).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.collectors.switch._ber import decode_request, encode_response
from fabricwatch.collectors.switch._client import (
    GetSize,
    NativeV2cSession,
    PysnmpSession,
    SnmpTooBig,
)
from fabricwatch.collectors.switch._settings import TargetSettings
from fabricwatch.errors import ParseError
from fabricwatch.testing.sim_snmp import SimAgent, demo_switch

from .conftest import SNMPD_MESSAGE_MAX, Harness, ManualClock, community_file

SYS_DESCR = (1, 3, 6, 1, 2, 1, 1, 1, 0)
SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)
SYS_NAME = (1, 3, 6, 1, 2, 1, 1, 5, 0)
ABSENT = (1, 3, 6, 1, 2, 1, 1, 99, 0)  # noSuchObject: its response is the request's size


def test_get_size_grows_searches_between_answered_and_refused() -> None:
    size = GetSize(varbinds=40, ceiling=256)
    assert not size.probing(40) and size.probing(41)
    size.answered(40)
    assert size.varbinds == 80
    size.answered(10)  # a short last GET tells nothing more
    assert size.varbinds == 80
    size.answered(80)
    size.answered(160)
    assert size.varbinds == 256  # the ceiling
    size.refused(256)
    assert (size.good, size.bad, size.varbinds) == (160, 256, 208)
    for _ in range(10):
        n = size.varbinds
        if n >= 190:
            size.refused(n)
        else:
            size.answered(n)
    assert (size.varbinds, size.bad) == (189, 190)  # settled just under the agent's limit
    size.refused(100)  # larger values: what it answered before no longer holds
    assert (size.good, size.varbinds) == (0, 50)
    assert GetSize(varbinds=40, ceiling=10).varbinds == 10


async def _settle(session: NativeV2cSession, oids: tuple[tuple[int, ...], ...]) -> list[Any]:
    """GET ``oids`` until the size stops changing; then once more, checking that call
    is only GETs the agent answers, in the settled size."""
    for _ in range(6):
        before = (session.size.good, session.size.bad, session.size.varbinds)
        first = await session.get_values(oids)
        if (session.size.good, session.size.bad, session.size.varbinds) == before:
            break
    requests, timeouts = session.stats.requests, session.stats.timeouts
    again = await session.get_values(oids)
    assert session.stats.requests - requests == math.ceil(len(oids) / session.size.varbinds)
    assert session.stats.timeouts == timeouts
    assert len(again) == len(first) == len(oids)
    return again


async def test_native_get_shrinks_on_too_big_from_real_snmpd(snmpd_v2c: int) -> None:
    """sysDescr (~60 bytes) x 200: 40 of them do not fit 1472 bytes; snmpd answers tooBig."""
    session = NativeV2cSession("127.0.0.1", snmpd_v2c, "public", timeout=0.5, retries=0)
    try:
        got = await _settle(session, (SYS_DESCR,) * 200)
        size = session.size
        assert size.bad and size.varbinds < size.bad <= 40
        assert session.stats.timeouts == 0  # refused with tooBig, not dropped
        descr = got[0]
        assert isinstance(descr, bytes) and descr and got == [descr] * 200
        assert len(descr) * size.varbinds < SNMPD_MESSAGE_MAX
    finally:
        await session.close()


async def test_native_get_grows_and_recovers_from_dropped_responses(snmpd_v2c: int) -> None:
    """Absent OIDs x 600: GETs grow past what fits, and snmpd cannot even send tooBig
    (it would carry the request's varbinds): it drops the response. The larger GET
    was sent once (a probe), then asked again smaller, in the same call."""
    session = NativeV2cSession("127.0.0.1", snmpd_v2c, "public", timeout=0.3, retries=1)
    try:
        got = await _settle(session, (ABSENT,) * 600)
        assert len(set(got)) == 1
        size = session.size
        assert session.stats.timeouts > 0  # the dropped probes
        assert 80 <= size.good <= size.varbinds < size.bad
        assert 14 * size.varbinds < SNMPD_MESSAGE_MAX  # 14 bytes a varbind
    finally:
        await session.close()


async def test_pysnmp_get_shrinks_on_too_big_from_real_snmpd(snmpd_v2c: int) -> None:
    session = PysnmpSession("127.0.0.1", snmpd_v2c, community="public", timeout=0.5, retries=0)
    try:
        got = [v for _, v in await session.get([SYS_DESCR] * 120)]
    finally:
        await session.close()
    assert len(got) == 120 and len(set(got)) == 1
    assert session.size.bad and session.size.varbinds < session.size.bad


class CappedAgent(SimAgent):
    """A simulated switch whose responses are at most ``cap`` bytes, as real agents'
    are: tooBig (carrying the request's varbinds) when that fits, else no answer."""

    cap = SNMPD_MESSAGE_MAX

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        try:
            community, pdu, rid, a, b, oids = decode_request(data)
        except ParseError:
            return
        if community != self.community or self._transport is None:
            return
        self.requests += 1
        reply = encode_response(community, rid, self._answer(pdu, a, b, oids))
        if len(reply) > self.cap:
            null = [(o, 0x05, b"") for o in oids]
            reply = encode_response(community, rid, null, error_status=1, error_index=0)
            if len(reply) > self.cap:
                return
        self._transport.sendto(reply, addr)


def _series(h: Harness) -> dict[tuple[str, tuple[str, ...]], float]:
    # Timeouts apart: the capped agent drops the responses it cannot send.
    return {(s.spec.name, s.labels): s.value for s in h.store if "timeouts" not in s.spec.name}


async def test_switch_mode_poll_sized_to_a_capped_agent_reads_every_series(
    clock: ManualClock, tmp_path: Path, make_harness: Callable[..., Harness]
) -> None:
    """A 32-port switch mode poll (1,000+ varbinds) against agents with and without
    the cap: the same series and values; the capped one is never failed, and after a
    few polls every GET fits."""
    harnesses = []
    agents = []
    for cls in (SimAgent, CappedAgent):
        agent = await cls(demo_switch(32, clock=clock), community="fw-sim").start()
        agents.append(agent)
        target = TargetSettings(
            name="leaf1",
            host="127.0.0.1",
            port=agent.port,
            community_file=community_file(tmp_path, "fw-sim"),
            timeout=0.3,
            retries=1,
            mode="switch",
        )
        h = make_harness([target], clock=clock)
        await h.collector.start()
        harnesses.append(h)
    free, capped = harnesses
    try:
        for _ in range(6):
            for h in harnesses:
                await h.poll()
                assert not h.down
            clock.advance(1.0)
        assert _series(free) == _series(capped)
        st = capped.collector.target_state("leaf1")
        assert st.errors == dict.fromkeys(st.errors, 0)
        session = st.session
        assert isinstance(session, NativeV2cSession)
        assert session.size.bad and session.size.varbinds < session.size.bad
        requests = agents[1].requests
        await capped.poll()
        n = len(st.get_oids)
        assert agents[1].requests - requests == math.ceil(n / session.size.varbinds)
        # The unlimited agent is asked in GETs of up to max_oids_per_request.
        free_session = free.collector.target_state("leaf1").session
        assert isinstance(free_session, NativeV2cSession)
        assert free_session.size.varbinds == 256
    finally:
        for agent in agents:
            agent.close()


async def test_get_of_one_varbind_too_big_raises(
    clock: ManualClock,
) -> None:
    agent = CappedAgent(demo_switch(4, clock=clock), community="fw-sim")
    agent.cap = 40  # not even one varbind's response fits, nor tooBig with one
    await agent.start()
    session = NativeV2cSession("127.0.0.1", agent.port, "fw-sim", timeout=0.2, retries=0)
    try:
        agent.cap = 60  # tooBig with one varbind fits, its answer does not
        with pytest.raises(SnmpTooBig):
            await session.get_values((SYS_DESCR, SYS_NAME))
        assert session.size.varbinds == 1
    finally:
        await session.close()
        agent.close()
