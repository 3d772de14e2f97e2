"""16 simulated nodes in 2 jobs behind 4 leaves: each node's real engine, then the
real fleet aggregator over a real Mosquitto, paging a real loopback webhook.

One fault after another: a NIC port's PFC storm (back-pressure on the other
nodes behind its leaf), an XID, an NVLink collapse, slow storage, a link loss
(traffic rehashed onto the leaf's other nodes), a storm on a whole leaf
(stalling both jobs) and a hang with no evidence anywhere. For each: exactly one
page, one job incident per stalled job, the origin right and no victim named.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from fabricwatch.fleet.db import FleetDB
from fabricwatch.fleet.jobwork import reports_by_node
from fabricwatch.fleet.replay import group_offline
from fabricwatch.fleet.service import FleetAggregator
from fabricwatch.fleet.stragglers import find_stragglers
from fabricwatch.testing.sim_fleet import (
    all_transitions,
    build_cluster,
    in_time_order,
    node_samples,
)
from fabricwatch.testing.sim_fleet_live import Page, SimClock, publish_in_time, score, summary
from tests.alerting.conftest import Mosquitto, Receiver, new_secret
from tests.conftest import free_port
from tests.fleet.conftest import (
    fleet_settings,
    http_get,
    mqtt_settings,
    wait_for,
    webhook_alerting,
)
from tests.fleet.test_fleet_replay import view

# 16 and 12 simulated nodes in real time: a minute each, several on a loaded 2-core box.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SPEED = 60.0


def _kind(fault: str) -> str:
    """The culprit kind the ledger should charge a fault to."""
    return {"port": "nic", "gpu": "gpu", "nvlink": "nvlink", "storage": "storage", "link": "nic",
            "switch": "switch", "unknown": "none"}[fault]  # fmt: skip


async def test_sixteen_nodes_one_page_per_fault_and_the_right_origin(
    tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    cluster = build_cluster(nodes=16, jobs=2, leaves=4, seed=7)
    events = in_time_order(all_transitions(cluster))
    truths = cluster.truth()
    assert {t.fault.kind for t in truths} == {
        "port", "gpu", "nvlink", "storage", "link", "switch", "unknown",
    }  # fmt: skip
    secret = tmp_path / "secret"
    secret.write_text(new_secret())
    # The sender starts handover_delay (real seconds) after the partitions are owned.
    clock = SimClock(events[0][1].at - 3.0 * SPEED, SPEED)
    agg = FleetAggregator(
        fleet_settings(
            replica_id="r1",
            settle=3.0,
            job_link_wait=2.0,
            handover_delay=1.0,  # real seconds for the sender, scenario ones for paging
            resolve_hold=5.0,
            update_interval=10.0,
            tick=0.01,
        ),
        mqtt_settings(mosquitto.port),
        webhook_alerting(receiver.url, secret),
        state_dir=tmp_path / "r1",
        wall=clock.now,
    )
    http = free_port()
    job_events: dict[str, dict[str, Any]] = {}

    async def follow_jobs() -> None:
        # A consumer following jobs: the retained per-job topic.
        async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="job-follower") as c:
            await c.subscribe(agg.topics.jobs_filter, qos=1)
            async for msg in c.messages:
                ev = json.loads(bytes(msg.payload))
                job_events[ev["incident"]["key"]] = ev

    await agg.start(("127.0.0.1", http))
    follower = asyncio.create_task(follow_jobs())
    try:
        assert await agg.wait_ready(10.0)
        sent = await publish_in_time(events, clock, port=mosquitto.port, cluster="prod")
        assert sent == len(events)

        def settled() -> bool:
            return not any(g.state != "resolved" for g in agg.grouper.groups.values())

        await wait_for(settled, 30.0, "every cluster incident resolved")
        await wait_for(lambda: not agg.outbox.rows(state="pending"), 10.0, "pages delivered")
        status, body = await http_get(f"http://127.0.0.1:{http}/api/v1/jobs")
        assert status == 200
        ledger = {e["job"]: e for e in json.loads(body)["jobs"]}
        status, body = await http_get(f"http://127.0.0.1:{http}/api/v1/jobs?job=slurm:8800")
        job_incidents = json.loads(body)["incidents"]
        _, metrics = await http_get(f"http://127.0.0.1:{http}/metrics")
        await wait_for(
            lambda: all(
                job_events.get(d["key"], {}).get("incident", {}).get("revision") == d["revision"]
                for d in agg.db.incidents(limit=10_000)
                if d["group"]["kind"] == "job"
            ),
            10.0,
            "a job event per job incident",
        )
    finally:
        follower.cancel()
        await agg.close()
    pages = []
    for r in receiver.ok():
        ev: dict[str, Any] = json.loads(r.body)
        pages.append(Page(clock.at_monotonic(r.at), ev["type"].rpartition(".")[2], ev["data"]))
    db = FleetDB.in_dir(tmp_path / "r1")
    try:
        recorded = db.incidents(limit=10_000)
    finally:
        db.close()
    scores = score(truths, pages, recorded)
    s = summary(scores)
    detail = [
        (x.truth.fault.kind, x.pages, x.page_group, x.job_incidents, x.origin_right, x.latency)
        for x in scores
    ]
    assert s["one_page"] == 1.0, detail
    assert s["origin_right"] == 1.0, detail
    assert s["one_job_incident_per_job"] == 1.0, detail
    assert s["page_group_right"] == 1.0, detail
    assert s["victims_named"] == 0, detail
    # The shared switch fault's page lists both jobs it stalled.
    [sw] = [x for x in scores if x.truth.fault.kind == "switch"]
    sw_pages = [p for p in pages if p.doc["group"]["kind"] == "switch" and p.transition == "opened"]
    assert [p.doc["jobs"] for p in sw_pages] == [list(sw.truth.jobs)]
    # The ledger charges each job's lost GPU-seconds to the causes of the faults that
    # stalled it (the waiting nodes included), never to `unknown` when there was an origin.
    for job in ("slurm:8800", "slurm:8801"):
        want = {(t.cause, _kind(t.fault.kind)) for t in truths if job in t.jobs}
        got = {(b["cause"], b["culprit_kind"]) for b in ledger[job]["by_cause"]}
        assert got == want, (job, got, want)
    assert {d["job"] for d in job_incidents} == {"slurm:8800"}
    assert sum(t.fault.kind != "switch" and "slurm:8800" in t.jobs for t in truths) + 1 == len(
        job_incidents
    )
    assert 'fabricwatch_fleet_job_gpu_seconds_lost{cause="pfc_storm"' in metrics
    # The same grouping offline (what fleet replay runs) gives the same job incidents
    # as the live aggregator over MQTT.
    offline = group_offline(events, agg.settings, cluster="prod")
    assert view(offline.jobs()) == view([d for d in recorded if d["group"]["kind"] == "job"])
    # Job events: the latest transition of every job incident, with the job's ledger.
    for d in recorded:
        if d["group"]["kind"] == "job":
            ev = job_events[d["key"]]
            assert ev["schema"] == "fabricwatch.job-event/v1" and ev["job"] == d["job"]
            assert ev["type"] == "job_incident.resolved" and ev["ledger"]["job"] == d["job"]
            assert ev["incident"]["origin"] == d["origin"]
    # A webhook tells a job incident by its type.
    for r in receiver.ok():
        ev = json.loads(r.body)
        is_job = ev["data"]["group"]["kind"] == "job"
        assert ev["type"].startswith("job_incident." if is_job else "incident."), ev["type"]
    # Every page came after the first stall, within the node detection plus settle.
    assert all(x.latency is not None and x.latency > 0 for x in scores), detail


async def test_live_stragglers_and_badput_from_the_nodes_job_reports(
    tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    """Nodes publish job reports (their jobs' GPUs and work per window): the live
    fleet names the slow node with the cause ``straggler`` as fleet replay does,
    pages it once as a job incident, and gives each job its badput."""
    cluster = build_cluster(
        nodes=6, jobs=2, leaves=3, seed=5, kinds=("straggler", "gpu"),
        spacing=300, fault_s=200, warmup=120,
    )  # fmt: skip
    events = in_time_order(all_transitions(cluster))
    samples = node_samples(cluster)
    reports = [r for rs in reports_by_node(samples, 60.0).values() for r in rs]
    [slow, gpu] = cluster.truth()
    secret = tmp_path / "secret"
    secret.write_text(new_secret())
    clock = SimClock(min(r.start for r in reports) - 3.0 * SPEED, SPEED)
    agg = FleetAggregator(
        fleet_settings(replica_id="r1", settle=3.0, job_link_wait=2.0, handover_delay=1.0,
                       resolve_hold=5.0, update_interval=10.0, tick=0.01),
        mqtt_settings(mosquitto.port),
        webhook_alerting(receiver.url, secret),
        state_dir=tmp_path / "r1",
        wall=clock.now,
    )  # fmt: skip
    http = free_port()
    await agg.start(("127.0.0.1", http))
    try:
        assert await agg.wait_ready(10.0)
        await publish_in_time(events, clock, port=mosquitto.port, cluster="prod", reports=reports)
        await wait_for(
            lambda: (
                not any(g.state != "resolved" for g in agg.grouper.groups.values())
                and any(d["state"] == "resolved" for d in agg.stragglers.known.values())
            ),
            30.0,
            "every incident resolved",
        )
        await wait_for(lambda: not agg.outbox.rows(state="pending"), 10.0, "pages delivered")
        _, body = await http_get(f"http://127.0.0.1:{http}/api/v1/jobs")
        ledger = {e["job"]: e for e in json.loads(body)["jobs"]}
        _, metrics = await http_get(f"http://127.0.0.1:{http}/metrics")
        recorded = agg.db.incidents(limit=10_000)
    finally:
        await agg.close()
    live = [d for d in recorded if d["cause"] == "straggler"]
    offline = find_stragglers(samples, cluster="prod")
    assert [d["origin"]["node"] for d in live] == [slow.fault.target]
    keys = ("key", "job", "origin", "waiting", "onset_unix", "cause")
    assert [{k: d[k] for k in keys} for d in live] == [{k: d[k] for k in keys} for d in offline]
    assert live[0]["state"] == "resolved" and live[0]["revision"] >= 2
    pages = [json.loads(r.body) for r in receiver.ok()]
    opened = [p for p in pages if p["type"] == "job_incident.opened"]
    assert [p["data"]["cause"] for p in opened].count("straggler") == 1
    assert any(p["data"]["origin"]["node"] == gpu.fault.target for p in opened)
    # Badput: GPU-seconds lost over the job's GPU wall time from the reports.
    for job in slow.jobs:
        wall = sum(r.gpu_seconds().get(job, 0.0) for r in reports)
        e = ledger[job]
        assert e["job_gpu_seconds"] == pytest.approx(wall, rel=1e-3)
        assert e["badput"] == pytest.approx(e["gpu_seconds_lost"] / wall, rel=1e-3)
        assert 0 < e["badput"] < 1
        causes = {b["cause"]: b["badput"] for b in e["by_cause"]}
        assert causes["straggler"] > 0 and sum(causes.values()) == pytest.approx(
            e["badput"], abs=1e-4
        )
    assert 'fabricwatch_fleet_job_badput_ratio{cause="straggler"' in metrics
