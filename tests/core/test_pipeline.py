"""The whole node pipeline in one process: collector -> store -> engine -> SQLite ->
outbox -> signed webhook, and /api/v1/incidents, on a faster-than-real clock."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from standardwebhooks import Webhook

from fabricwatch.clock import scaled_clock
from fabricwatch.collector import Collector, CollectorFactory, CollectorSettings
from fabricwatch.config import parse_config
from fabricwatch.daemon import GC_YOUNG_THRESHOLD, Daemon
from fabricwatch.engine import signals
from fabricwatch.errors import ExitCode
from fabricwatch.readings import MetricSpec, Reading
from fabricwatch.testing.sim_scenarios import Injection, Scenario

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()


class ScenarioCollector:
    """Serves one simulated second of a scenario per collection, as a real collector would."""

    name = "sim"

    def __init__(self, scenario: Scenario) -> None:
        self._steps: Iterator[tuple[float, list[tuple[str, list[Reading]]]]] = scenario.steps()

    def metrics(self) -> Sequence[MetricSpec]:
        return list(signals.SIGNAL_SPECS.values())

    async def start(self) -> None:
        return None

    async def collect(self) -> Sequence[Reading]:
        step = next(self._steps, None)
        if step is None:
            return []
        # Live readings carry no timestamp: the pipeline stamps them on arrival.
        return [r._replace(ts=None) for _, batch in step[1] for r in batch]

    async def close(self) -> None:
        return None


def one_collector(
    name: str, make: Callable[[], Collector], what: str
) -> dict[str, CollectorFactory[Any]]:
    """A collector registry of one collector, built by ``make`` whenever the daemon builds it."""
    return {name: CollectorFactory(name, CollectorSettings, lambda _s, _e: make(), what)}


async def test_pfc_storm_is_detected_persisted_served_and_paged(tmp_path: Path) -> None:
    scenario = Scenario(
        duration=240,
        injections=[Injection("pfc_storm", start=120.0, duration=60.0, magnitude=0.9)],
        missing=0.0,
    )

    registry = one_collector("sim", lambda: ScenarioCollector(scenario), "scenario replayer")
    pages: list[dict[str, Any]] = []
    verifier = Webhook(SECRET)

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        verifier.verify(body, dict(request.headers))  # raises if the signature is wrong
        pages.append(json.loads(body))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    (tmp_path / "secret").write_text(SECRET)
    cfg = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "node": "node1", "tick": 1.0},
            "web": {"listen": "127.0.0.1:0"},
            "collectors": {"sim": {"interval": 1.0}},
            "alerting": {
                "backoff_initial": 0.1,
                "sinks": [
                    {
                        "name": "hook",
                        "type": "webhook",
                        "url": f"http://127.0.0.1:{port}/hook",
                        "secret_file": str(tmp_path / "secret"),
                        "min_severity": "info",
                    }
                ],
            },
        },
        registry,
    )
    daemon = Daemon(cfg, registry, config_path=None, clock=scaled_clock(25.0))
    task = asyncio.create_task(daemon.run())
    try:
        # 240 simulated seconds at 25x is ~10 s; allow generous slack on a loaded box.
        for _ in range(600):
            if any(_transition(p) == "resolved" for p in pages) or task.done():
                break
            await asyncio.sleep(0.1)
        assert daemon._web is not None
        url = f"http://127.0.0.1:{daemon._web.port}/api/v1/incidents"
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            api = await r.json()
    finally:
        daemon.request_stop()
        rc = await asyncio.wait_for(task, timeout=30)
        await runner.cleanup()
    assert rc == ExitCode.OK
    assert [_transition(p) for p in pages][:1] == ["opened"], pages
    assert "resolved" in [_transition(p) for p in pages]
    incident = _incident(pages[0])
    assert incident["cause"] == "pfc_storm"
    assert incident["culprit"]["key"] == "switch:leaf1:swp12:3"
    assert incident["schema"] == "fabricwatch.incident/v1"
    keys = {i["key"] for i in api["incidents"]}
    assert incident["key"] in keys
    served = next(i for i in api["incidents"] if i["key"] == incident["key"])
    assert served["state"] == "resolved"
    assert served["gpu_seconds_lost"] > 0


def _transition(page: dict[str, Any]) -> str:
    # Standard Webhooks body: {"type": "incident.<transition>", "timestamp", "data"}.
    return str(page["type"]).removeprefix("incident.")


def _incident(page: dict[str, Any]) -> dict[str, Any]:
    data = page["data"]
    assert isinstance(data, dict)
    return data


class _ThresholdProbe(ScenarioCollector):
    """Records the collector's young-generation threshold at each collection."""

    def __init__(self, scenario: Scenario, seen: list[int]) -> None:
        super().__init__(scenario)
        self._seen = seen
        self.enough = asyncio.Event()  # a few collections seen

    async def collect(self) -> Sequence[Reading]:
        self._seen.append(gc.get_threshold()[0])
        if len(self._seen) >= 3:
            self.enough.set()
        return await super().collect()


