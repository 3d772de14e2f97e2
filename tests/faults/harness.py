"""The fault suite's harness: a real daemon process on the simulated node, a
verifying webhook receiver that can misbehave, and the page checks."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from fabricwatch.demo.receiver import verify
from tests.conftest import REPO, free_port

SPEED = 20.0
"""Virtual seconds per real second inside the daemon process."""


@dataclass
class Page:
    """One incident transition acknowledged (2xx) by the receiver."""

    event_id: str
    transition: str
    key: str
    revision: int
    cause: str
    at: float  # real monotonic arrival


@dataclass
class Receiver:
    """Signed-webhook receiver on loopback. ``script`` entries: a status to answer
    (401, 403, 500...) or ``("hang", seconds)`` (then 503: never acknowledged)."""

    key: bytes
    script: list[Any] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    bad_signatures: int = 0
    url: str = ""
    runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not verify(self.key, headers, body):
            self.bad_signatures += 1
            self.answered.append(401)
            return web.Response(status=401)
        action = self.script.pop(0) if self.script else 204
        if isinstance(action, tuple):
            self.answered.append(503)  # recorded on arrival: the order requests came in
            await asyncio.sleep(float(action[1]))
            return web.Response(status=503)
        self.answered.append(int(action))
        if action >= 300:
            return web.Response(status=int(action))
        doc = json.loads(body)
        events = doc["data"]["events"] if doc["type"] == "incident.batch" else [doc]
        now = time.monotonic()
        for ev in events:
            d = ev["data"]
            self.pages.append(
                Page(
                    ev["event_id"],
                    str(ev["type"]).removeprefix("incident."),
                    d["key"],
                    int(d["revision"]),
                    d["cause"],
                    now,
                )
            )
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/hook"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def of(self, transition: str) -> list[Page]:
        return [p for p in self.pages if p.transition == transition]


def check_pages(
    pages: list[Page], *, cleared_at: float | None, in_flight: frozenset[str] = frozenset()
) -> dict[str, list[str]]:
    """The suite's page rules; returns each incident's transitions in arrival order.

    - no webhook-id acknowledged twice, except once more for a page that was
      in flight when the daemon was killed (``in_flight``: acknowledged by the
      receiver, maybe not yet marked delivered on disk; at-least-once with a
      stable webhook-id is the contract, and a receiver dedups on it);
    - each incident's first page is ``opened``; nothing follows ``resolved``;
      revisions never go back (order kept);
    - no ``resolved`` before the fault was cleared (no false all-clear).
    """
    ids = [p.event_id for p in pages]
    repeated = {i for i in ids if ids.count(i) > 1}
    assert repeated <= in_flight, f"duplicate webhook-id: {ids}"
    assert all(ids.count(i) <= 2 for i in repeated), f"repeated more than once: {ids}"
    by_key: dict[str, list[Page]] = {}
    seen: set[str] = set()
    for p in pages:
        if p.event_id in seen:
            continue  # the receiver's dedup
        seen.add(p.event_id)
        by_key.setdefault(p.key, []).append(p)
    out: dict[str, list[str]] = {}
    for key, ps in by_key.items():
        kinds = [p.transition for p in ps]
        assert kinds[0] == "opened", (key, kinds)
        assert "resolved" not in kinds[:-1], (key, kinds)
        revs = [p.revision for p in ps]
        assert revs == sorted(revs), (key, revs)
        for p in ps:
            if p.transition == "resolved":
                assert cleared_at is not None and p.at >= cleared_at, "false resolve"
        out[key] = kinds
    return out


@dataclass
class FaultNode:
    """One simulated node whose daemon process the test kills and restarts."""

    root: Path
    receiver: Receiver
    state_dir: Path
    secret_file: Path
    mqtt_port: int = 0
    snmp_port: int = 0
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    cleared_at: float | None = None
    in_flight: frozenset[str] = frozenset()

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    async def start(self, *, ready: bool = True) -> None:
        self.starts += 1
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.faults.nodeproc",
            "--root", str(self.root), "--state-dir", str(self.state_dir),
            "--port", str(self.port), "--hook", self.receiver.url,
            "--secret-file", str(self.secret_file), "--speed", str(SPEED),
            "--mqtt-port", str(self.mqtt_port), "--snmp-port", str(self.snmp_port),
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=str(REPO),
        )  # fmt: skip
        out.close()
        if ready:
            await self.until(lambda: self.get("/-/ready")[0] == 200, "ready", within=60)

    async def signal(self, sig: signal.Signals) -> int:
        assert self.proc is not None
        if sig is not signal.SIGTERM:  # an abrupt end (kill -9, watchdog SIGABRT)
            # What was acknowledged just now may not be marked delivered yet.
            now = time.monotonic()
            self.in_flight |= {p.event_id for p in self.receiver.pages if now - p.at < 1.0}
        self.proc.send_signal(sig)
        rc = await asyncio.wait_for(self.proc.wait(), 30)
        self.proc = None
        return rc

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.proc = None

    def set_fault(self, name: str) -> None:
        (self.root / "condition").write_text(name + "\n")
        if name == "healthy":
            self.cleared_at = time.monotonic()

    async def virtual(self, seconds: float) -> None:
        """Let ``seconds`` of the daemon's virtual time pass."""
        await asyncio.sleep(seconds / SPEED)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str) -> float | None:
        status, text = self.get("/metrics")
        if status != 200:
            return None
        for line in text.splitlines():
            if line.startswith((name + " ", name + "{")) or ("{" in name and line.startswith(name)):
                return float(line.rsplit(" ", 1)[1])
        return None

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    async def until(self, cond: Callable[[], bool], what: str, within: float = 60.0) -> None:
        """Poll ``cond`` (bounded); fail with the daemon's last log lines."""
        for _ in range(int(within / 0.05)):
            if cond():
                return
            if self.proc is not None and self.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-25:])
        raise AssertionError(f"timed out waiting for {what}; daemon log tail:\n{tail}")


def new_key(path: Path) -> bytes:
    key = os.urandom(24)
    path.write_text("whsec_" + base64.b64encode(key).decode() + "\n")
    path.chmod(0o600)
    return key
