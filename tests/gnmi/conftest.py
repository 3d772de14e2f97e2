"""Fixtures of the gNMI collector tests: real gRPC targets on 127.0.0.1, openssl certificates."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricwatch.collector import CollectorEnv
from fabricwatch.collectors.gnmi._collector import GnmiCollector
from fabricwatch.collectors.gnmi._settings import GnmiSettings, GnmiTargetSettings, TlsSettings
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import DegradedError
from fabricwatch.testing.sim_gnmi import ServerTls, SimGnmiServer, SimTarget

NODE = "gpu-node-1"


class ManualClock:
    """A monotonic clock the test advances; shared by a simulated target and the collector."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Pki:
    """PEM files made by the openssl CLI: a CA, a server and a client cert, and a stranger CA."""

    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path

    def server_tls(self, *, mutual: bool = True) -> ServerTls:
        return ServerTls(
            self.server_cert.read_bytes(),
            self.server_key.read_bytes(),
            self.ca.read_bytes() if mutual else None,
        )

    def client_tls(self, *, ca: Path | None = None) -> TlsSettings:
        return TlsSettings(
            ca_file=str(ca or self.ca),
            cert_file=str(self.client_cert),
            key_file=str(self.client_key),
        )


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext, encoding="ascii")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throw-away PKI made with the openssl CLI in a temporary directory."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed (Debian package openssl)")
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "stranger-ca")
    _leaf(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return Pki(
        d,
        d / "ca.pem",
        d / "server.pem",
        d / "server.key",
        d / "client.pem",
        d / "client.key",
        d / "stranger-ca.pem",
    )


@dataclass
class Harness:
    """A collector wired to a store, and the simulated target it subscribes to."""

    collector: GnmiCollector
    store: SnapshotStore
    server: SimGnmiServer
    sim: SimTarget
    clock: Callable[[], float]
    ingested: int = 0
    degraded: int = 0

    async def collect(self) -> list[Reading]:
        """One collection, ingested into the store (as the supervisor does, also when
        every target is down and the collector reports itself degraded)."""
        try:
            readings = list(await self.collector.collect())
        except DegradedError as exc:
            readings = list(exc.readings)
            self.degraded += 1
        result = self.store.ingest("gnmi", readings, self.clock())
        assert result.rejected == 0, result.reasons
        self.ingested += len(readings)
        return readings

    async def until(
        self, what: str, cond: Callable[[], bool], *, within: float = 15.0, step: float = 0.02
    ) -> None:
        """Collect until ``cond()`` holds; bounded in time and iterations."""
        deadline = time.monotonic() + within
        for _ in range(int(within / step) + 1):
            await self.collect()
            if cond():
                return
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(step)
        pytest.fail(f"timed out waiting for: {what}")

    def series(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, tuple(labels))
        return None if s is None else s.value

    def rate(self, name: str, *labels: str) -> float | None:
        s = self.store.get(name, tuple(labels))
        return None if s is None or s.rate is None else s.rate.per_second

    async def step(self, clock: ManualClock, *keys: tuple[str, tuple[str, ...]]) -> None:
        """Advance virtual time; wait until each series in ``keys`` has a sample of that
        instant (each subscription streams on its own, so one arriving says nothing of
        the others), or with no keys until any sample of that instant arrived."""
        clock.advance(seconds := 1.0)
        want = clock.now - 1e-6
        del seconds
        if not keys:
            t = self.collector.target_state(self.collector_target)
            await self.until(f"a sample at t={clock.now}", lambda: t.last_ts >= want)
            return

        def arrived() -> bool:
            for name, labels in keys:
                s = self.store.get(name, labels)
                if s is None or s.updated < want:
                    return False
            return True

        await self.until(f"samples at t={clock.now} of {keys}", arrived)

    async def fresh(self, *keys: tuple[str, tuple[str, ...]]) -> None:
        """Wait until each series has a sample from the current connection, at the current
        virtual time (before stepping after a (re)subscription)."""
        t = self.collector.target_state(self.collector_target)
        now = self.clock()

        def ready() -> bool:
            if t.stream is None or t.anchor_gen != t.stream.generation:
                return False
            for name, labels in keys:
                s = self.store.get(name, labels)
                if s is None or s.updated < now - 1e-6:
                    return False
            return True

        await self.until(f"fresh samples of {keys}", ready)

    @property
    def collector_target(self) -> str:
        return self.collector._targets[0].name


MakeHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_harness(tmp_path: Path) -> AsyncIterator[MakeHarness]:
    """Start a simulated target and a collector subscribed to it; stops both at the end."""
    made: list[tuple[GnmiCollector, SimGnmiServer]] = []

    async def build(
        sim: SimTarget,
        *,
        tls: ServerTls | None = None,
        target: GnmiTargetSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        username: str = "",
        password: str = "",
        start_server: bool = True,
        **settings: object,
    ) -> Harness:
        server = SimGnmiServer(sim, tls=tls, username=username, password=password)
        if start_server:
            await server.start()
        else:
            from tests.conftest import free_port

            server.port = free_port()
        tgt = target or GnmiTargetSettings(name="leaf1", host="127.0.0.1", insecure=True)
        tgt.port = server.port
        settings.setdefault("interval", 0.05)
        settings.setdefault("backoff_initial", 0.05)
        settings.setdefault("backoff_max", 0.2)
        st = GnmiSettings(targets=[tgt], **settings)  # type: ignore[arg-type]
        env = CollectorEnv(
            node=NODE, sys_root=tmp_path / "no-sys", state_dir=tmp_path, monotonic=clock
        )
        c = GnmiCollector(st, env)
        store = SnapshotStore()
        store.register("gnmi", c.metrics())
        await c.start()
        made.append((c, server))
        return Harness(c, store, server, sim, clock)

    yield build
    for c, s in made:
        await c.close()
        await s.stop()


def write_secret(tmp_path: Path, name: str, value: str) -> str:
    """A secret in a file (secrets only come from files)."""
    p = tmp_path / name
    p.write_text(value + "\n", encoding="utf-8")
    return str(p)


@pytest.fixture
def no_sys(tmp_path: Path) -> Iterator[Path]:
    """An empty sysfs root (no local MACs)."""
    d = tmp_path / "no-sys"
    d.mkdir(exist_ok=True)
    yield d
