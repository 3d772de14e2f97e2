"""The incidents and replay commands, through their functions and as a process."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fabricwatch.cli import incidents as cli_incidents
from fabricwatch.cli import replay as cli_replay
from fabricwatch.engine.db import DB_FILENAME, IncidentDB
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live

REPO = Path(__file__).resolve().parents[2]


def parse(module: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.configure_parser(parser)  # type: ignore[attr-defined]
    return parser.parse_args(argv)


def scenario() -> Scenario:
    return Scenario(
        duration=500,
        injections=[Injection("pfc_storm", 150, 40), Injection("checkpoint_write", 350, 30)],
        seed=8,
    )


@pytest.fixture
def om_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.om"
    with path.open("w") as f:
        write_openmetrics(flatten(scenario()), f.write)
    return path


def test_incidents_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    trs = run_live(scenario(), db=db, node="n7")
    db.close()
    keys = {t.incident.key for t in trs}
    assert (
        cli_incidents.run(
            parse(cli_incidents, ["--state-dir", str(tmp_path), "--since", "all", "--json"])
        )
        == 0
    )
    docs = json.loads(capsys.readouterr().out)
    assert {d["key"] for d in docs} == keys
    assert {d["cause"] for d in docs} == {"pfc_storm", "checkpoint_write"}
    assert all(d["schema"] == "fabricwatch.incident/v1" for d in docs)
    assert (
        cli_incidents.run(parse(cli_incidents, ["--state-dir", str(tmp_path), "--since", "all"]))
        == 0
    )
    out = capsys.readouterr().out
    assert "pfc_storm" in out and "switch:leaf1:swp12:3" in out and "CAUSE" in out
    # the scenario is in 2023: nothing in the last 24 h
    assert cli_incidents.run(parse(cli_incidents, ["--state-dir", str(tmp_path)])) == 0
    assert capsys.readouterr().out == "no incidents\n"
    assert (
        cli_incidents.run(
            parse(
                cli_incidents,
                ["--state-dir", str(tmp_path), "--since", "2023-11-14T00:00:00Z", "--json"],
            )
        )
        == 0
    )
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_incidents_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_incidents.run(parse(cli_incidents, ["--state-dir", str(tmp_path / "none")])) == 1
    assert f"no database at {tmp_path / 'none' / DB_FILENAME}" in capsys.readouterr().err
    assert (
        cli_incidents.run(
            parse(cli_incidents, ["--state-dir", str(tmp_path), "--since", "yesterday"])
        )
        == 2
    )
    assert "--since" in capsys.readouterr().err
    (tmp_path / DB_FILENAME).write_bytes(b"garbage" * 1000)
    assert cli_incidents.run(parse(cli_incidents, ["--state-dir", str(tmp_path)])) == 1
    assert "corrupt or not a database" in capsys.readouterr().err


def test_replay_command(om_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    live = {t.incident.key: t.incident for t in run_live(scenario(), node="n3")}
    db_path = tmp_path / "r.sqlite3"
    args = parse(cli_replay, [str(om_file), "--json", "--node", "n3", "--db", str(db_path)])
    assert cli_replay.run(args) == 0
    cap = capsys.readouterr()
    docs = json.loads(cap.out)
    assert {d["key"] for d in docs} == set(live)
    assert "2 incident(s)" in cap.err
    assert len(IncidentDB(db_path).incidents()) == 2
    assert cli_replay.run(parse(cli_replay, [str(om_file)])) == 0
    assert "checkpoint_write" in capsys.readouterr().out


def test_replay_config_table(
    om_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "fw.toml"
    cfg.write_text("[engine]\nmin_duration = '2m'\nmin_duration_with_evidence = '2m'\n")
    assert cli_replay.run(parse(cli_replay, [str(om_file), "--config", str(cfg), "--json"])) == 0
    assert json.loads(capsys.readouterr().out) == []  # both stalls are shorter than 2 min
    cfg.write_text("[engine]\nmin_durashun = 1\n")
    assert cli_replay.run(parse(cli_replay, [str(om_file), "--config", str(cfg)])) == 2
    assert "engine.min_durashun: unknown key" in capsys.readouterr().err


def test_replay_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.om"
    bad.write_text(
        'fabricwatch_gpu_power_watts{gpu="0"} 300 100\n'
        'fabricwatch_gpu_power_watts{gpu="0"} 3x0 101\n'
    )
    assert cli_replay.run(parse(cli_replay, [str(bad)])) == 1
    assert f"{bad}:2: bad number" in capsys.readouterr().err
    assert cli_replay.run(parse(cli_replay, [])) == 2
    assert "nothing to replay" in capsys.readouterr().err
    assert cli_replay.run(parse(cli_replay, [str(tmp_path / "missing.om")])) == 2
    assert "cannot read" in capsys.readouterr().err
    other = tmp_path / "other.om"
    other.write_text('node_cpu_seconds_total{cpu="0"} 1 100\n')
    assert cli_replay.run(parse(cli_replay, [str(other)])) == 1
    assert "no usable samples" in capsys.readouterr().err
    assert cli_replay.run(parse(cli_replay, ["--prometheus", "http://127.0.0.1:1"])) == 2
    assert "needs --from" in capsys.readouterr().err
    assert cli_replay.run(parse(cli_replay, ["--list-mappings"])) == 0
    assert "DCGM_FI_PROF_SM_ACTIVE" in capsys.readouterr().out


def test_replay_as_a_process(om_file: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "replay", str(om_file), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert [d["cause"] for d in sorted(docs, key=lambda d: d["onset"])] == [
        "pfc_storm",
        "checkpoint_write",
    ]
    assert "\x1b[" not in proc.stderr  # no progress bar when stderr is not a terminal
    proc = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "replay", "-"],
        input="{{{ garbage\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 1
    assert "-:1: not a sample line" in proc.stderr
