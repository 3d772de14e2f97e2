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
