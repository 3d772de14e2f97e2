"""Generic JSON webhook sink, signed per Standard Webhooks 1.0.

The body is the event envelope (``type``, ``timestamp``, ``data`` = the
``fabricwatch.incident/v1`` document, plus ``event_id`` and ``dedup_key``).
Headers: ``webhook-id`` (the event id: constant across retries, the
receiver's idempotency key), ``webhook-timestamp`` (Unix seconds of this
attempt) and ``webhook-signature`` = ``v1,`` + base64(HMAC-SHA256(secret,
"<id>.<timestamp>.<body>")). The secret is ``whsec_`` + base64 (the
``standardwebhooks`` libraries' format) read from a file.

A backlog of several transitions (flood control, ``max_batch`` > 1) goes as
one ``incident.batch`` message whose ``data.events`` are the envelopes.

A fleet job incident (``data.group.kind == "job"``) goes as
``job_incident.<transition>``, its ``data`` carrying the origin node, the
waiting nodes and the job's ledger entry (``data.ledger``: GPU-seconds lost by
cause, badput), so a receiver can tell it from a node or switch incident.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from fabricwatch.outputs.outbox import Delivery, iso
from fabricwatch.outputs.sinks._http import HttpSink

SECRET_PREFIX = "whsec_"  # noqa: S105 - a format prefix, not a secret


def decode_secret(text: str) -> bytes:
    """``whsec_<base64>`` (or bare base64) -> key bytes; ValueError if not base64 or empty."""
    raw = text.strip().removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        msg = "webhook secret must be whsec_ followed by base64"
        raise ValueError(msg) from None
    if len(key) < 16:
        msg = "webhook secret must decode to at least 16 bytes"
        raise ValueError(msg)
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256(id.timestamp.body)>``."""
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signed_headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers plus the content type."""
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, msg_id, timestamp, body),
    }


def event_of(d: Delivery) -> dict[str, Any]:
    """The envelope as sent: a fleet job incident's type is ``job_incident.<transition>``."""
    ev = d.event()
    data = ev.get("data")
    group = data.get("group") if isinstance(data, dict) else None
    if isinstance(group, dict) and group.get("kind") == "job":
        ev["type"] = f"job_incident.{d.transition}"
    return ev


def batch_body(batch: Sequence[Delivery], now: float) -> tuple[str, bytes]:
    """(message id, body) of a delivery batch; a single event is sent as it is."""
    if len(batch) == 1:
        ev = event_of(batch[0])
        if ev["type"] == batch[0].event()["type"]:
            return batch[0].event_id, batch[0].body()
        return batch[0].event_id, json.dumps(ev, separators=(",", ":")).encode()
    ids = "|".join(d.event_id for d in batch)
    msg_id = "msg_" + hashlib.sha256(ids.encode()).hexdigest()[:32]
    body = {
        "type": "incident.batch",
        "timestamp": iso(now),
        "data": {"events": [event_of(d) for d in batch]},
    }
    return msg_id, json.dumps(body, separators=(",", ":")).encode()


class WebhookSink(HttpSink):
    """POSTs signed event envelopes."""

    def __init__(
        self,
        name: str,
        url: str,
        secret: str,
        *,
        timeout: float = 10.0,
        max_batch: int = 1,
        bearer_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name, timeout=timeout, max_batch=max_batch, bearer_token=bearer_token)
        self.url = url
        self._key = decode_secret(secret)
        self._clock = clock

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Sign (with this attempt's timestamp) and POST."""
        now = self._clock()
        msg_id, body = batch_body(batch, now)
        await self._http.post(self.url, body, signed_headers(self._key, msg_id, int(now), body))
