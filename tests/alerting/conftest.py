"""Fixtures of the alerting tests: incidents, a scripted loopback HTTP receiver,
a real Mosquitto broker and a real Alertmanager on free loopback ports."""

from __future__ import annotations

import asyncio
import base64
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from fabricwatch.engine.causes import Cause
from fabricwatch.engine.evidence import Culprit, Evidence
from fabricwatch.engine.incidents import Incident, IncidentTransition
from tests.conftest import free_port

T0 = 1_760_000_000.0


def make_incident(
    key: str = "0123456789abcdef",
    *,
    node: str = "node-a",
    cause: str = "pfc_storm",
    kind: str = "stall",
    state: str = "open",
    revision: int = 1,
    onset: float = T0,
    gpus: tuple[str, ...] = ("0", "1", "2", "3"),
    gpu_seconds: float = 164.0,
    resolved_at: float | None = None,
    evidence_count: int = 2,
) -> Incident:
    """An incident as the engine produces it."""
    culprit = Culprit(
        "switch:leaf1:swp12:3", "switch_port", (("switch", "leaf1"), ("port", "swp12"))
    )
    evidence = tuple(
        Evidence(
            Cause(cause),
            "fabricwatch_switch_pfc_pause_ratio",
            culprit,
            0.9 - 0.1 * i,
            0.97,
            0.03,
            f"evidence {i}: pause 97 % of the time on leaf1 swp12 prio 3 (30x baseline)",
        )
        for i in range(evidence_count)
    )
    return Incident(
        key=key,
        node=node,
        kind=kind,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        cause=cause,
        confidence=0.93,
        culprit=culprit,
        summary=f"GPUs 0-3 idle for 41 s; cause: {cause}; confidence 0.93",
        onset=onset,
        opened_at=onset + 2,
        updated_at=onset + 2 + revision,
        ended_at=resolved_at,
        resolved_at=resolved_at,
        gpus=gpus,
        job="slurm:42",
        gpu_seconds=gpu_seconds,
        cost=None,
        episodes=1,
        evidence=evidence,
        missing=(),
        revision=revision,
    )


def opened(key: str, **kw: Any) -> IncidentTransition:
    inc = make_incident(key, **kw)
    return IncidentTransition("opened", inc.opened_at, inc)


def resolved(key: str, **kw: Any) -> IncidentTransition:
    kw.setdefault("revision", 2)
    end = float(kw.get("onset", T0)) + 60
    inc = make_incident(key, state="resolved", resolved_at=end, **kw)
    return IncidentTransition("resolved", end, inc)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Receiver:
    """A loopback HTTP receiver that follows a script, then answers 200.

    Script entries: an int status (``429``), ``(status, {headers})``, or
    ``("hang", seconds)`` to stall past the client's timeout.
    """

    script: list[Any] = field(default_factory=list)
    delay: float = 0.0
    requests: list[Received] = field(default_factory=list)
    url: str = ""
    runner: web.AppRunner | None = None
    ok_body: bytes = b'{"status":"success"}'

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        # Recorded on arrival: a request in flight when its sender dies still counts
        # for the sender's lifetime.
        rec = Received(time.monotonic(), request.path, dict(request.headers), body, 0)
        self.requests.append(rec)
        action: Any = self.script.pop(0) if self.script else 200
        headers: dict[str, str] = {}
        if isinstance(action, tuple) and action[0] == "hang":
            await asyncio.sleep(float(action[1]))
            return web.Response(status=200)  # too late: the client gave up
        if isinstance(action, tuple):
            status, headers = action
        else:
            status = int(action)
        if self.delay:
            await asyncio.sleep(self.delay)
        rec.status = status
        body_out = self.ok_body if status < 300 else b"nope"
        return web.Response(status=status, headers=headers, body=body_out)

    def ok(self) -> list[Received]:
        return [r for r in self.requests if 200 <= r.status < 300]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        # Bound here and handed over open: no other test can take the port meanwhile.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        site = web.SockSite(self.runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{port}/hook"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    for _ in range(1000):
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {within} s")


class Mosquitto:
    """A real broker on a free loopback port; can be stopped and restarted on that port."""

    def __init__(self, workdir: Path, *, extra: str = "") -> None:
        self.dir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "persistence true\n"
            "queue_qos0_messages true\n"
            f"persistence_location {workdir}/\n"
            "log_dest stdout\n"
            # Run as the test's user: a root-started broker would otherwise drop to the
            # `mosquitto` user and fail to read or write files under pytest's 0700 tmp dirs.
            f"user {getpass.getuser()}\n" + (extra or "allow_anonymous true\n")
        )

    def start(self) -> None:
        log = (self.dir / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        wait_port(self.port, self.proc, "mosquitto")

    def stop(self) -> None:
        """SIGTERM: the broker saves its persistent sessions (as systemd stops it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (Debian package mosquitto)")
    work = tmp_path / "mosquitto"
    work.mkdir()
    broker = Mosquitto(work)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@dataclass
class Alertmanager:
    url: str
    proc: subprocess.Popen[bytes]

    def alerts(self) -> list[dict[str, Any]]:
        import json

        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=5) as resp:
            data: list[dict[str, Any]] = json.loads(resp.read())
        return data


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (Debian package prometheus-alertmanager)")
    work = tmp_path_factory.mktemp("alertmanager")
    conf = work / "alertmanager.yml"
    conf.write_text(
        "route:\n  receiver: devnull\n  group_wait: 1s\n  group_interval: 1s\n"
        "receivers:\n  - name: devnull\n"
    )
    port = free_port()
    log = (work / "am.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={conf}",
            f"--storage.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_port(port, proc, "alertmanager", within=20.0)
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        yield Alertmanager(url, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def python_env() -> dict[str, str]:
    """Environment for helper processes: the repo importable as ``tests.alerting``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
