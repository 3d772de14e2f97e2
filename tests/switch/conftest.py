"""Fixtures of the switch collector tests: real agents on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricwatch.collector import CollectionFailedError, CollectorEnv
from fabricwatch.collectors.switch._client import NativeV2cSession, SnmpError
from fabricwatch.collectors.switch._collector import SwitchCollector
from fabricwatch.collectors.switch._settings import SwitchSettings, TargetSettings
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_snmp import SimAgent, SimSwitch, demo_switch
from tests.conftest import REPO, free_port

SWITCH_DATA = REPO / "tests" / "data" / "switch"
# The interpreter's own bin directory: the venv that runs the tests, whichever it is.
VENV_BIN = Path(sys.executable).parent


class ManualClock:
    """A monotonic clock the test advances; shared by a simulated switch and the collector."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Snmpsim:
    """A running snmpsim serving the shared recordings and ours."""

    port: int
    log: Path


async def _wait_agent(port: int, community: str, deadline_s: float) -> None:
    session = NativeV2cSession("127.0.0.1", port, community, timeout=0.5, retries=0)
    try:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                await session.get([(1, 3, 6, 1, 2, 1, 1, 5, 0)])
                return
            except SnmpError:
                await asyncio.sleep(0.2)
        msg = f"agent on {port} did not answer within {deadline_s}s"
        raise RuntimeError(msg)
    finally:
        await session.close()


