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


async def storm(
    port: int, n: int, *, onset: float, transition: str = "opened", **kw: Any
) -> list[Any]:
    incs = [
        incident(
            f"gpu-{i:02d}", f"{i:016x}", culprit=switch_culprit(port=f"swp{i}"), onset=onset, **kw
        )
        for i in range(n)
    ]
    await publish(port, [(node_topic(inc.node), envelope(inc, transition), False) for inc in incs])
    return incs


async def resolve(port: int, incs: list[Any]) -> None:
    now = time.time()
    res = [replace(i, state="resolved", revision=i.revision + 1, resolved_at=now) for i in incs]
    await publish(port, [(node_topic(r.node), envelope(r, "resolved"), False) for r in res])


async def test_garbage_on_every_topic_is_counted_and_harmless(
    make_agg: Factory, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    agg = make_agg()
    await agg.start(("127.0.0.1", 0))
    assert await agg.wait_ready(10.0)
    base = agg.topics.base
    good = envelope(incident("gpu-01", "1" * 16), "opened")
    junk = [
        (node_topic("gpu-01"), b"\x00\xffnot json", False),
        (node_topic("gpu-01"), good[: len(good) // 2], False),  # truncated
        (node_topic("gpu-01"), b'{"schema":"fabricwatch.incident-event/v1"}', False),
        (node_topic("gpu-01"), b"{" + b" " * 300_000 + b"}", False),
        (node_topic("gpu-02", "status"), b"maybe", True),
        (f"{base}/p/3/prod/gpu-01/{'2' * 16}/o", b"[garbage", True),
        (f"{base}/groups/prod/0000000000000000", b"{not json", True),
        (f"{base}/groups/prod/0000000000000001", b'{"no":"key"}', True),
    ]
    await publish(mosquitto.port, junk)
    await wait_for(
        lambda: sum(n for (_t, o), n in agg.counts.items() if o == "invalid") >= 7,
        10.0,
        "garbage counted",
    )
    assert agg.counts[("incident", "invalid")] == 4
    assert agg.counts[("status", "invalid")] == 1
    assert agg.counts[("group", "invalid")] == 2
    # Still working: a real storm pages.
    await storm(mosquitto.port, 3, onset=time.time() - 1)
    await wait_for(lambda: len(pages(receiver, "opened")) == 1, 10.0, "a page after garbage")
    # Duplicates (QoS 1 redelivery, a node's retry) are dropped on event_id.
    before = agg.counts[("incident", "accepted")]
    await publish(
        mosquitto.port, [(node_topic("gpu-01"), good, False), (node_topic("gpu-01"), good, False)]
    )
    await wait_for(lambda: agg.counts[("incident", "duplicate")] >= 1, 10.0, "duplicate seen")
    assert agg.counts[("incident", "accepted")] == before + 1


async def test_restart_rebuilds_from_retained_state_without_paging_again(
    make_agg: Factory, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    agg = make_agg(update_interval=60.0)
    await agg.start(("127.0.0.1", 0))
    assert await agg.wait_ready(10.0)
    incs = await storm(mosquitto.port, 5, onset=time.time() - 2)
    await wait_for(lambda: len(pages(receiver, "opened")) == 1, 10.0, "first page")
    key = pages(receiver, "opened")[0]["data"]["key"]
    await agg.close()
    # While it is down, nodes 0-2 resolve (ingest has no subscriber now: those
    # events are lost to the fleet) ...
    await resolve(mosquitto.port, incs[:3])
    # ... and it comes back with the same id and state directory.
    again = make_agg(update_interval=60.0)
    seen: list[GroupTransition] = []
    again.on_transition = seen.append
    await again.start(("127.0.0.1", 0))
    assert await again.wait_ready(10.0)
    await wait_for(
        lambda: (
            bool(again.grouper.groups)
            and any(g.state == "open" for g in again.grouper.groups.values())
        ),
        10.0,
        "state rebuilt",
    )
    [g] = list(again.grouper.groups.values())
    assert g.incident_key == key and len(g.members) == 5
    await resolve(mosquitto.port, incs)
    await wait_for(lambda: len(pages(receiver, "resolved")) == 1, 10.0, "resolve page")
    assert len(pages(receiver, "opened")) == 1
    assert [t.kind for t in seen] == ["resolved"]
    assert pages(receiver, "resolved")[0]["data"]["key"] == key
    assert again.db.transitions(key) == [
        ("opened", 1, "r1"),
        ("adopted", 1, "r1"),
        ("resolved", 2, "r1"),
    ]


async def test_broker_outage_and_recovery(
    make_agg: Factory, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    agg = make_agg(update_interval=60.0)
    await agg.start(("127.0.0.1", 0))
    assert await agg.wait_ready(10.0)
    incs = await storm(mosquitto.port, 4, onset=time.time() - 2)
    await wait_for(lambda: len(pages(receiver, "opened")) == 1, 10.0, "page")
    mosquitto.stop()  # SIGTERM: retained messages are saved (persistence on)
    await wait_for(lambda: not agg.ready(), 10.0, "disconnect noticed")
    assert agg.grouper.owned == set()  # no paging while blind
    assert agg.web is not None
    url = f"http://127.0.0.1:{agg.web.port}/metrics"

    async def says_disconnected() -> bool:
        return "fabricwatch_mqtt_connected 0.0" in (await http_get(url))[1]

    await wait_for(says_disconnected, 5.0, "mqtt_connected 0 in /metrics")
    mosquitto.start()
    assert await agg.wait_ready(15.0)
    await resolve(mosquitto.port, incs)
    await wait_for(lambda: len(pages(receiver, "resolved")) == 1, 15.0, "resolve after outage")
    assert len(pages(receiver, "opened")) == 1
    assert agg.connects == 2


async def test_a_broker_that_never_answers_keeps_it_unready_not_crashed(
    tmp_path: Path, receiver: Receiver
) -> None:
    import asyncio

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    secret = tmp_path / "s"
    secret.write_text(new_secret())
    agg = FleetAggregator(
        fleet_settings(replica_id="r1"),
        mqtt_settings(port, publish_timeout=0.5),
        webhook_alerting(receiver.url, secret),
        state_dir=tmp_path / "r1",
    )
    await agg.start(None)
    try:
        assert not await agg.wait_ready(2.0)
        assert all(not t.done() for t in agg._tasks)
    finally:
        await agg.close()
        server.close()


async def test_api_rejects_bad_queries(make_agg: Factory) -> None:
    agg = make_agg()
    await agg.start(("127.0.0.1", 0))
    assert agg.web is not None
    base = f"http://127.0.0.1:{agg.web.port}/api/v1/incidents"
    for q in ("?since=soon", "?limit=x", "?state=closed"):
        code, _ = await http_get(base + q)
        assert code == 400, q
    code, body = await http_get(base + "?since=1h&state=open&cluster=prod")
    assert code == 200 and json.loads(body)["incidents"] == []


def test_nodes_page_only_through_the_fleet_with_alerting_disabled(tmp_path: Path) -> None:
    """The node-side setting documented in docs/fleet.md: [alerting] enabled = false
    with [mqtt] on. Sinks stay configured but get nothing; only MQTT carries it."""
    from fabricwatch.engine.db import IncidentDB
    from fabricwatch.engine.incidents import IncidentTransition
    from fabricwatch.outputs.alerting import AlertingService
    from fabricwatch.settings import build

    secret = tmp_path / "s"
    secret.write_text(new_secret())
    alerting = build(
        AlertingSettings,
        {
            "enabled": False,
            "sinks": [
                {
                    "name": "hook",
                    "type": "webhook",
                    "url": "http://127.0.0.1:9/hook",
                    "secret_file": str(secret),
                }
            ],
        },
    )
    db = IncidentDB.in_state_dir(tmp_path / "node")
    svc = AlertingService(alerting, mqtt_settings(1), db, node="gpu-01", cluster="prod")
    db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
    inc = incident("gpu-01", "a" * 16)
    db.record([IncidentTransition("opened", time.time(), inc)])
    assert {r.sink for r in svc.outbox.rows()} == {"mqtt"}
    assert svc.sender.sinks == ["mqtt"]
    db.close()


async def test_a_restarted_replica_keeps_the_jobs_reported_gpu_time(
    tmp_path: Path, make_agg: Factory
) -> None:
    import time

    from fabricwatch.fleet.db import FleetDB
    from fabricwatch.fleet.jobwork import JobWork

    kept = FleetDB.in_dir(tmp_path / "r1")
    lo = (time.time() // 60.0) * 60.0 - 600.0
    for node in ("gpu-1", "gpu-2"):
        assert kept.add_report("prod", JobWork(node, lo, lo + 60.0, (("slurm:9", ("0", "1")),), ()))
    # Older than the job expiry: a finished job's time is not brought back.
    kept.add_report(
        "prod", JobWork("gpu-1", lo - 90_000.0, lo - 89_940.0, (("slurm:1", ("0",)),), ())
    )
    kept.close()
    agg = make_agg()
    assert agg.ledger.job_time == {("prod", "slurm:9"): 2 * 2 * 60.0}
    agg.db.close()


async def test_the_replica_prunes_past_the_retention(tmp_path: Path, make_agg: Factory) -> None:
    import time

    from fabricwatch.fleet.db import FleetDB
    from fabricwatch.fleet.jobwork import JobWork

    kept = FleetDB.in_dir(tmp_path / "r1")
    now = time.time()
    for lo in (now - 40 * 86400.0, now - 120.0):
        kept.add_report("prod", JobWork("gpu-1", lo, lo + 60.0, (("slurm:9", ("0",)),), ()))
    kept.close()
    agg = make_agg()
    agg._ingest_metrics()
    # The default retention (30 days) dropped the 40-day-old window, not the recent one.
    assert [r.start for _c, r in agg.db.reports()] == [now - 120.0]
    agg.db.close()


async def test_job_reports_are_kept_once_a_tick_and_once_each(make_agg: Factory) -> None:
    import time

    from fabricwatch.fleet.jobwork import JobWork

    agg = make_agg()
    lo = (time.time() // 60.0) * 60.0 - 120.0
    reports = [JobWork(n, lo, lo + 60.0, (("slurm:9", ("0",)),), ()) for n in ("g1", "g2")]
    for r in [*reports, reports[0]]:  # the repeat is a QoS 1 redelivery
        agg._jobwork(node_topic(r.node, "jobwork"), r.body())
    assert agg.db.reports() == []  # not one write per message
    agg._ingest_metrics()
    assert sorted(r.node for _c, r in agg.db.reports()) == ["g1", "g2"]
    agg.db.close()
