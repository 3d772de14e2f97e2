"""Junk from gNMI targets: every failure of a session is logged, counted, backed
off and retried, and shows in collector_up (issue 17, items 4 and 9)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricwatch.clock import Clock
from fabricwatch.collector import CollectorEnv, CollectorSettings
from fabricwatch.collectors.gnmi._collector import (
    MAX_CACHE_CHARS,
    MAX_PATH_CHARS,
    GnmiCollector,
    _Batch,
    _Target,
)
from fabricwatch.collectors.gnmi._proto import pb
from fabricwatch.collectors.gnmi._settings import GnmiSettings, GnmiTargetSettings
from fabricwatch.errors import CollectorError
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState, DegradedError, Supervisor
from fabricwatch.testing.sim_gnmi import SimGnmiServer, demo_target

JUNK = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, a length far past the end: not a message


class JunkTarget:
    """A real gRPC server speaking the gNMI service names, answering bytes that
    do not decode: in Capabilities, or in the Subscribe stream."""

    def __init__(self, port: int, where: str) -> None:
        self.port = port
        self.where = where
        self.calls = 0
        self.server: grpc.aio.Server | None = None

    async def _caps(self, _request: bytes, _context: Any) -> bytes:
        self.calls += 1
        if self.where == "capabilities":
            return JUNK
        return bytes(pb.CapabilityResponse().SerializeToString())

    async def _subscribe(self, requests: Any, _context: Any) -> Any:
        async for _ in requests:
            yield JUNK
            await asyncio.sleep(3600)

    async def start(self) -> None:
        handler = grpc.method_handlers_generic_handler(
            "gnmi.gNMI",
            {
                "Capabilities": grpc.unary_unary_rpc_method_handler(self._caps),
                "Subscribe": grpc.stream_stream_rpc_method_handler(self._subscribe),
            },
        )
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)


@pytest.mark.parametrize("where", ["capabilities", "subscribe"])
async def test_undecodable_replies_are_failures_and_a_healthy_target_is_found_later(
    tmp_path: Path, where: str
) -> None:
    junk = JunkTarget(0, where)
    await junk.start()
    tgt = GnmiTargetSettings(name="leaf1", host="127.0.0.1", port=junk.port, insecure=True)
    gs = GnmiSettings(
        targets=[tgt], interval=0.05, backoff_initial=0.05, backoff_max=0.2, mode="switch"
    )
    env = CollectorEnv(node="n1", sys_root=tmp_path / "no-sys", state_dir=tmp_path)
    collector = GnmiCollector(gs, env)
    store = SnapshotStore()
    sup = Supervisor(store)
    sup.add(collector, CollectorSettings(interval=0.05, timeout=2.0))
    healthy: SimGnmiServer | None = None
    with structlog.testing.capture_logs() as logs:
        await sup.start()
        try:
            t = collector.target_state("leaf1")
            for _ in range(1000):
                if t.stream is not None and t.stream.stats.failures >= 3:
                    break
                await asyncio.sleep(0.02)
            assert t.stream is not None and t.stream.stats.failures >= 3  # retried
            assert junk.calls >= 2
            assert t.stream.stats.errors["rpc_error"] >= 3  # counted
            state = sup.states[0]
            for _ in range(200):
                if not state.up and state.consecutive_failures:
                    break
                await asyncio.sleep(0.02)
            assert not _up(state) and "undecodable" in state.last_error  # collector_up = 0
            up = store.get("fabricwatch_gnmi_target_up", ("leaf1",))
            assert up is not None and up.value == 0.0
            # The port gets a healthy target: it is contacted and streams.
            await junk.stop()
            healthy = SimGnmiServer(demo_target(2), port=junk.port)
            await healthy.start()
            for _ in range(1000):
                if t.stream.up and _up(state):
                    break
                await asyncio.sleep(0.02)
            assert t.stream.up and _up(state)
        finally:
            await sup.stop()
            if healthy is not None:
                await healthy.stop()
            await junk.stop()
    failed = [e for e in logs if e["event"] == "gnmi_stream_failed"]
    assert failed and "undecodable" in str(failed[0]["error"])  # logged
    delays = [float(e["retry_in_s"]) for e in failed[:3]]
    assert delays == sorted(delays) and delays[-1] > delays[0]  # backed off


def _up(state: CollectorState) -> bool:
    return state.up  # a call: mypy must not narrow the attribute across awaits


def _collector(tmp_path: Path, max_paths: int = 100_000) -> tuple[GnmiCollector, _Target]:
    tgt = GnmiTargetSettings(name="leaf1", host="127.0.0.1", insecure=True, profile="openconfig")
    gs = GnmiSettings(targets=[tgt], mode="switch", max_paths=max_paths)
    env = CollectorEnv(node="n1", sys_root=tmp_path / "no-sys", state_dir=tmp_path)
    c = GnmiCollector(gs, env)
    t = c.target_state("leaf1")
    t.profile = c._profiles.by_name("openconfig")
    return c, t


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(1, 4 * MAX_PATH_CHARS), min_size=1, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_path_cache_is_bounded_by_size(tmp_path: Path, lengths: list[int], seed: int) -> None:
    c, t = _collector(tmp_path, max_paths=1_000_000)
    assert t.profile is not None
    batch = _Batch([])
    for i, n in enumerate(lengths * 40):
        path = f"/interfaces/interface[name=x{seed}-{i}]/" + "a" * n
        c._leaf(t, t.profile, path[:n], 1, ts=1.0, gen=1, batch=batch)
        assert t.cache_chars <= MAX_CACHE_CHARS + MAX_PATH_CHARS
        assert all(len(p) <= MAX_PATH_CHARS for p in t.cache)
    assert t.ignored["malformed"] == sum(1 for n in lengths * 40 if n > MAX_PATH_CHARS)


def test_hostile_long_paths_do_not_grow_the_cache(tmp_path: Path) -> None:
    c, t = _collector(tmp_path, max_paths=1_000_000)
    assert t.profile is not None
    batch = _Batch([])
    for i in range(20_000):
        c._leaf(t, t.profile, f"/junk/{i:08d}/" + "p" * 1000, 1, ts=1.0, gen=1, batch=batch)
    assert t.cache_chars <= MAX_CACHE_CHARS + MAX_PATH_CHARS
    assert len(t.cache) < 20_000


@dataclass
class _Failing:
    """A collector whose every collection fails, degraded (with readings) or plainly."""

    degraded: bool
    at: list[float]
    now: Callable[[], float]
    name: str = "flaky"

    def metrics(self) -> list[MetricSpec]:
        return []

    async def start(self) -> None:
        return None

    async def collect(self) -> list[Reading]:
        self.at.append(self.now())
        if self.degraded:
            raise DegradedError("every target is down", [])
        raise CollectorError("broken")

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("degraded", [True, False])
async def test_a_degraded_collector_keeps_its_interval(degraded: bool) -> None:
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        await asyncio.sleep(0)

    clock = Clock(lambda: now[0], lambda: now[0], sleep)
    at: list[float] = []
    sup = Supervisor(SnapshotStore(), clock=clock)
    sup.add(_Failing(degraded, at, lambda: now[0]), CollectorSettings(interval=1.0))
    await sup.start()
    try:
        for _ in range(10_000):
            if len(at) >= 8:
                break
            await asyncio.sleep(0)
    finally:
        await sup.stop()
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(at)][:6]
    if degraded:
        # Sources back off on their own; the drain must notice a recovery at once.
        assert gaps == [1.0] * 6
    else:
        assert gaps == sorted(gaps) and gaps[-1] > 2 * gaps[0]