@pytest.fixture(scope="session")
def snmpsim(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpsim]:
    """snmpsim-command-responder on a free loopback UDP port (both recording dirs)."""
    exe = VENV_BIN / "snmpsim-command-responder"
    if not exe.exists():
        pytest.fail(f"{exe} missing: install the test extra (snmpsim)")
    work = tmp_path_factory.mktemp("snmpsim")
    port = free_port(kind=2)  # SOCK_DGRAM
    log = work / "snmpsim.log"
    env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}
    proc = subprocess.Popen(
        [
            str(exe),
            f"--data-dir={shared_data / 'snmprec'}",
            f"--data-dir={SWITCH_DATA}",
            f"--cache-dir={work / 'cache'}",
            f"--agent-udpv4-endpoint=127.0.0.1:{port}",
            f"--logging-method=file:{log}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        asyncio.run(_wait_agent(port, "sonic-sim64", 60.0))
        yield Snmpsim(port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Snmpd:
    """A net-snmp snmpd with SNMPv3 users."""

    port: int
    users: dict[str, tuple[str, str, str, str]]  # user -> (auth proto, auth key, priv, key)


@pytest.fixture(scope="session")
def snmpd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpd]:
    """net-snmp snmpd on a free loopback port, configured for SNMPv3 authPriv."""
    exe = shutil.which("snmpd") or ("/usr/sbin/snmpd" if Path("/usr/sbin/snmpd").exists() else None)
    if exe is None:
        pytest.skip("net-snmp snmpd is not installed (Debian package snmpd)")
    work = tmp_path_factory.mktemp("snmpd")
    users = {
        "fwsha": ("sha", "authpass-sha-1", "aes", "privpass-aes-1"),
        "fwsha256": ("sha256", "authpass-sha2-1", "aes", "privpass-aes-2"),
    }
    net = {"sha": "SHA", "sha256": "SHA-256", "aes": "AES"}
    conf = work / "snmpd.conf"
    lines = ["sysName v3-switch"]
    for user, (a, ak, p, pk) in users.items():
        lines.append(f'createUser {user} {net[a]} "{ak}" {net[p]} "{pk}"')
        lines.append(f"rouser {user} priv")
    conf.write_text("\n".join(lines) + "\n", encoding="ascii")
    port = free_port(kind=2)
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(work / "persist"), "MIBS": ""}
    proc = subprocess.Popen(
        [
            exe,
            "-f",
            "-Lf",
            str(work / "snmpd.log"),
            "-C",
            "-c",
            str(conf),
            "-p",
            str(work / "pid"),
            f"udp:127.0.0.1:{port}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = subprocess.run(
                [
                    "snmpget",
                    "-v3",
                    "-l",
                    "authPriv",
                    "-u",
                    "fwsha",
                    "-a",
                    "SHA",
                    "-A",
                    users["fwsha"][1],
                    "-x",
                    "AES",
                    "-X",
                    users["fwsha"][3],
                    "-r",
                    "0",
                    "-t",
                    "0.5",
                    f"127.0.0.1:{port}",
                    "1.3.6.1.2.1.1.5.0",
                ],
                capture_output=True,
                check=False,
                timeout=10,
            )
            if r.returncode == 0:
                break
            if proc.poll() is not None:
                pytest.fail(f"snmpd exited: {(work / 'snmpd.log').read_text()[-2000:]}")
        else:
            pytest.fail("snmpd did not answer within 15 s")
        yield Snmpd(port, users)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


SNMPD_MESSAGE_MAX = 1472
"""Response size the v2c snmpd sends at most (what agents on a 1500-byte MTU do)."""


@pytest.fixture(scope="session")
def snmpd_v2c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """net-snmp snmpd answering v2c (community ``public``) with responses of at most
    :data:`SNMPD_MESSAGE_MAX` bytes, on a free loopback port; its port."""
    exe = shutil.which("snmpd") or ("/usr/sbin/snmpd" if Path("/usr/sbin/snmpd").exists() else None)
    if exe is None:
        pytest.skip("net-snmp snmpd is not installed (Debian package snmpd)")
    work = tmp_path_factory.mktemp("snmpd-v2c")
    conf = work / "snmpd.conf"
    conf.write_text(
        "rocommunity public 127.0.0.1\nsysName v2c-switch\n"
        f"[snmp] sendMessageMaxSize {SNMPD_MESSAGE_MAX}\n",
        encoding="ascii",
    )
    port = free_port(kind=2)
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(work / "persist"), "MIBS": ""}
    cmd = [exe, "-f", "-Lf", str(work / "snmpd.log"), "-C", "-c", str(conf)]
    proc = subprocess.Popen(
        [*cmd, "-p", str(work / "pid"), f"udp:127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        asyncio.run(_wait_agent(port, "public", 15.0))
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock shared by a simulated switch and the collector."""
    return ManualClock()


@pytest.fixture
async def sim(clock: ManualClock) -> AsyncIterator[tuple[SimSwitch, SimAgent]]:
    """A 4-port simulated leaf (community ``fw-sim``) on the manual clock."""
    sw = demo_switch(4, node="gpu-node-1", clock=clock)
    agent = await SimAgent(sw, community="fw-sim").start()
    try:
        yield sw, agent
    finally:
        agent.close()


def community_file(tmp_path: Path, community: str) -> str:
    """Write a community into a file (secrets only from files) and return its path."""
    p = tmp_path / f"community-{community}"
    p.write_text(community + "\n", encoding="ascii")
    return str(p)


@dataclass
class Harness:
    """A collector wired to a store, with a clock."""

    collector: SwitchCollector
    store: SnapshotStore
    clock: Callable[[], float]
    down: bool = False

    async def poll(self) -> int:
        """One collection, ingested; returns the number of readings.

        When every target failed the collector raises; its health readings
        are ingested all the same (as the supervisor does) and ``down`` is set.
        """
        try:
            readings = await self.collector.collect()
            self.down = False
        except CollectionFailedError as exc:
            readings = exc.readings
            self.down = True
        result = self.store.ingest("switch", readings, self.clock())
        assert result.rejected == 0, result.reasons
        return len(readings)

    def value(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, tuple(labels))
        return None if s is None else s.value

    def rate(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, tuple(labels))
        return None if s is None or s.rate is None else s.rate.per_second


@pytest.fixture
async def make_harness(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Harness]]:
    """Build collectors against loopback agents; closes them at the end."""
    made: list[SwitchCollector] = []

    def build(
        targets: list[TargetSettings],
        *,
        node: str = "gpu-node-1",
        clock: Callable[[], float] = time.monotonic,
        sys_root: Path | None = None,
        **settings: object,
    ) -> Harness:
        st = SwitchSettings(targets=targets, **settings)  # type: ignore[arg-type]
        env = CollectorEnv(
            node=node,
            sys_root=sys_root or tmp_path / "no-sys",
            state_dir=tmp_path,
            monotonic=clock,
        )
        c = SwitchCollector(st, env)
        made.append(c)
        store = SnapshotStore()
        store.register("switch", c.metrics())
        return Harness(c, store, clock)

    yield build
    for c in made:
        await c.close()
