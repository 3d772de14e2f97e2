"""Fixtures of the NIC collector tests: fixture trees, a fake clock, a network namespace."""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.nic._collector import NicCollector
from fabricwatch.collectors.nic._ethtool import EthtoolSource
from fabricwatch.collectors.nic._settings import NicSettings
from fabricwatch.readings import Reading
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_nic import NicFixture

CLONE_NEWNET = 0x40000000
REPO_DOCS = Path(__file__).resolve().parents[2] / "docs" / "signals.md"


class Clock:
    """A monotonic clock the test advances."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fx(tmp_path: Path) -> NicFixture:
    return NicFixture(tmp_path / "sys", tmp_path / "ethtool")


class Harness:
    """A collector over a fixture tree feeding a real SnapshotStore on the same clock."""

    def __init__(
        self,
        fx: NicFixture,
        clock: Clock,
        settings: dict[str, Any] | None = None,
        ethtool: EthtoolSource | None = None,
        sys_root: Path | None = None,
    ) -> None:
        table: dict[str, Any] = {"ethtool_stats_dir": str(fx.ethtool_dir)}
        table.update(settings or {})
        self.settings = build(NicSettings, table, prefix="collectors.nic")
        self.clock = clock
        env = CollectorEnv(node="n1", sys_root=sys_root or fx.sys_root, monotonic=clock)
        self.collector = NicCollector(self.settings, env, ethtool=ethtool)
        self.store = SnapshotStore()
        self.store.register("nic", self.collector.metrics())
        self.last: list[Reading] = []

    async def start(self) -> Harness:
        await self.collector.start()
        return self

    async def cycle(self, advance: float = 1.0) -> list[Reading]:
        self.clock.tick(advance)
        self.last = list(await self.collector.collect())
        result = self.store.ingest("nic", self.last, self.clock.now)
        assert result.rejected == 0, result.reasons
        return self.last

    def value(self, name: str, *labels: str) -> float | None:
        s = self.store.get(f"fabricwatch_nic_{name}", labels)
        return None if s is None else s.value

    def rate(self, name: str, *labels: str) -> float | None:
        s = self.store.get(f"fabricwatch_nic_{name}", labels)
        return None if s is None or s.rate is None else s.rate.per_second

    def now(self, name: str) -> dict[tuple[str, ...], float]:
        """Readings of one family in the latest cycle."""
        full = f"fabricwatch_nic_{name}"
        return {r.labels: r.value for r in self.last if r.name == full}


@pytest.fixture
async def harness(fx: NicFixture, clock: Clock) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(
        settings: dict[str, Any] | None = None,
        ethtool: EthtoolSource | None = None,
        sys_root: Path | None = None,
    ) -> Harness:
        h = Harness(fx, clock, settings, ethtool, sys_root)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.collector.close()


def _netns_available() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2 'ip' binary is missing"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN)"
    return None


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace with a veth pair ``fwa``/``fwb`` (both up); always removed."""
    reason = _netns_available()
    if reason:
        pytest.skip(reason)
    name = f"fwtest-{secrets.token_hex(4)}"
    made = subprocess.run(
        ["ip", "netns", "add", name], check=False, capture_output=True, text=True, timeout=20
    )
    if made.returncode != 0:
        pytest.skip(f"network namespaces not permitted here: {made.stderr.strip()}")
    try:
        for cmd in (
            ["ip", "-n", name, "link", "add", "fwa", "type", "veth", "peer", "name", "fwb"],
            ["ip", "-n", name, "link", "set", "fwa", "up"],
            ["ip", "-n", name, "link", "set", "fwb", "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True, timeout=20)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True, timeout=20)


def socket_in_netns(name: str) -> socket.socket:
    """A UDP socket created inside namespace ``name`` (ioctls on it resolve devices there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    box: dict[str, Any] = {}

    def worker() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                box["error"] = OSError(ctypes.get_errno(), "setns failed")
                return
            try:
                box["sock"] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            finally:
                libc.setns(own, CLONE_NEWNET)
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=worker)
    t.start()
    t.join(timeout=10)
    if "error" in box:
        raise box["error"]
    sock: socket.socket = box["sock"]
    return sock
