"""SIGHUP applies [alerting] and [mqtt]: a rotated webhook secret is used after
`systemctl reload`, and the outbox is kept (issue 17, item 5)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from fabricwatch.collector import CollectorFactory
from fabricwatch.config import load_config
from fabricwatch.daemon import Daemon
from tests.alerting.conftest import new_secret, opened, resolved


class VerifyingReceiver:
    """Answers 401 unless the Standard Webhooks signature matches the current secret."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.pages: list[dict[str, Any]] = []
        self.refused = 0
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError:
            self.refused += 1
            return web.Response(status=401, text="bad signature")
        self.pages.append({"id": request.headers["webhook-id"], **json.loads(body)})
        return web.Response(text="ok")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _until(cond: Any, what: str, within: float = 20.0) -> None:
    for _ in range(int(within / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_reload_rebuilds_sinks_with_the_rotated_secret_and_keeps_the_outbox(
    tmp_path: Path,
) -> None:
    secret_a, secret_b = new_secret(), new_secret()
    secret_file = tmp_path / "secret"
    secret_file.write_text(secret_a + "\n")
    rec = VerifyingReceiver(secret_a)
    await rec.start()
    cfg_path = tmp_path / "fabricwatch.toml"
    cfg_path.write_text(
        f"""[daemon]
state_dir = "{tmp_path / "state"}"
node = "node1"
tick = 0.1
[web]
listen = "127.0.0.1:0"
[engine]
enabled = false
[alerting]
backoff_initial = "50ms"
backoff_max = "200ms"
[[alerting.sinks]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:{rec.port}/hook"
secret_file = "{secret_file}"
min_severity = "info"
"""
    )
    registry: dict[str, CollectorFactory[Any]] = {}
    daemon = Daemon(load_config(cfg_path, registry), registry, config_path=cfg_path)
    task = asyncio.create_task(daemon.run())
    try:
        await _until(lambda: daemon.alerting is not None and daemon._web is not None, "start")
        assert daemon.db is not None
        daemon.db.record([opened("a" * 16)])
        await _until(lambda: len(rec.pages) == 1, "the opened page")
        # Rotation: the receiver takes the new secret first, the file follows.
        rec.secret = secret_b
        secret_file.write_text(secret_b + "\n")
        daemon.db.record([resolved("a" * 16)])
        await _until(lambda: rec.refused >= 2, "401s with the old secret")
        before = daemon.alerting
        assert await daemon.reload()
        assert daemon.alerting is not before  # rebuilt: the secret file changed
        await _until(lambda: len(rec.pages) == 2, "the resolved page after the reload")
        # A changed [alerting] table is applied too (no restart needed).
        cfg_path.write_text(cfg_path.read_text().replace('min_severity = "info"', ""))
        assert await daemon.reload()
        assert daemon.config.alerting.sinks[0].min_severity == "warning"
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 30)
        if rec.runner is not None:
            await rec.runner.cleanup()
    assert [p["type"] for p in rec.pages] == ["incident.opened", "incident.resolved"]
    assert len({p["id"] for p in rec.pages}) == 2
    assert daemon.db is not None
