"""The node daemon's job reports (``fabricwatch.node-jobwork/v1``): built from the
store tick by tick, on the fleet's window grid, published over a real Mosquitto."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.clock import Clock, scaled_clock
from fabricwatch.config import parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.errors import ExitCode
from fabricwatch.fleet import jobwork
from fabricwatch.fleet.ledger import Ledger
from fabricwatch.fleet.service import FleetAggregator
from fabricwatch.outputs.jobreports import JobWorkBuffer, JobWorkSender
from fabricwatch.outputs.mqtt import MqttPublisher, Topics
from fabricwatch.outputs.settings import AlertingSettings
from fabricwatch.readings import Reading
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_scenarios import Injection, Scenario
from tests.alerting.conftest import Mosquitto
from tests.alerting.test_mqtt import Sub, settings
from tests.conftest import free_port
from tests.core import test_pipeline as pipeline
from tests.fleet.conftest import fleet_settings, http_get, mqtt_settings

W0 = 1_764_579_600.0  # a multiple of the window
GPUS = ("0", "1", "2", "3")


def _store() -> SnapshotStore:
    store = SnapshotStore(history=8, stale_after=600.0)
    store.register("sim", [sig.SIGNAL_SPECS[f] for f in (sig.GPU_JOB, sig.GPU_SM, sig.GPU_POWER)])
    return store


def _second(store: SnapshotStore, mono: float, *, sm: float = 0.8, job: str = "slurm:7") -> None:
    rs = [Reading(sig.GPU_SM, (g,), sm) for g in GPUS]
    rs += [Reading(sig.GPU_POWER, (g,), 400.0) for g in GPUS]
    rs += [Reading(sig.GPU_JOB, (g, job), 1.0) for g in GPUS[:3]]
    store.ingest("sim", rs, mono)


def test_buffer_reports_each_window_of_the_grid_like_replay() -> None:
    store, buf = _store(), JobWorkBuffer("gpu-017")
    offset = W0 + 30.0 - 100.0  # wall = monotonic + offset; the daemon starts mid-window
    got: list[jobwork.JobWork] = []
    fed: list[Sample] = []
    for k in range(150):
        mono = 100.0 + k
        _second(store, mono)
        fed += [(mono + offset, s.spec.name, s.labels, s.value) for s in store if s.updated == mono]
        out = buf.take(store, mono + 0.5, mono + 0.5 + offset)
        assert all(r.end <= mono + 0.5 + offset for r in out)  # only windows that ended
        got += out
    # 30 s of the first window, then the full second one; the third is still open.
    assert [(r.start, r.end) for r in got] == [(W0 + 30, W0 + 60), (W0 + 60, W0 + 120)]
    full = got[1]
    assert full.jobs == (("slurm:7", ("0", "1", "2")),)
    assert len(full.points) == 60 and all(v == pytest.approx(0.8) for _, v in full.points)
    assert full.gpu_seconds() == {"slurm:7": pytest.approx(180.0)}
    # The live node and fleet replay build the same reports with one function.
    assert got == [r for r in jobwork.reports("gpu-017", fed, jobwork.WINDOW) if r.end <= W0 + 120]
    assert jobwork.parse(full.body(), source="t") == full


def test_reports_carry_the_nodes_own_addresses_for_nccl_ras_hosts() -> None:
    store = _store()
    buf = JobWorkBuffer("gpu-017", addresses=("10.1.7.17", "fd00::17"))
    got: list[jobwork.JobWork] = []
    for k in range(130):
        _second(store, 100.0 + k)
        got += buf.take(store, 100.5 + k, W0 + k + 0.5)
    assert got and all(r.addresses == ("10.1.7.17", "fd00::17") for r in got)
    assert jobwork.parse(got[0].body(), source="t").addresses == ("10.1.7.17", "fd00::17")


def test_buffer_without_a_job_reports_nothing_and_drops_late_readings() -> None:
    store, buf = _store(), JobWorkBuffer("n")
    store.ingest("sim", [Reading(sig.GPU_SM, ("0",), 0.0)], 1.0)
    assert buf.take(store, 1.0, W0 + 10) == []
    assert buf.take(store, 2.0, W0 + 61) == []  # the window ended without any job
    # A reading stamped before the reported window (the wall clock stepped back).
    _second(store, 3.0)
    assert buf.take(store, 3.0, W0 + 30) == []
    assert buf.take(store, 4.0, W0 + 125) == []


def test_buffer_is_bounded() -> None:
    store, buf = _store(), JobWorkBuffer("n", max_samples=50)
    for k in range(40):
        _second(store, float(k))
        buf.take(store, float(k), W0 + k * 0.1)
    assert buf.dropped == 40 * 11 - 50
    (r,) = buf.take(store, 100.0, W0 + 61)
    assert r.jobs == (("slurm:7", ("0", "1", "2")),)


async def test_sender_never_waits_on_a_down_broker_and_delivers_qos1_later(
    mosquitto: Mosquitto,
) -> None:
    topic = Topics.for_node("fabricwatch/v1", "Prod", "gpu-017").jobwork
    report = jobwork.JobWork("gpu-017", W0, W0 + 60, (("slurm:7", GPUS),), ((W0, 0.8),))
    # A persistent QoS 1 subscriber: the broker keeps what arrives while it reconnects.
    async with Sub(mosquitto.port, topic, client_id="fleet-1", persistent=True) as sub:
        mosquitto.stop()
        pub = MqttPublisher(settings(mosquitto.port), node="gpu-017", cluster="Prod")
        sender = JobWorkSender(pub)
        await pub.start()
        await sender.start()
        try:
            sender.submit([report])  # returns at once with no broker
            for _ in range(200):
                if sender.sent:
                    break
                await asyncio.sleep(0.02)
            assert sender.sent == 1 and not pub.connected  # handed on: waiting in the buffer
            mosquitto.start()
            assert await sub.wait(lambda: bool(sub.payloads(topic)), within=20)
        finally:
            await sender.close()
            await pub.close()
    assert jobwork.parse(sub.payloads(topic)[0], source=topic) == report
    assert pub.stats.dropped == 0


def _daemon(
    tmp_path: Path,
    port: int,
    mqtt: dict[str, Any],
    *,
    scenario: Scenario | None = None,
    clock: Clock | None = None,
) -> Daemon:
    sim = scenario or Scenario(duration=400, injections=[], missing=0.0)

    registry = pipeline.one_collector(
        "sim", lambda: pipeline.ScenarioCollector(sim), "scenario replayer"
    )
    cfg = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "node": "gpu-017", "tick": 1.0},
            "web": {"listen": "127.0.0.1:0"},
            "collectors": {"sim": {"interval": 1.0}},
            "mqtt": {
                "enabled": True,
                "port": port,
                "reconnect_initial": 0.05,
                "reconnect_max": 0.5,
                **mqtt,
            },
        },
        registry,
    )
    return Daemon(cfg, registry, config_path=None, clock=clock or scaled_clock(30.0))


async def test_daemon_publishes_job_reports_the_fleet_ledger_reads(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    # x5, not x30: the window's first sample must come within 5 simulated seconds of
    # its start, and on a loaded machine half a real second of lag broke that at x30
    # and (once in a -n 2 run) at x10.
    daemon = _daemon(tmp_path, mosquitto.port, {}, clock=scaled_clock(5.0))
    topic = "fabricwatch/v1/default/gpu-017/jobwork"
    async with Sub(mosquitto.port, "fabricwatch/v1/+/+/jobwork") as sub:
        task = asyncio.create_task(daemon.run())
        try:
            # Two reports need at most 180 simulated seconds, 36 s at 5x; slack for a busy box.
            assert await sub.wait(lambda: len(sub.payloads(topic)) >= 2 or task.done(), 90)
        finally:
            daemon.request_stop()
            rc = await asyncio.wait_for(task, timeout=30)
    assert rc == ExitCode.OK
    reports = [jobwork.parse(p, source=topic) for p in sub.payloads(topic)]
    # On the grid: every report but the first (the daemon started mid-window)
    # spans its window from its first to its last sample plus one spacing.
    assert len(reports) >= 2
    for prev, r in itertools.pairwise(reports):
        lo = math.floor(r.start / jobwork.WINDOW) * jobwork.WINDOW
        assert prev.end <= lo <= r.start < lo + 5 and lo + 50 < r.end <= lo + jobwork.WINDOW
        assert r.node == "gpu-017"
        assert r.jobs == (("slurm:1", tuple(str(g) for g in range(8))),)
        assert len(r.points) >= 30 and all(0.0 <= v <= 1.0 for _, v in r.points)
    # The fleet's ledger takes them as the job's GPU wall time (its badput's denominator).
    ledger = Ledger()
    assert all(ledger.observe("default", r, r.end) for r in reports)
    assert ledger.job_time[("default", "slurm:1")] == pytest.approx(
        sum(r.gpu_seconds()["slurm:1"] for r in reports)
    )
    stall = {
        "key": "0123456789abcdef",
        "revision": 1,
        "cluster": "default",
        "state": "open",
        "job": "slurm:1",
        "cause": "pfc_storm",
        "culprit": {"kind": "switch_port"},
        "gpu_seconds_lost": 96.0,
        "onset_unix": reports[-1].start,
    }
    assert ledger.apply(stall, reports[-1].end)
    (entry,) = ledger.entries(job="slurm:1")
    time = ledger.job_time[("default", "slurm:1")]
    assert entry["badput"] == pytest.approx(96.0 / time, abs=1e-5)


async def test_jobwork_off_publishes_none(mosquitto: Mosquitto, tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, mosquitto.port, {"jobwork": False})
    async with Sub(mosquitto.port, "fabricwatch/v1/#") as sub:
        task = asyncio.create_task(daemon.run())
        try:
            status = "fabricwatch/v1/default/gpu-017/status"
            assert await sub.wait(lambda: b"online" in sub.payloads(status) or task.done(), 60)
            start = daemon._wall()
            # Past two window boundaries of the daemon's (scaled) wall clock.
            for _ in range(3000):
                if daemon._wall() > start + 2 * jobwork.WINDOW + 5 or task.done():
                    break
                await asyncio.sleep(0.02)
        finally:
            daemon.request_stop()
            rc = await asyncio.wait_for(task, timeout=30)
    assert rc == ExitCode.OK
    assert daemon._wall() > start + 2 * jobwork.WINDOW
    assert daemon.jobwork is None
    assert not [t for t, _, _ in sub.messages if t.endswith("/jobwork")]


async def test_fleet_aggregator_fed_by_the_daemon_gives_the_job_a_badput(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The real daemon (a PFC storm stalls its job) and the real aggregator over one
    Mosquitto: the node's own reports give the job its GPU wall time and badput."""
    clock = scaled_clock(30.0)
    scenario = Scenario(
        duration=400,
        injections=[Injection("pfc_storm", start=120.0, duration=60.0, magnitude=0.9)],
        missing=0.0,
    )
    daemon = _daemon(tmp_path, mosquitto.port, {}, scenario=scenario, clock=clock)
    agg = FleetAggregator(
        fleet_settings(replica_id="r1"),
        mqtt_settings(mosquitto.port),
        build(AlertingSettings, {}, prefix="alerting"),
        state_dir=tmp_path / "fleet",
        wall=clock.wall,
    )
    http = free_port()
    await agg.start(("127.0.0.1", http))
    task = asyncio.create_task(daemon.run())
    key = ("default", "slurm:1")
    try:
        assert await agg.wait_ready(10.0)
        for _ in range(3000):  # bounded: ~60 s
            entry = agg.ledger.jobs.get(key)
            if (entry and entry.total > 0 and agg.ledger.job_time.get(key, 0) > 0) or task.done():
                break
            await asyncio.sleep(0.02)
        _, body = await http_get(f"http://127.0.0.1:{http}/api/v1/jobs")
    finally:
        daemon.request_stop()
        rc = await asyncio.wait_for(task, timeout=30)
        await agg.close()
    assert rc == ExitCode.OK
    (job,) = [e for e in json.loads(body)["jobs"] if e["job"] == "slurm:1"]
    assert job["job_gpu_seconds"] > 0
    assert job["badput"] == pytest.approx(
        job["gpu_seconds_lost"] / job["job_gpu_seconds"], rel=1e-3
    )
    assert 0 < job["badput"] < 1
