"""``fabricwatch incidents --by job`` over a node's and the fleet's real SQLite files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.evidence import Culprit
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.fleet.db import FleetDB
from fabricwatch.fleet.jobwork import JobWork
from tests.fleet.conftest import incident
from tests.fleet.test_grouper import grouper, run
from tests.fleet.test_jobs import _switch_fault_two_jobs

T0 = 1_760_000_000.0


def test_by_job_over_a_node_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    ckpt = Culprit("storage:ckpt", "storage_path", (("path", "ckpt"),))
    db.record(
        [
            IncidentTransition("opened", T0, incident("n1", "a" * 16, gpu_seconds=2952.0,
                                                      cause="checkpoint_write", culprit=ckpt)),
            IncidentTransition("opened", T0, incident("n1", "b" * 16, gpu_seconds=1656.0)),
            IncidentTransition("opened", T0, incident("n1", "c" * 16, gpu_seconds=10.0,
                                                      job="slurm:7")),
        ]
    )  # fmt: skip
    db.close()
    assert main(["incidents", "--state-dir", str(tmp_path), "--since", "all", "--by", "job"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "slurm:42  1.28 GPU-hours lost in 2 incidents"
    assert out[1].split()[:3] == ["64.1%", "checkpoint_write", "(storage)"]
    assert out[2].split()[:3] == ["35.9%", "pfc_storm", "(switch)"]
    assert out[3].startswith("slurm:7  0.00 GPU-hours lost in 1 incidents")
    code = main(
        ["incidents", "--state-dir", str(tmp_path), "--since", "all", "--by", "job", "--json",
         "--cost-per-gpu-hour", "3.6"]
    )  # fmt: skip
    assert code == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["job"] for e in entries] == ["slurm:42", "slurm:7"]
    assert entries[0]["cost_lost"] == pytest.approx(4.608)


def test_by_job_over_the_fleet_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = grouper(settle=1.0, update_interval=0.0)
    _switch_fault_two_jobs(g)
    fdb = FleetDB.in_dir(tmp_path / "fleet")
    for tr in run(g, T0, T0 + 4):
        fdb.record(tr.kind, tr.at, tr.doc)
    fdb.close()
    args = ["incidents", "--state-dir", str(tmp_path), "--since", "all", "--by", "job", "--fleet"]
    assert main([*args, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert sorted(e["job"] for e in entries) == ["slurm:1", "slurm:2"]
    for e in entries:
        assert [(b["cause"], b["culprit_kind"]) for b in e["by_cause"]] == [("pfc_storm", "switch")]
    # No database there is an error, as for plain `incidents`, not an empty ledger.
    for extra in (["--fleet"], []):
        missing = ["incidents", "--state-dir", str(tmp_path / "x"), "--by", "job", *extra]
        assert main(missing) == 1
        assert main(["incidents", "--state-dir", str(tmp_path / "x")]) == 1
        out = capsys.readouterr()
        assert out.out == "" and out.err.count("no database at") == 2
    assert main(["incidents", "--state-dir", str(tmp_path), "--by", "job", "--since", "soon"]) == 2


def test_fleet_ledger_at_rest_has_the_badput_of_kept_job_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    g = grouper(settle=1.0, update_interval=0.0)
    _switch_fault_two_jobs(g)
    fdb = FleetDB.in_dir(tmp_path / "fleet")
    for tr in run(g, T0, T0 + 4):
        fdb.record(tr.kind, tr.at, tr.doc)
    # Eight nodes of slurm:1 with 8 GPUs each, an hour of 60 s windows.
    gpus = tuple(str(i) for i in range(8))
    start = T0 - 1800.0
    for node in [*(f"1-leaf2-{k}" for k in range(2)), *(f"1-other-{k}" for k in range(6))]:
        for w in range(60):
            lo = start + 60.0 * w
            assert fdb.add_report("prod", JobWork(node, lo, lo + 60.0, (("slurm:1", gpus),), ()))
    # A repeated window is kept once.
    assert not fdb.add_report(
        "prod", JobWork("1-other-0", start, start + 60.0, (("slurm:1", gpus),), ())
    )
    fdb.close()
    args = ["incidents", "--state-dir", str(tmp_path), "--since", "all", "--by", "job", "--fleet"]
    assert main([*args, "--json"]) == 0
    by_job = {e["job"]: e for e in json.loads(capsys.readouterr().out)}
    # Only slurm:1 has reports: 8 nodes x 8 GPUs x 3,600 s of GPU wall time.
    assert by_job["slurm:2"]["badput"] is None
    lost = by_job["slurm:1"]["gpu_seconds_lost"]
    assert by_job["slurm:1"]["badput"] == pytest.approx(lost / (8 * 8 * 3600.0), abs=1e-5)
    assert 0 < by_job["slurm:1"]["badput"] < 1
    assert main(args) == 0
    assert "badput" in capsys.readouterr().out


def test_kept_job_reports_expire_with_the_retention(tmp_path: Path) -> None:
    fdb = FleetDB.in_dir(tmp_path, retention=3600.0)
    for w in range(3):
        fdb.add_report(
            "c", JobWork("n1", T0 + 3600.0 * w, T0 + 3600.0 * w + 60, (("j", ("0",)),), ())
        )
    fdb.prune(T0 + 3 * 3600.0)
    assert [r.start for _c, r in fdb.reports()] == [T0 + 2 * 3600.0]
    assert [c for c, _r in fdb.reports(since=T0 + 3 * 3600.0)] == []
    fdb.close()
