"""The per-job ledger: charges by cause and culprit kind, expiry, cardinality, golden metrics."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from fabricwatch.fleet.grouper import GroupTransition
from fabricwatch.fleet.ledger import (
    JOB_LOST,
    LEDGER_METRICS,
    Charge,
    Ledger,
    charges,
    ledger_lines,
    ledger_of,
)
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.store import SnapshotStore
from tests.fleet.test_grouper import grouper, run
from tests.fleet.test_jobs import _switch_fault_two_jobs, evidenced, gpu_culprit, waiter

GOLDEN = Path(__file__).parent.parent / "data" / "fleet" / "golden_ledger_metrics.txt"
T0 = 1_760_000_000.0


def _docs(trs: list[GroupTransition]) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for t in trs:
        latest[t.doc["key"]] = t.doc
    return list(latest.values())


def test_a_switch_fault_charges_every_job_to_the_switch_not_unknown() -> None:
    g = grouper(settle=1.0, update_interval=0.0)
    _switch_fault_two_jobs(g)
    docs = _docs(run(g, T0, T0 + 4))
    led = ledger_of(docs)
    for e in led.entries():
        # The waiting nodes and the origin nodes alike: a PFC storm on a switch.
        assert {(b["cause"], b["culprit_kind"]) for b in e["by_cause"]} == {("pfc_storm", "switch")}
        assert e["gpu_seconds_lost"] > 0 and e["by_cause"][0]["share"] == 1.0
    assert sorted(e["job"] for e in led.entries()) == ["slurm:1", "slurm:2"]


def test_job_incident_charges_by_origin_and_no_evidence_as_unknown() -> None:
    g = grouper(settle=0.0, job_link_wait=0.0)
    g.on_member(evidenced("a", T0, "gpu_fault", gpu_culprit(), 0.95, "XID 79", job="slurm:5"), T0)
    g.on_member(waiter("b", T0, job="slurm:5"), T0)
    g.on_member(waiter("c", T0, job="slurm:6"), T0)
    docs = _docs(run(g, T0, T0 + 1))
    by_job = {e["job"]: e for e in ledger_of(docs).entries()}
    assert [(b["cause"], b["culprit_kind"]) for b in by_job["slurm:5"]["by_cause"]] == [
        ("gpu_fault", "gpu")
    ]
    assert [(b["cause"], b["culprit_kind"]) for b in by_job["slurm:6"]["by_cause"]] == [
        ("unknown", "none")
    ]


def test_node_incident_documents_charge_themselves() -> None:
    doc = {
        "key": "k1",
        "revision": 2,
        "cause": "checkpoint_write",
        "culprit": {"kind": "storage_path"},
        "job": "slurm:9",
        "gpu_seconds_lost": 120.0,
    }
    assert charges(doc) == [Charge("slurm:9", "checkpoint_write", "storage", 120.0)]
    assert charges({**doc, "job": None}) == []
    garbage = {**doc, "gpu_seconds_lost": "lots", "culprit": None}
    assert charges(garbage) == [Charge("slurm:9", "checkpoint_write", "none", 0.0)]
    assert charges({**doc, "gpu_seconds_lost": math.nan})[0].gpu_seconds == 0.0


def test_revisions_replace_and_totals_only_grow() -> None:
    led = Ledger(cost_per_gpu_hour=3.6)
    doc = {"key": "k", "revision": 1, "state": "open", "cause": "unknown", "job": "j",
           "gpu_seconds_lost": 100.0, "onset_unix": T0, "cluster": "c"}  # fmt: skip
    assert led.apply(doc, T0)
    assert not led.apply(doc, T0)  # same revision
    assert led.apply({**doc, "revision": 3, "gpu_seconds_lost": 300.0}, T0 + 1)
    assert not led.apply({**doc, "revision": 2, "gpu_seconds_lost": 999.0}, T0 + 2)  # stale
    [e] = led.entries()
    assert e["gpu_seconds_lost"] == 300.0 and e["incidents"] == 1 and e["open_incidents"] == 1
    assert e["cost_lost"] == pytest.approx(0.3)
    assert led.totals == {("c", "unknown", "none"): 300.0}
    # A later revision that moved the incident to another job moves the charge.
    led.apply({**doc, "revision": 4, "job": "k2", "state": "resolved"}, T0 + 3)
    assert [x["job"] for x in led.entries()] == ["k2"]
    assert led.entries()[0]["open_incidents"] == 0


def test_a_thousand_job_starts_keep_the_per_job_series_bounded() -> None:
    expiry, every = 600.0, 60.0
    led = Ledger(job_expiry=expiry)
    most = 0
    for i in range(1000):
        t = T0 + i * every
        base = {"key": f"{i:016x}", "cluster": "prod", "job": f"slurm:{i}",
                "cause": ("unknown", "gpu_fault")[i % 2], "onset_unix": t}  # fmt: skip
        led.apply({**base, "revision": 1, "state": "open", "gpu_seconds_lost": 8.0}, t)
        led.apply(
            {**base, "revision": 2, "state": "resolved", "resolved_unix": t + 30,
             "gpu_seconds_lost": 240.0},
            t + 30,
        )  # fmt: skip
        led.expire(t + 30)
        jobs = {r.labels[1] for r in led.readings() if r.name == JOB_LOST.name}
        most = max(most, len(jobs))
    assert most <= expiry / every + 1
    led.expire(T0 + 1000 * every + expiry)
    assert [r for r in led.readings() if r.name == JOB_LOST.name] == []
    # The fleet totals keep every job's loss, by cause and culprit kind only.
    assert sum(led.totals.values()) == pytest.approx(1000 * 240.0)
    assert len(led.totals) == 2
    # A replayed retained announcement of a long-finished job does not resurrect it.
    old = {"key": "0" * 16, "cluster": "prod", "job": "slurm:0", "cause": "unknown",
           "state": "resolved", "revision": 2, "onset_unix": T0, "resolved_unix": T0 + 30,
           "gpu_seconds_lost": 240.0}  # fmt: skip
    assert not led.apply(old, T0 + 1000 * every + expiry)
    assert sum(led.totals.values()) == pytest.approx(1000 * 240.0)


def _ledger_exposition() -> str:
    led = Ledger(cost_per_gpu_hour=2.5)
    for key, job, cause, kind, secs in (
        ("a" * 16, "slurm:8812", "pfc_storm", "switch", 7200.0),
        ("b" * 16, "slurm:8812", "checkpoint_write", "storage", 12600.0),
        ("c" * 16, "k8s:training/llama", "unknown", "none", 900.0),
    ):
        led.apply(
            {"key": key, "revision": 1, "state": "resolved", "cluster": "prod", "job": job,
             "cause": cause, "culprit": {"kind": kind}, "gpu_seconds_lost": secs,
             "onset_unix": T0},
            T0,
        )  # fmt: skip
    store = SnapshotStore()
    store.register("ledger", LEDGER_METRICS)
    store.ingest("ledger", led.readings(), 0.0)
    reg = build_registry(store, list, ReloadStatus(True, 1.7e9), process_metrics=False)
    text = generate_latest(reg).decode()
    keep = [
        block
        for block in re.split(r"(?=# HELP )", text)
        if block.startswith("# HELP fabricwatch_fleet_")
    ]
    return "".join(keep)


def test_golden_ledger_metrics() -> None:
    text = _ledger_exposition()
    if os.environ.get("FABRICWATCH_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "intended? regenerate with FABRICWATCH_REGEN_GOLDEN=1"


@pytest.mark.integration
def test_golden_ledger_metrics_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: the test command installs the Debian 'prometheus' package"
    out = subprocess.run(
        [promtool, "check", "metrics"],
        input=_ledger_exposition(),
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


def test_ledger_lines() -> None:
    led = Ledger(cost_per_gpu_hour=2.0)
    for key, cause, kind, secs in (("a", "checkpoint_write", "storage_path", 2952.0),
                                   ("b", "pfc_storm", "switch_port", 1656.0)):  # fmt: skip
        led.apply({"key": key, "revision": 1, "cause": cause, "culprit": {"kind": kind},
                   "job": "slurm:1", "gpu_seconds_lost": secs, "onset_unix": T0}, T0)  # fmt: skip
    lines = ledger_lines(led.entries())
    assert lines[0] == "slurm:1  1.28 GPU-hours lost in 2 incidents (2.56 cost)"
    assert lines[1].split() == ["64.1%", "checkpoint_write", "(storage)", "2,952", "GPU-seconds"]
    assert ledger_lines([]) == ["no jobs with incidents"]
