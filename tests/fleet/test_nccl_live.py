"""The live fleet over a real Mosquitto: nodes' job reports carry NCCL Inspector
bandwidth, a job stalls with no local evidence anywhere, and the job page names
the node whose rank collapsed (the same :func:`~fabricwatch.fleet.nccl.with_nccl`
as fleet replay)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.engine.evidence import Culprit
from fabricwatch.fleet.jobwork import JobWork
from fabricwatch.fleet.service import FleetAggregator
from tests.alerting.conftest import Mosquitto, Receiver, new_secret
from tests.fleet.conftest import (
    envelope,
    fleet_settings,
    incident,
    mqtt_settings,
    publish,
    wait_for,
    webhook_alerting,
)

pytestmark = pytest.mark.integration

JOB = "slurm:8812"
NODES = [f"gpu-{i:02d}" for i in range(4)]


def reports(node: str, onset: float, *, bad: bool) -> list[JobWork]:
    """Three windows before the stall (all ranks ~20 GB/s) and the stall's window,
    in which ``bad`` nodes' GPU 3 reaches a tenth of that."""
    out = []
    for k in range(4):
        lo = onset - 30 - (3 - k) * 60 - (60 if k < 3 else 0)
        bw = {g: 20e9 * (1 + 0.01 * int(g)) for g in "0123"}
        if bad and k == 3:
            bw["3"] = 2e9
        pts = tuple((lo + s, 0.8) for s in range(0, 60, 5))
        jobs = ((JOB, ("0", "1", "2", "3")),)
        out.append(JobWork(node, lo, lo + 60, jobs, pts, tuple(sorted(bw.items()))))
    return out


def job_pages(receiver: Receiver) -> list[dict[str, Any]]:
    bodies = [json.loads(r.body) for r in receiver.ok()]
    return [b["data"] for b in bodies if b.get("type") == "job_incident.opened"]


async def test_the_job_page_names_the_rank_nccl_saw_collapse(
    tmp_path: Path, mosquitto: Mosquitto, receiver: Receiver
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(new_secret())
    agg = FleetAggregator(
        fleet_settings(),
        mqtt_settings(mosquitto.port),
        webhook_alerting(receiver.url, secret),
        state_dir=tmp_path / "r1",
    )
    try:
        await agg.start(("127.0.0.1", 0))
        assert await agg.wait_ready(10.0)
        onset = time.time() - 5
        work = [
            (f"fabricwatch/v1/prod/{n}/jobwork", r.body(), False)
            for n in NODES
            for r in reports(n, onset, bad=n == "gpu-02")
        ]
        await publish(mosquitto.port, work)
        await wait_for(
            lambda: sum(len(rs) for rs in agg.stragglers.reports.values()) == 16, 10.0, "reports"
        )
        gpu0 = Culprit("gpu:0", "gpu", (("gpu", "0"),))
        incs = [
            incident(n, f"{i:016x}", cause="unknown", culprit=gpu0, onset=onset + i, job=JOB)
            for i, n in enumerate(NODES)
        ]
        await publish(
            mosquitto.port,
            [(f"fabricwatch/v1/prod/{inc.node}/incidents", envelope(inc, "opened"), False)
             for inc in incs],
        )  # fmt: skip
        await wait_for(lambda: bool(job_pages(receiver)), 15.0, "the job page")
        [doc] = job_pages(receiver)
        assert doc["origin"]["node"] == "gpu-02" and doc["cause"] == "collective_slow"
        assert doc["origin"]["culprit"] == "gpu:gpu-02:3"
        assert "gpu-02" not in doc["waiting"] and "origin: gpu-02" in doc["summary"]
    finally:
        await agg.close()
