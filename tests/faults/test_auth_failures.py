"""Receivers answering 401/403 are retried with backoff up to a limit (issue 17, item 6)."""

from __future__ import annotations

import sqlite3

import pytest

from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.sinks import Route, Router, WebhookSink
from fabricwatch.outputs.sinks._http import check_response
from fabricwatch.outputs.sinks.protocol import SinkError
from tests.alerting.conftest import Receiver, new_secret, opened, resolved


def _outbox(*transitions: object) -> Outbox:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    router = Router("prod", [Route("hook", min_severity="info")])
    with box.transaction() as conn:
        for tr in transitions:
            router(conn, tr)  # type: ignore[arg-type]
    return box


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_retryable(status: int) -> None:
    with pytest.raises(SinkError) as info:
        check_response(status, {}, b"bad signature")
    assert info.value.retryable and info.value.auth and not info.value.gone


@pytest.mark.parametrize("status", [401, 403])
async def test_rotation_window_of_auth_failures_then_delivered(
    receiver: Receiver, status: int
) -> None:
    receiver.script = [status, status, status]
    box = _outbox(opened("1" * 16), resolved("1" * 16))
    sink = WebhookSink("hook", receiver.url, new_secret(), timeout=1.0)
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.02, backoff_max=0.05))
    await sender.start()
    try:
        assert await sender.drain(within=20.0), box.rows(state="pending")
    finally:
        await sender.close()
    rows = sorted(box.rows(sink="hook"), key=lambda r: r.id)
    assert [r.state for r in rows] == ["delivered", "delivered"]
    assert rows[0].attempts == 4  # three refusals and the delivery
    ids = [r.headers["webhook-id"] for r in receiver.ok()]
    assert ids == [r.event_id for r in rows]  # order kept, no duplicate


async def test_auth_failures_dead_letter_after_the_limit_with_attempts_counted(
    receiver: Receiver,
) -> None:
    receiver.script = [401] * 50
    box = _outbox(opened("2" * 16))
    sink = WebhookSink("hook", receiver.url, new_secret(), timeout=1.0)
    policy = RetryPolicy(backoff_initial=0.01, backoff_max=0.02, auth_retries=4)
    sender = OutboxSender(box, [sink], policy)
    await sender.start()
    try:
        assert await sender.drain(within=20.0)
    finally:
        await sender.close()
    (row,) = box.rows(sink="hook")
    assert row.state == "dead"
    assert row.attempts == 4 == len(receiver.requests)
    assert "rejected after 4 attempts: HTTP 401" in (row.last_error or "")
    assert sender.stats()["hook"].attempted == 4
