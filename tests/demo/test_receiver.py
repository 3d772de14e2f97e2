"""The demo's webhook receiver, on a real loopback port, fed by the daemon's real webhook sink."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fabricwatch.demo.receiver import Page, WebhookReceiver, new_secret, verify
from fabricwatch.errors import DeliveryError
from fabricwatch.outputs.outbox import Delivery, build_event
from fabricwatch.outputs.sinks.webhook import WebhookSink, signed_headers


def _incident(key: str = "abc123", cause: str = "pfc_storm") -> dict[str, Any]:
    return {
        "schema": "fabricwatch.incident/v1",
        "key": key,
        "kind": "stall",
        "cause": cause,
        "culprit": {"key": "switch:leaf1:Ethernet0:3", "kind": "switch_port", "labels": {}},
        "summary": "GPUs 0-7 idle for 2 s; cause: PFC pause storm",
        "revision": 1,
    }


def _delivery(transition: str = "opened", key: str = "abc123") -> Delivery:
    ev = build_event(
        transition=transition,
        at=time.time(),
        incident=_incident(key),
        cluster="demo",
        severity="critical",
    )
    return Delivery(
        id=1,
        sink="demo-oncall",
        event_id=ev["event_id"],
        dedup_key=ev["dedup_key"],
        incident_key=key,
        transition=transition,
        revision=1,
        payload=json.dumps(ev),
        created_at=time.time(),
        state="pending",
        attempts=0,
        next_attempt_at=0.0,
        last_attempt_at=None,
        last_error=None,
        done_at=None,
    )


@pytest.fixture
def secret(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "secret"
    return path, new_secret(path)


@pytest.fixture
async def receiver(secret: tuple[Path, bytes]) -> AsyncIterator[WebhookReceiver]:
    got: list[Page] = []
    r = WebhookReceiver(secret[1], got.append)
    await r.start()
    try:
        yield r
    finally:
        await r.close()


def test_secret_file_is_private_and_decodes(secret: tuple[Path, bytes]) -> None:
    path, key = secret
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text().strip()
    assert text.startswith("whsec_")
    assert base64.b64decode(text.removeprefix("whsec_")) == key


async def test_real_webhook_sink_pages_arrive_verified(
    receiver: WebhookReceiver, secret: tuple[Path, bytes]
) -> None:
    sink = WebhookSink("demo-oncall", receiver.url, secret[0].read_text().strip())
    await sink.start()
    try:
        await sink.deliver([_delivery("opened")])
        await sink.deliver([_delivery("resolved")])
        # A backlog goes as one signed incident.batch message.
        await sink.deliver([_delivery("opened", "k2"), _delivery("updated", "k2")])
    finally:
        await sink.close()
    assert [(p.transition, p.incident) for p in receiver.pages] == [
        ("opened", "abc123"),
        ("resolved", "abc123"),
        ("opened", "k2"),
        ("updated", "k2"),
    ]
    p = receiver.pages[0]
    assert (p.cause, p.culprit, p.severity) == ("pfc_storm", "switch:leaf1:Ethernet0:3", "critical")
    assert receiver.rejected == 0


async def test_retry_of_the_same_event_is_shown_once(
    receiver: WebhookReceiver, secret: tuple[Path, bytes]
) -> None:
    sink = WebhookSink("demo-oncall", receiver.url, secret[0].read_text().strip())
    d = _delivery("opened")
    try:
        for _ in range(3):  # at-least-once delivery: the sink may resend
            await sink.deliver([d])
    finally:
        await sink.close()
    assert len(receiver.pages) == 1


async def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(url, data=body, headers=headers) as r,
    ):
        return r.status


async def test_wrong_key_missing_headers_and_garbage_are_refused(
    receiver: WebhookReceiver,
) -> None:
    body = json.dumps({"type": "incident.opened", "data": _incident()}).encode()
    wrong = signed_headers(b"k" * 24, "msg_1", int(time.time()), body)
    assert await _post(receiver.url, body, wrong) == 401
    assert await _post(receiver.url, body, {"Content-Type": "application/json"}) == 401
    ok_key = receiver._key  # the test shares the receiver's key
    garbage = b"\x00\xffnot json{"
    assert await _post(receiver.url, garbage, signed_headers(ok_key, "m2", 1, garbage)) == 400
    array = b"[1, 2]"
    assert await _post(receiver.url, array, signed_headers(ok_key, "m3", 1, array)) == 400
    assert receiver.pages == []
    assert receiver.rejected == 4
    # Events without an incident document are ignored, not fatal.
    junk = json.dumps({"type": "incident.opened", "data": "nope"}).encode()
    assert await _post(receiver.url, junk, signed_headers(ok_key, "m4", 1, junk)) == 204
    assert receiver.pages == []


async def test_truncated_request_then_recovery(
    receiver: WebhookReceiver, secret: tuple[Path, bytes]
) -> None:
    # A sender that dies mid-body: the receiver drops that request and keeps serving.
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", receiver.port), timeout=5
    )
    writer.write(
        b"POST /hooks/fabricwatch HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n"
        b'webhook-id: m\r\nwebhook-timestamp: 1\r\nwebhook-signature: v1,xx\r\n\r\n{"type"'
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    del reader
    sink = WebhookSink("demo-oncall", receiver.url, secret[0].read_text().strip())
    try:
        await sink.deliver([_delivery("opened")])
    finally:
        await sink.close()
    assert len(receiver.pages) == 1


async def test_closed_receiver_refuses_connections(secret: tuple[Path, bytes]) -> None:
    r = WebhookReceiver(secret[1])
    await r.start()
    url = r.url
    await r.close()
    sink = WebhookSink("demo-oncall", url, secret[0].read_text().strip(), timeout=2)
    try:
        with pytest.raises(DeliveryError):
            await sink.deliver([_delivery()])
    finally:
        await sink.close()


def test_verify_accepts_any_of_several_signatures() -> None:
    key = b"s" * 24
    body = b"{}"
    good = signed_headers(key, "id1", 1700000000, body)
    both = dict(good)
    both["webhook-signature"] = "v1,AAAA " + good["webhook-signature"]
    assert verify(key, {k.lower(): v for k, v in both.items()}, body)
    assert not verify(key, {k.lower(): v for k, v in good.items()}, body + b" ")
    bad_ts = {k.lower(): v for k, v in good.items()}
    bad_ts["webhook-timestamp"] = "soon"
    assert not verify(key, bad_ts, body)
