"""The issue's acceptance test: a real Mosquitto, 50 simulated nodes publishing
through the node daemon's own outbox/MQTT code (configured to page only via the
fleet), and two aggregator replicas run as real ``fabricwatch fleet`` processes.

A PFC storm on one leaf switch stalls 32 nodes: exactly one cluster incident
and one page (webhook and PagerDuty). The replica owning it is killed with
SIGKILL mid-incident; the survivor takes the partition over from the retained
state, a node going offline is shown as such, and the resolve goes out once,
under the same dedup key. The killed replica restarts from its SQLite file and
the retained messages without paging again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.alerting.conftest import Mosquitto, Receiver, new_secret, python_env
from tests.conftest import free_port
from tests.fleet.conftest import (
    SimNode,
    http_get,
    incident,
    start_nodes,
    stop_nodes,
    switch_culprit,
    wait_for,
)

pytestmark = pytest.mark.integration

N_NODES = 50
STORM = 32


class Replica:
    """One ``python -m fabricwatch fleet`` process."""

    def __init__(self, name: str, config: Path, work: Path) -> None:
        self.name = name
        self.config = config
        self.work = work
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.work / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fabricwatch",
                "fleet",
                "--config",
                str(self.config),
                "--replica-id",
                self.name,
                "--listen",
                f"127.0.0.1:{self.port}",
                "--state-dir",
                str(self.work / self.name),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=python_env(),
        )
        log.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    async def status(self) -> dict[str, Any] | None:
        try:
            code, body = await http_get(self.url + "/api/v1/replicas")
        except OSError:
            return None
        if code != 200:
            return None
        doc: dict[str, Any] = json.loads(body)
        return doc

    def log_tail(self) -> str:
        path = self.work / f"{self.name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def write_config(work: Path, broker: int, hook_url: str) -> Path:
    secret = work / "hook-secret"
    secret.write_text(new_secret())
    pd_key = work / "pd-key"
    pd_key.write_text("R0UTINGKEY0123456789abcdef012345")
    cfg = work / "fleet.toml"
    pd_url = hook_url.rsplit("/", 1)[0] + "/pd"
    cfg.write_text(
        f"""
[daemon]
state_dir = "{work}"

[log]
level = "info"

[mqtt]
enabled = true
host = "127.0.0.1"
port = {broker}
keepalive = "2s"
reconnect_initial = "50ms"
reconnect_max = "500ms"

[alerting]
backoff_initial = "50ms"
backoff_max = "200ms"

[[alerting.sinks]]
name = "hook"
type = "webhook"
url = "{hook_url}"
secret_file = "{secret}"
min_severity = "info"

[[alerting.sinks]]
name = "oncall"
type = "pagerduty"
url = "{pd_url}"
routing_key_file = "{pd_key}"
min_severity = "info"

