"""HTTP sinks against loopback receivers that fail, throttle, stall and recover;
payload shapes; Standard Webhooks signatures checked by the documented snippet
and by the `standardwebhooks` library."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from fabricwatch.engine.incidents import to_json
from fabricwatch.errors import ConfigError
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.settings import SinkSettings
from fabricwatch.outputs.sinks import (
    AlertmanagerSink,
    PagerDutySink,
    Route,
    Router,
    WebhookSink,
    build_sinks,
)
from fabricwatch.outputs.sinks._http import check_response, parse_retry_after
from fabricwatch.outputs.sinks.protocol import SinkError
from fabricwatch.outputs.sinks.slack import message
from fabricwatch.outputs.sinks.webhook import decode_secret, sign
from fabricwatch.outputs.token_bucket import TokenBucket
from fabricwatch.settings import build
from tests.alerting.conftest import T0, Receiver, make_incident, new_secret, opened, resolved

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerting.md"


def doc_verify() -> Callable[[str, dict[str, str], bytes], None]:
    """The verification snippet from docs/alerting.md, executed as written."""
    text = DOC.read_text()
    m = re.search(r"<!-- verify-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/alerting.md lost its verification snippet"
    ns: dict[str, Any] = {}
    exec(compile(m.group(1), str(DOC), "exec"), ns)
    fn: Callable[[str, dict[str, str], bytes], None] = ns["verify"]
    return fn


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def outbox_with(sinks: Sequence[str], transitions: Sequence[Any]) -> Outbox:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    router = Router("prod", [Route(s, min_severity="info") for s in sinks])
    with box.transaction() as conn:
        for tr in transitions:
            router(conn, tr)
    return box


async def run_until_drained(
    box: Outbox, sinks: list[Any], policy: RetryPolicy, within: float = 20.0
) -> OutboxSender:
    sender = OutboxSender(box, sinks, policy)
    await sender.start()
    try:
        assert await sender.drain(within=within), box.rows(state="pending")
    finally:
        await sender.close()
    return sender


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: now
        ("soon", None),
        ("", None),
        (None, None),
        ("-5", None),
        ("1.5", None),
    ],
)
def test_retry_after_parsing(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_retry_after_date_in_future() -> None:
    from email.utils import formatdate

    got = parse_retry_after(formatdate(time.time() + 30, usegmt=True))
    assert got is not None and 25 <= got <= 31


@pytest.mark.parametrize(
    ("status", "retryable", "gone"),
    [
        (500, True, False),
        (502, True, False),
        (429, True, False),
        (408, True, False),
        (400, False, False),
        (404, False, False),
        (410, False, True),
    ],
)
def test_response_classification(status: int, retryable: bool, gone: bool) -> None:
    check_response(202, {}, b"")
    with pytest.raises(SinkError) as info:
        check_response(status, {"Retry-After": "7"}, b"\xff garbage body")
    assert info.value.retryable is retryable and info.value.gone is gone
    if status == 429:
        assert info.value.retry_after == 7.0


def test_signature_matches_standardwebhooks_and_detects_tampering() -> None:
    secret = new_secret()
    body = b'{"type":"incident.opened"}'
    ts = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(decode_secret(secret), "msg_1", ts, body),
    }
    Webhook(secret).verify(body, headers)
    doc_verify()(secret, headers, body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body + b" ", headers)
    with pytest.raises(ValueError, match="does not match"):
        doc_verify()(secret, headers, body.replace(b"opened", b"resolved"))
    with pytest.raises(ValueError, match="does not match"):
        doc_verify()(new_secret(), headers, body)
    old = dict(headers, **{"webhook-timestamp": str(ts - 3600)})
    old["webhook-signature"] = sign(decode_secret(secret), "msg_1", ts - 3600, body)
    with pytest.raises(ValueError, match="too old"):
        doc_verify()(secret, old, body)


@pytest.mark.parametrize("bad", ["", "whsec_", "whsec_!!!notbase64", "whsec_c2hvcnQ="])
def test_bad_secrets_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="secret"):
        decode_secret(bad)


async def test_webhook_survives_500_429_hang_then_recovers(receiver: Receiver) -> None:
    secret = new_secret()
    receiver.script = [500, (429, {"Retry-After": "1"}), ("hang", 3.0)]
    trs = [opened("a" * 16), opened("b" * 16), resolved("a" * 16)]
    box = outbox_with(["hook"], trs)
    sink = WebhookSink("hook", receiver.url, secret, timeout=0.5)
    policy = RetryPolicy(backoff_initial=0.2, backoff_max=1.0)
    sender = await run_until_drained(box, [sink], policy)

    verify = doc_verify()
    ids = [r.headers["webhook-id"] for r in receiver.requests]
    # Head-of-line retries of the first event, then the rest in order.
    first = box.rows(sink="hook")[-1].event_id
    assert ids[:4] == [first] * 4
    ok = receiver.ok()
    assert [json.loads(r.body)["type"] for r in ok] == [
        "incident.opened",
        "incident.opened",
        "incident.resolved",
    ]
    assert len({r.headers["webhook-id"] for r in ok}) == 3  # no duplicate page delivered
    for r in receiver.requests:
        verify(secret, lower(r.headers), r.body)
        Webhook(secret).verify(r.body, lower(r.headers))
    # Backoff observed: >= the jitter floor after the 500, >= Retry-After after the 429.
    t = [r.at for r in receiver.requests]
    assert t[1] - t[0] >= 0.1 - 0.01
    assert t[2] - t[1] >= 1.0 - 0.01
    assert sender.stats()["hook"].failed == 3 and sender.stats()["hook"].succeeded == 3
    assert box.rows(sink="hook")[-1].attempts == 4


async def test_pagerduty_trigger_resolve_and_throttle(receiver: Receiver, tmp_path: Path) -> None:
    key_file = tmp_path / "pd-key"
    key_file.write_text("R0UT1NGKEY0123456789abcdef012345\n")
    settings = build(
        SinkSettings,
        {
            "name": "pd",
            "type": "pagerduty",
            "url": receiver.url,
            "routing_key_file": str(key_file),
            "runbook_url": "https://runbooks.example/{cause}",
            "timeout": 2.0,
        },
    )
    built = build_sinks([settings])
    receiver.script = [(429, {"Retry-After": "0"}), 502]
    box = outbox_with(["pd"], [opened("c" * 16), resolved("c" * 16)])
    await run_until_drained(box, built.sinks, RetryPolicy(backoff_initial=0.05, backoff_max=0.1))
    bodies = [json.loads(r.body) for r in receiver.ok()]
    assert [b["event_action"] for b in bodies] == ["trigger", "resolve"]
    assert bodies[0]["dedup_key"] == bodies[1]["dedup_key"]
    assert all(b["routing_key"] == "R0UT1NGKEY0123456789abcdef012345" for b in bodies)
    p = bodies[0]["payload"]
    assert p["severity"] == "critical" and p["source"] == "node-a"
    assert p["component"] == "switch:leaf1:swp12:3" and p["group"] == "pfc_storm"
    assert p["custom_details"]["evidence"][0].startswith("evidence 0")
    assert bodies[0]["links"] == [{"href": "https://runbooks.example/pfc_storm", "text": "Runbook"}]


def test_pagerduty_event_is_capped() -> None:
    sink = PagerDutySink("pd", "key")
    inc = to_json(make_incident("d" * 16, evidence_count=5000))
    ev = {"type": "incident.opened", "dedup_key": "x" * 300, "severity": "error", "data": inc}
    body = sink.event(ev)
    assert len(json.dumps(body).encode()) <= 512_000
    assert len(body["dedup_key"]) == 255
    assert len(body["payload"]["summary"]) <= 1024


def test_pagerduty_needs_a_key(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    s = build(SinkSettings, {"name": "pd", "type": "pagerduty", "routing_key_file": str(empty)})
    with pytest.raises(ConfigError, match="empty"):
        build_sinks([s])
    s = build(
        SinkSettings,
        {"name": "pd", "type": "pagerduty", "routing_key_file": str(tmp_path / "nope")},
    )
    with pytest.raises(ConfigError, match="cannot read secret"):
        build_sinks([s])


def test_slack_message_is_compact_and_readable() -> None:
    ev_open = {
        "type": "incident.opened",
        "severity": "critical",
        "data": to_json(make_incident("e" * 16)),
    }
    msg = message([ev_open], runbook_url="https://rb/{cause}")
    text = msg["blocks"][0]["text"]["text"]
    assert "*PFC pause storm* on `node-a`" in text
    assert "culprit `switch:leaf1:swp12:3`" in text and "GPUs 0-3" in text
    assert (
        "164 GPU·s lost" in text
        and "• evidence 0" in text
        and "<https://rb/pfc_storm|runbook>" in text
    )
    ev_res = {
        "type": "incident.resolved",
        "severity": "critical",
        "data": to_json(make_incident("e" * 16, state="resolved", resolved_at=1.0)),
    }
    assert message([ev_res])["text"].startswith(":white_check_mark: Resolved:")
    nasty = to_json(make_incident("f" * 16, node="<!channel>&"))
    assert "<!channel>" not in message([{"type": "incident.opened", "data": nasty}])["text"]


async def test_slack_follow_up_and_no_updates_by_default(receiver: Receiver) -> None:
    # max_batch 1: a backlog of opened+resolved would otherwise be grouped in one message.
    s = build(SinkSettings, {"name": "chat", "type": "slack", "url": receiver.url, "max_batch": 1})
    built = build_sinks([s])
    assert built.routes[0].send_updates is False
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    router = Router("prod", built.routes)
    inc = make_incident("9" * 16)
    with box.transaction() as conn:
        router.route(conn, "opened", 1.0, to_json(inc))
        router.route(conn, "updated", 2.0, to_json(make_incident("9" * 16, revision=2)))
        router.route(
            conn,
            "resolved",
            3.0,
            to_json(make_incident("9" * 16, revision=3, state="resolved", resolved_at=3.0)),
        )
    await run_until_drained(box, built.sinks, RetryPolicy())
    texts = [json.loads(r.body)["text"] for r in receiver.ok()]
    assert len(texts) == 2 and texts[1].startswith(":white_check_mark: Resolved")


async def test_other_4xx_dead_letters_and_410_disables(receiver: Receiver) -> None:
    receiver.script = [400]
    box = outbox_with(["hook"], [opened("1" * 16), opened("2" * 16)])
    sink = WebhookSink("hook", receiver.url, new_secret(), timeout=1.0)
    await run_until_drained(box, [sink], RetryPolicy(backoff_initial=0.01))
    assert [r.state for r in box.rows(sink="hook")] == ["delivered", "dead"]
    assert "HTTP 400" in (box.rows(state="dead")[0].last_error or "")

    receiver.script = [410]
    box2 = outbox_with(["hook"], [opened("3" * 16)])
    sender = OutboxSender(box2, [WebhookSink("hook", receiver.url, new_secret())])
    await sender.start()
    try:
        assert await sender.drain(within=5.0)
    finally:
        await sender.close()
    assert sender.stats()["hook"].disabled
    assert [r.state for r in box2.rows()] == ["pending"]


async def test_unreachable_receiver_is_retried(receiver: Receiver) -> None:
    from tests.conftest import free_port

    dead_url = f"http://127.0.0.1:{free_port()}/hook"
    box = outbox_with(["hook"], [opened("4" * 16)])
    sink = WebhookSink("hook", dead_url, new_secret(), timeout=0.5)
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.05, backoff_max=0.05))
    await sender.start()
    try:
        for _ in range(200):
            if sender.stats()["hook"].failed >= 2:
                break
            await asyncio.sleep(0.02)
        # The receiver comes up at another address: point the sink there (a config reload).
        sink.url = receiver.url
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert sender.stats()["hook"].failed >= 2
    assert len(receiver.ok()) == 1
    assert (
        "ClientConnectorError" in (box.rows()[0].last_error or "")
        or box.rows()[0].state == "delivered"
    )


async def test_webhook_batch_when_backlogged(receiver: Receiver) -> None:
    secret = new_secret()
    box = outbox_with(["hook"], [opened(f"{i:016x}") for i in range(7)])
    sink = WebhookSink("hook", receiver.url, secret, max_batch=5)
    await run_until_drained(box, [sink], RetryPolicy())
    bodies = [json.loads(r.body) for r in receiver.ok()]
    assert [b["type"] for b in bodies] == ["incident.batch", "incident.batch"]
    assert [len(b["data"]["events"]) for b in bodies] == [5, 2]
    for r in receiver.ok():
        doc_verify()(secret, lower(r.headers), r.body)


def test_alertmanager_alert_shape() -> None:
    sink = AlertmanagerSink(
        "am",
        "http://127.0.0.1:1/",
        resend_interval=60.0,
        runbook_url="https://rb/{cause}",
        generator_url="http://node-a:9477/api/v1/incidents",
        clock=lambda: 1_760_000_100.0,
    )
    assert sink.url == "http://127.0.0.1:1/api/v2/alerts"
    ev = {
        "type": "incident.opened",
        "severity": "critical",
        "cluster": "prod",
        "dedup_key": "dk",
        "data": to_json(make_incident("a1" * 8)),
    }
    a = sink.alert(ev, 1_760_000_100.0)
    assert a["labels"] == {
        "alertname": "FabricwatchGPUStall",
        "cause": "pfc_storm",
        "node": "node-a",
        "culprit": "switch:leaf1:swp12:3",
        "severity": "critical",
        "cluster": "prod",
    }
    assert a["annotations"]["runbook_url"] == "https://rb/pfc_storm"
    assert a["annotations"]["evidence"].count("\n") == 1
    assert a["endsAt"] == "2025-10-09T08:59:00.000Z"  # now + 4 x 60 s
    assert a["startsAt"] == "2025-10-09T08:53:20.000Z"  # the onset
    res = dict(
        ev,
        type="incident.resolved",
        data=to_json(make_incident("a1" * 8, state="resolved", resolved_at=1_760_000_060.0)),
    )
    assert sink.alert(res, 1_760_000_100.0)["endsAt"] == "2025-10-09T08:54:20.000Z"  # resolve time
    # A resolve stamped before the onset (clock step) must not make Alertmanager reject the POST.
    early = dict(
        ev,
        type="incident.resolved",
        data=to_json(make_incident("a1" * 8, state="resolved", resolved_at=T0 - 5)),
    )
    bad = sink.alert(early, 1_760_000_100.0)
    assert bad["endsAt"] == bad["startsAt"]


def test_sink_settings_validation() -> None:
    for bad, match in [
        ({"name": "Bad Name", "type": "slack", "url": "http://x"}, "sink name"),
        ({"name": "s", "type": "slack"}, "needs a url"),
        ({"name": "s", "type": "webhook", "url": "http://x"}, "secret_file"),
        ({"name": "s", "type": "webhook", "url": "ftp://x", "secret_file": "f"}, "http"),
        ({"name": "s", "type": "carrier-pigeon"}, "type"),
        ({"name": "s", "type": "slack", "url": "http://x", "min_severity": "meh"}, "min_severity"),
        ({"name": "s", "type": "slack", "url": "http://x", "colour": "red"}, "colour"),
    ]:
        with pytest.raises(ConfigError, match=match):
            build(SinkSettings, bad, prefix="alerting.sinks[0]")


def test_token_bucket_from_settings() -> None:
    s = build(
        SinkSettings,
        {"name": "chat", "type": "slack", "url": "http://x", "rate_per_minute": 6, "burst": 2},
    )
    bucket = build_sinks([s]).limits["chat"]
    assert isinstance(bucket, TokenBucket)
    assert (bucket.rate, bucket.burst) == (0.1, 2)