async def test_running_daemon_raises_young_gc_threshold_and_restores_it(tmp_path: Path) -> None:
    seen: list[int] = []
    probe = _ThresholdProbe(Scenario(duration=60, injections=[], missing=0.0), seen)
    registry = one_collector("sim", lambda: probe, "probe")
    state, listen = str(tmp_path / "state"), "127.0.0.1:0"
    doc = {"daemon": {"state_dir": state, "node": "n1"}, "web": {"listen": listen}}
    cfg = parse_config({**doc, "collectors": {"sim": {"interval": 1.0}}}, registry)
    before = gc.get_threshold()
    daemon = Daemon(cfg, registry, config_path=None, clock=scaled_clock(25.0))
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.wait_for(probe.enough.wait(), timeout=30)
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, timeout=30) == ExitCode.OK
    assert seen[0] == before[0]  # the first collection runs before start-up ends
    assert seen[-1] == GC_YOUNG_THRESHOLD
    assert gc.get_threshold() == before


class ThreadedCollector:
    """Samples in a worker thread, as the NVML collector does, and notes when."""

    name = "threaded"

    def __init__(self) -> None:
        self.began: list[float] = []
        self.ended: list[float] = []

    def metrics(self) -> Sequence[MetricSpec]:
        return [signals.SIGNAL_SPECS[signals.GPU_SM]]

    async def start(self) -> None:
        return None

    async def collect(self) -> Sequence[Reading]:
        self.began.append(time.monotonic())
        await asyncio.to_thread(time.sleep, 0.02)
        self.ended.append(time.monotonic())
        return [Reading(signals.GPU_SM, ("0",), 0.5)]

    async def close(self) -> None:
        return None


async def test_the_engine_ticks_on_the_round_of_its_own_instant(tmp_path: Path) -> None:
    """Collectors and the tick share one grid: the engine decides on the
    collection made at its own instant, not the one a tick before (it would
    otherwise run while NVML is still being sampled in its thread)."""
    coll = ThreadedCollector()
    registry = one_collector("threaded", lambda: coll, "threaded sampler")
    cfg = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "node": "node1", "tick": 0.2},
            "web": {"listen": "127.0.0.1:0"},
            "collectors": {"threaded": {"interval": 0.2}},
        },
        registry,
    )
    daemon = Daemon(cfg, registry, config_path=None)
    # Per tick: how long before it the newest collection it can see began.
    seen: list[float] = []
    engine_tick = daemon._engine_tick

    def spy(engine: Any, now: float) -> None:
        if coll.ended:
            seen.append(now - coll.began[len(coll.ended) - 1])
        engine_tick(engine, now)

    daemon._engine_tick = spy  # type: ignore[method-assign]
    task = asyncio.create_task(daemon.run())
    try:
        for _ in range(100):
            if len(seen) >= 8 or task.done():
                break
            await asyncio.sleep(0.05)
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, timeout=30) == ExitCode.OK
    assert len(seen) >= 8
    # Made at the tick's own instant (the thread takes 20 ms), not a tick
    # (0.2 s) before; a tick the loaded box delays may miss it.
    fresh = [age < 0.1 for age in seen]
    assert sum(fresh) >= 0.75 * len(fresh), seen