[fleet]
settle = "500ms"
handover_delay = "1s"
resolve_hold = "0s"
update_interval = "60s"
offline_grace = "1s"
tick = "50ms"
partitions = 16
"""
    )
    return cfg


@pytest.fixture
def replicas(tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver) -> Iterator[list[Replica]]:
    cfg = write_config(tmp_path, mosquitto.port, receiver.url)
    reps = [Replica(n, cfg, tmp_path) for n in ("fleet-a", "fleet-b")]
    for r in reps:
        r.start()
    try:
        yield reps
    finally:
        for r in reps:
            r.stop()


def hook_events(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in receiver.ok() if r.path == "/hook"]


def pd_events(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in receiver.ok() if r.path == "/pd"]


async def test_storm_pages_once_and_survives_a_replica_kill(
    tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver, replicas: list[Replica]
) -> None:
    a, b = replicas

    async def both_live() -> bool:
        sts = [await r.status() for r in replicas]
        if not all(s is not None and s["live"] == ["fleet-a", "fleet-b"] for s in sts):
            return False
        owned = [set(s["partitions"]) for s in sts if s is not None]
        return owned[0].isdisjoint(owned[1]) and len(owned[0] | owned[1]) == 16

    try:
        await wait_for(both_live, 20.0, "both replicas up and seeing each other")
    except AssertionError:
        pytest.fail("replicas did not start:\n" + a.log_tail() + "\n" + b.log_tail())

    names = [f"gpu-{i:02d}" for i in range(N_NODES)]
    nodes = await start_nodes(names, mosquitto.port, tmp_path / "nodes")
    try:
        await _scenario(a, b, nodes, receiver, mosquitto)
    finally:
        await stop_nodes(nodes)


async def _scenario(
    a: Replica, b: Replica, nodes: list[SimNode], receiver: Receiver, mosquitto: Mosquitto
) -> None:
    now = time.time()
    storm = nodes[:STORM]
    for i, n in enumerate(storm):
        n.record(
            "opened",
            incident(
                n.name, f"{i:016x}", culprit=switch_culprit(port=f"swp{i + 1}"), onset=now - 3
            ),
        )
    # An unrelated fault on a node of another job: its own incident and page.
    lone = nodes[40]
    lone.record(
        "opened",
        incident(
            lone.name,
            "e" * 16,
            cause="gpu_fault",
            job="slurm:7",
            onset=now - 1,
            culprit=replace(switch_culprit(), key="gpu:3", kind="gpu", labels=(("gpu", "3"),)),
        ),
    )

    def storm_hooks(kind: str) -> list[dict[str, Any]]:
        return [
            e
            for e in hook_events(receiver)
            if e["type"] == f"incident.{kind}" and e["data"]["group"]["kind"] == "switch"
        ]

    await wait_for(lambda: len(storm_hooks("opened")) >= 1, 15.0, "the storm's page")
    await wait_for(
        # The lone job incident comes as a job incident page (type job_incident.opened).
        lambda: sum(1 for e in hook_events(receiver) if e["type"].endswith(".opened")) >= 2,
        10.0,
        "the unrelated page",
    )
    await asyncio.sleep(1.0)  # any duplicate page would arrive meanwhile
    opened = storm_hooks("opened")
    assert len(opened) == 1, [e["data"]["summary"] for e in opened]
    doc = opened[0]["data"]
    dedup = opened[0]["dedup_key"]
    assert doc["node_count"] == STORM and doc["gpu_count"] == STORM * 8
    assert doc["summary"].startswith(
        f"leaf-7 ({STORM} ports): PFC pause storm stalled {STORM} nodes"
    )
    pd = [e for e in pd_events(receiver) if e["dedup_key"] == dedup]
    assert [e["event_action"] for e in pd] == ["trigger"]
    assert pd[0]["payload"]["component"] == "switch:leaf-7"
    lone_pages = [e for e in hook_events(receiver) if e["data"]["group"]["kind"] == "job"]
    assert len(lone_pages) == 1 and lone_pages[0]["data"]["node_count"] == 1

    # Kill the replica that owns the storm's group, mid-incident.
    owners = [r for r in (a, b) if doc["key"] in ((await r.status()) or {}).get("open", [])]
    assert len(owners) == 1
    owner = owners[0]
    survivor = b if owner is a else a
    assert doc["owner"] == owner.name
    owner.kill()
    # A node goes offline during the incident (clean stop publishes offline).
    gone = storm[5]
    await gone.service.close()

    async def took_over() -> bool:
        st = await survivor.status()
        return st is not None and st["live"] == [survivor.name] and doc["key"] in st["open"]

    await wait_for(took_over, 15.0, "the survivor to adopt the storm's incident")
    code, body = await http_get(survivor.url + "/api/v1/nodes")
    status = {n["node"]: n["online"] for n in json.loads(body)["nodes"]}
    assert status[gone.name] is False and status[storm[0].name] is True
    assert len(status) == N_NODES

    later = time.time()
    for n in storm:
        if n is gone:
            continue
        inc = n.incidents[next(iter(n.incidents))]
        n.record("resolved", replace(inc, state="resolved", revision=2, resolved_at=later))
    try:
        await wait_for(lambda: len(storm_hooks("resolved")) >= 1, 15.0, "the storm's resolve")
    except AssertionError:
        pytest.fail("no resolve page; survivor log:\n" + survivor.log_tail())
    await asyncio.sleep(1.0)
    assert len(storm_hooks("opened")) == 1
    resolved = storm_hooks("resolved")
    assert len(resolved) == 1
    rdoc = resolved[0]["data"]
    assert resolved[0]["dedup_key"] == dedup and rdoc["key"] == doc["key"]
    assert rdoc["owner"] == survivor.name and rdoc["state"] == "resolved"
    assert rdoc["nodes_offline"] == [gone.name] and rdoc["node_count"] == STORM
    pd = [e for e in pd_events(receiver) if e["dedup_key"] == dedup]
    assert [e["event_action"] for e in pd] == ["trigger", "resolve"]

    # The killed replica restarts: SQLite + retained messages, no second page.
    owner.start()

    async def back() -> bool:
        st = await owner.status()
        return st is not None and st["live"] == ["fleet-a", "fleet-b"]

    await wait_for(back, 20.0, "the killed replica to come back")
    await asyncio.sleep(1.5)  # past its handover delay: anything it would resend is out
    code, body = await http_get(owner.url + "/api/v1/incidents")
    assert code == 200
    keys = {d["key"]: d for d in json.loads(body)["incidents"]}
    assert keys[doc["key"]]["state"] == "resolved"
    assert len(storm_hooks("opened")) == 1 and len(storm_hooks("resolved")) == 1
    assert [e["event_action"] for e in pd_events(receiver) if e["dedup_key"] == dedup] == [
        "trigger",
        "resolve",
    ]
    _, metrics = await http_get(survivor.url + "/metrics")
    assert "fabricwatch_fleet_replicas 2.0" in metrics
