"""The aggregator in-process against a real Mosquitto: grouping, pages through the
outbox, node status, garbage on the wire, restart from retained state, outputs."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.fleet.grouper import GroupTransition
from fabricwatch.fleet.service import FleetAggregator
from fabricwatch.outputs.settings import AlertingSettings
from tests.alerting.conftest import Mosquitto, Receiver, new_secret
from tests.fleet.conftest import (
    envelope,
    fleet_settings,
    http_get,
    incident,
    mqtt_settings,
    publish,
    switch_culprit,
    wait_for,
    webhook_alerting,
)

pytestmark = pytest.mark.integration

Factory = Callable[..., FleetAggregator]


@pytest.fixture
async def make_agg(
    tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver
) -> AsyncIterator[Factory]:
    secret = tmp_path / "secret"
    secret.write_text(new_secret())
    made: list[FleetAggregator] = []

    def factory(
        replica: str = "r1", alerting: AlertingSettings | None = None, **kw: Any
    ) -> FleetAggregator:
        agg = FleetAggregator(
            fleet_settings(replica_id=replica, **kw),
            mqtt_settings(mosquitto.port),
            alerting or webhook_alerting(receiver.url, secret),
            state_dir=tmp_path / replica,
        )
        made.append(agg)
        return agg

    yield factory
    for a in made:
        if a._tasks:
            await a.close()


def node_topic(node: str, leaf: str = "incidents", cluster: str = "prod") -> str:
    return f"fabricwatch/v1/{cluster}/{node}/{leaf}"


def pages(receiver: Receiver, kind: str) -> list[dict[str, Any]]:
    out = []
    for r in receiver.ok():
        body = json.loads(r.body)
        if body.get("type") == f"incident.{kind}":
            out.append(body)
    return out


async def test_storm_on_one_switch_is_one_cluster_incident_and_one_page(
    make_agg: Factory, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    agg = make_agg(update_interval=60.0)
    seen: list[GroupTransition] = []
    agg.on_transition = seen.append
    await agg.start(("127.0.0.1", 0))
    assert await agg.wait_ready(10.0)
    now = time.time()
    incs = [
        incident(f"gpu-{i:02d}", f"{i:016x}", culprit=switch_culprit(port=f"swp{i}"), onset=now - 5)
        for i in range(32)
    ]
    items = [
        (node_topic(f"gpu-{i:02d}"), envelope(inc, "opened"), False) for i, inc in enumerate(incs)
    ]
    # An unrelated incident elsewhere: its own group, its own page.
    other = incident(
        "gpu-99",
        "f" * 16,
        cause="storage_latency",
        job="",
        culprit=replace(
            switch_culprit(), key="storage:ckpt", kind="storage_path", labels=(("path", "ckpt"),)
        ),
    )
    items.append((node_topic("gpu-99"), envelope(other, "opened"), False))
    await publish(mosquitto.port, items)
    await wait_for(lambda: len(pages(receiver, "opened")) >= 2, 15.0, "two pages")
    opened = pages(receiver, "opened")
    storm = [p for p in opened if p["data"]["group"]["kind"] == "switch"]
    assert len(storm) == 1
    doc = storm[0]["data"]
    assert doc["node_count"] == 32 and doc["gpu_count"] == 256
    assert doc["node"] == "switch leaf-7"
    assert doc["culprit"]["key"] == "switch:leaf-7"
    assert doc["summary"].startswith(
        "leaf-7 (32 ports): PFC pause storm stalled 32 nodes / 256 GPUs"
    )
    assert storm[0]["severity"] == "critical"
    assert [p["data"]["group"]["kind"] for p in opened].count("storage") == 1
    # Resolve all 32: one resolve page, same dedup key.
    later = time.time()
    res = [replace(inc, state="resolved", revision=2, resolved_at=later) for inc in incs]
    await publish(
        mosquitto.port,
        [
            (node_topic(f"gpu-{i:02d}"), envelope(r, "resolved"), False)
            for i, r in enumerate(res[:31])
        ],
    )
    await wait_for(
        lambda: (
            bool(agg.grouper.groups)
            and all(
                len([t for t in g.members.values() if t.member.state == "resolved"]) >= 31
                for g in agg.grouper.groups.values()
                if g.key.kind == "switch"
            )
        ),
        10.0,
        "31 resolves seen",
    )
    assert pages(receiver, "resolved") == []  # one member still open
    await publish(mosquitto.port, [(node_topic("gpu-31"), envelope(res[31], "resolved"), False)])
    await wait_for(lambda: len(pages(receiver, "resolved")) == 1, 10.0, "resolve page")
    resolved = pages(receiver, "resolved")[0]
    assert resolved["dedup_key"] == storm[0]["dedup_key"]
    assert resolved["data"]["state"] == "resolved"
    assert len(pages(receiver, "opened")) == 2
    kinds = [t.kind for t in seen if t.doc["group"]["kind"] == "switch"]
    assert kinds == ["opened", "resolved"]
    # Retained member topics are cleared once the group resolved.
    await wait_for(lambda: not agg.grouper.clears, 5.0, "clears published")
    # /api/v1/incidents and /metrics
    assert agg.web is not None
    base = f"http://127.0.0.1:{agg.web.port}"
    status, body = await http_get(base + "/api/v1/incidents?state=resolved")
    assert status == 200
    api = json.loads(body)
    assert [d["key"] for d in api["incidents"]] == [resolved["data"]["key"]]
    _, text = await http_get(base + "/metrics")
    assert 'fabricwatch_fleet_incidents_open{cause="storage_latency",cluster="prod"} 1.0' in text
    assert 'fabricwatch_fleet_transitions_total{transition="opened"} 2.0' in text
    assert 'fabricwatch_alert_deliveries_total{outcome="succeeded",sink="hook"}' in text
