"""The demo's on-call: a webhook receiver on 127.0.0.1 that verifies and keeps pages.

It accepts what the daemon's generic webhook sink sends (Standard Webhooks
1.0: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature`` =
``v1,<base64 HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>``), checks the
signature with the shared secret, and records each incident transition as a
:class:`Page`. A batch (``incident.batch``) is unpacked into its events.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

PATH = "/hooks/fabricwatch"


@dataclass(frozen=True, slots=True)
class Page:
    """One incident transition the receiver got."""

    transition: str
    incident: str
    cause: str
    culprit: str
    severity: str
    summary: str
    received_at: float


def new_secret(path: Path) -> bytes:
    """Write a fresh ``whsec_`` signing secret to ``path`` (mode 0600); return its key."""
    key = os.urandom(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("whsec_" + base64.b64encode(key).decode() + "\n")
    return key


def verify(key: bytes, headers: dict[str, str], body: bytes) -> bool:
    """True when one of the ``webhook-signature`` values signs ``body`` with ``key``."""
    msg_id = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    sigs = headers.get("webhook-signature", "")
    if not msg_id or not ts.isdigit() or not sigs:
        return False
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    want = base64.b64encode(mac).decode()
    for sig in sigs.split():
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(value, want):
            return True
    return False


class WebhookReceiver:
    """An aiohttp server on 127.0.0.1 collecting signed incident pages.

    Args:
        key: the signing key shared with the daemon's webhook sink.
        on_page: called for every page received (on the event loop).
    """

    def __init__(self, key: bytes, on_page: Callable[[Page], None] | None = None) -> None:
        self._key = key
        self._on_page = on_page
        self.pages: list[Page] = []
        self.rejected = 0
        self._seen: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Where the daemon should POST."""
        return f"http://127.0.0.1:{self.port}{PATH}"

    async def start(self) -> None:
        """Listen on a free loopback port."""
        app = web.Application(client_max_size=4 << 20)
        app.router.add_post(PATH, self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not verify(self._key, headers, body):
            self.rejected += 1
            return web.json_response({"error": "bad signature"}, status=401)
        try:
            doc = json.loads(body)
        except ValueError:
            self.rejected += 1
            return web.json_response({"error": "not JSON"}, status=400)
        if not isinstance(doc, dict):
            self.rejected += 1
            return web.json_response({"error": "not an event"}, status=400)
        events: list[Any] = [doc]
        if doc.get("type") == "incident.batch":
            data = doc.get("data")
            events = data.get("events", []) if isinstance(data, dict) else []
        for ev in events:
            self._record(ev)
        return web.Response(status=204)

    def _record(self, ev: Any) -> None:
        if not isinstance(ev, dict):
            return
        data = ev.get("data")
        if not isinstance(data, dict):
            return
        event_id = str(ev.get("event_id", ""))
        if event_id and event_id in self._seen:
            return  # at-least-once delivery: a retry of a page already shown
        self._seen.add(event_id)
        culprit = data.get("culprit")
        page = Page(
            transition=str(ev.get("type", "")).removeprefix("incident."),
            incident=str(data.get("key", "")),
            cause=str(data.get("cause", "")),
            culprit=str(culprit.get("key", "")) if isinstance(culprit, dict) else "",
            severity=str(ev.get("severity", "")),
            summary=str(data.get("summary", "")),
            received_at=time.monotonic(),
        )
        self.pages.append(page)
        if self._on_page is not None:
            self._on_page(page)
