"""GETBULK walks sized to the agent: the request size follows what the agent answers."""

from __future__ import annotations

import pytest

from fabricwatch.collectors.switch._client import BulkSize, NativeV2cSession, walk
from fabricwatch.testing.sim_snmp import SimAgent, demo_switch

IF_HC_IN = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6)
IF_HC_OUT = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 10)
IF_OPER = (1, 3, 6, 1, 2, 1, 2, 2, 1, 8)
COLUMNS = [IF_HC_IN, IF_HC_OUT, IF_OPER]


async def _walk_twice(agent_limit: int, size: BulkSize | None) -> tuple[list[int], list[int]]:
    """(rows per column, requests of each of two polls) against an agent answering at
    most ``agent_limit`` varbinds."""
    agent = await SimAgent(demo_switch(96), max_varbinds=agent_limit).start("127.0.0.1", 0)
    session = NativeV2cSession("127.0.0.1", agent.port, "public", timeout=2.0)
    try:
        requests = []
        for _ in range(2):
            before = agent.requests
            rows = await walk(session, COLUMNS, max_repetitions=200, size=size)
            requests.append(agent.requests - before)
        # Row counts only: counter values move between the polls.
        return [len(rows[c]) for c in COLUMNS], requests
    finally:
        await session.close()
        agent.close()


@pytest.mark.parametrize("agent_limit", [16, 64, 300])
async def test_walk_sized_to_the_agent_reads_the_same_rows(agent_limit: int) -> None:
    fixed_rows, fixed_requests = await _walk_twice(agent_limit, None)
    size = BulkSize()
    sized_rows, sized_requests = await _walk_twice(agent_limit, size)
    assert sized_rows == fixed_rows == [96, 96, 96]
    if agent_limit > 64:
        # An agent that answers more gets asked for more: fewer round trips.
        assert sized_requests[1] < fixed_requests[1]
        assert size.varbinds > 64
    else:
        # One that cuts replies short (at a whole row) is asked for what it answers,
        # short of one more row.
        assert size.varbinds < agent_limit + len(COLUMNS)
        assert sized_requests[1] <= fixed_requests[1]


def test_bulk_size_grows_on_full_replies_settles_on_short_ones_and_halves_on_refusal() -> None:
    size = BulkSize(varbinds=64, ceiling=256)
    size.answered(64, 64)
    assert size.varbinds == 128
    size.answered(30, 30, full=False)  # a small request tells nothing
    assert size.varbinds == 128
    size.answered(128, 128)
    size.answered(256, 256)
    assert size.varbinds == 256  # the ceiling
    size.answered(256, 90, row=3)  # the agent fits its replies to 90-92 varbinds
    assert (size.varbinds, size.settled) == (92, True)
    size.answered(90, 90)
    assert size.varbinds == 92  # settled: no more growth
    size.shrink()
    assert size.varbinds == 46
