"""Fixtures of the fleet tests: node incidents as the engine writes them, simulated
nodes that publish through the node daemon's own AlertingService, a real
Mosquitto (the alerting tests' fixture) and a loopback HTTP receiver."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import aiomqtt

from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.evidence import Culprit, Evidence
from fabricwatch.engine.incidents import Incident, IncidentTransition, to_json
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.outputs.alerting import AlertingService
from fabricwatch.outputs.outbox import build_event
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.settings import build
from tests.alerting.conftest import (  # noqa: F401 - fixtures re-exported
    Mosquitto,
    Receiver,
    mosquitto,
    receiver,
)

T0 = 1_760_000_000.0


def switch_culprit(switch: str = "leaf-7", port: str = "swp12", prio: str = "3") -> Culprit:
    return Culprit(
        f"switch:{switch}:{port}:{prio}",
        "switch_port",
        (("switch", switch), ("port", port), ("priority", prio), ("direction", "rx")),
    )


def incident(
    node: str,
    key: str | None = None,
    *,
    state: str = "open",
    cause: str = "pfc_storm",
    culprit: Culprit | None = None,
    onset: float = T0,
    revision: int = 1,
    gpus: int = 8,
    job: str = "slurm:42",
    gpu_seconds: float = 80.0,
    kind: str = "stall",
    resolved_at: float | None = None,
) -> Incident:
    """A node incident as the engine produces it."""
    c = culprit or switch_culprit()
    ev = (
        Evidence(
            cause,
            "fabricwatch_switch_pfc_pause_ratio",
            c,
            0.95,
            0.97,
            0.03,
            f"PFC pause storm on switch {c.key}: paused 97% of the time (30x its baseline)",
        ),
    )
    return Incident(
        key=key or f"{abs(hash((node, onset))) % 16**16:016x}",
        node=node,
        kind=kind,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        cause=cause,
        confidence=0.93,
        culprit=c,
        summary=f"GPUs 0-{gpus - 1} idle; cause: {cause}",
        onset=onset,
        opened_at=onset + 2,
        updated_at=onset + 2 + revision,
        ended_at=resolved_at,
        resolved_at=resolved_at,
        gpus=tuple(str(i) for i in range(gpus)),
        job=job,
        gpu_seconds=gpu_seconds,
        cost=None,
        episodes=1,
        evidence=ev,
        missing=(),
        revision=revision,
    )


def envelope(
    inc: Incident, transition: str, *, cluster: str = "prod", at: float | None = None
) -> bytes:
    """The MQTT payload a node publishes for one transition."""
    ev = build_event(
        transition=transition,
        at=time.time() if at is None else at,
        incident=to_json(inc),
        cluster=cluster,
        severity="critical",
    )
    return json.dumps(ev, separators=(",", ":")).encode()


def fleet_settings(**kw: Any) -> FleetSettings:
    """Fast settings for tests."""
    base: dict[str, Any] = {
        "settle": 0.3,
        "handover_delay": 0.4,
        "resolve_hold": 0.0,
        "update_interval": 0.0,
        "tick": 0.05,
        "partitions": 16,
        "listen": "127.0.0.1:0",
    }
    base.update(kw)
    return build(FleetSettings, base, prefix="fleet")


def mqtt_settings(port: int, **kw: Any) -> MqttSettings:
    base: dict[str, Any] = {
        "enabled": True,
        "host": "127.0.0.1",
        "port": port,
        "keepalive": 5.0,
        "reconnect_initial": 0.05,
        "reconnect_max": 0.5,
        "publish_timeout": 5.0,
    }
    base.update(kw)
    return build(MqttSettings, base, prefix="mqtt")


def webhook_alerting(url: str, secret_file: Path, **kw: Any) -> AlertingSettings:
    sink: dict[str, Any] = {
        "name": "hook",
        "type": "webhook",
        "url": url,
        "secret_file": str(secret_file),
        "min_severity": "info",
        "timeout": 5.0,
        "max_batch": 1,  # one page per request: the tests count requests
    }
    sink.update(kw)
    return build(
        AlertingSettings,
        {"backoff_initial": 0.05, "backoff_max": 0.2, "sinks": [sink]},
        prefix="alerting",
    )


@dataclass
class SimNode:
    """A simulated node: the real IncidentDB + AlertingService with the node-side
    "page only through the fleet" config ([alerting] enabled = false, [mqtt] on)."""

    name: str
    db: IncidentDB
    service: AlertingService
    incidents: dict[str, Incident] = field(default_factory=dict)

    def record(self, transition: str, inc: Incident) -> None:
        self.incidents[inc.key] = inc
        at = inc.resolved_at if transition == "resolved" and inc.resolved_at else time.time()
        self.db.record([IncidentTransition(transition, at, inc)])  # type: ignore[arg-type]


async def start_nodes(
    names: list[str], port: int, state: Path, *, cluster: str = "prod"
) -> list[SimNode]:
    nodes: list[SimNode] = []
    alerting = build(AlertingSettings, {"enabled": False}, prefix="alerting")
    mqtt = mqtt_settings(port)
    for n in names:
        db = IncidentDB.in_state_dir(state / n)
        svc = AlertingService(alerting, mqtt, db, node=n, cluster=cluster)
        db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
        nodes.append(SimNode(n, db, svc))
    await asyncio.gather(*(n.service.start() for n in nodes))
    assert nodes[0].service.publisher is not None
    ok = await asyncio.gather(
        *(n.service.publisher.wait_connected(20.0) for n in nodes if n.service.publisher)
    )
    assert all(ok), "simulated nodes did not connect"
    return nodes


async def stop_nodes(nodes: list[SimNode]) -> None:
    await asyncio.gather(*(n.service.close() for n in nodes), return_exceptions=True)
    for n in nodes:
        n.db.close()


async def wait_for(
    cond: Callable[[], bool | Awaitable[bool]], within: float, what: str, step: float = 0.05
) -> None:
    """Poll ``cond`` (bounded by time and count) or fail saying what did not happen."""
    deadline = time.monotonic() + within
    for _ in range(int(within / step) + 2):
        r = cond()
        if not isinstance(r, bool):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {within} s waiting for {what}")


async def http_get(url: str) -> tuple[int, str]:
    """GET over loopback without blocking the event loop (the server may share it)."""
    async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(10)) as r:
        return r.status, await r.text()


async def publish(port: int, items: list[tuple[str, bytes, bool]]) -> None:
    """Publish (topic, payload, retain) at QoS 1 from a throwaway client."""
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"test-pub-{time.monotonic_ns()}") as c:
        for topic, payload, retain in items:
            await c.publish(topic, payload, qos=1, retain=retain)
