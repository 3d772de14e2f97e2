"""The command line's rough edges (issue 20): each of these failed before."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fabricwatch import __version__
from fabricwatch.cli import main
from fabricwatch.engine.db import DB_FILENAME, IncidentDB
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.errors import ExitCode
from fabricwatch.logs import configure_logging
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def _scenario() -> Scenario:
    return Scenario(duration=200, injections=[Injection("pfc_storm", 120, 30)], seed=8)


def _db_with_incidents(state_dir: Path) -> set[str]:
    state_dir.mkdir(parents=True, exist_ok=True)
    db = IncidentDB.in_state_dir(state_dir)
    keys = {t.incident.key for t in run_live(_scenario(), db=db, node="n1")}
    db.close()
    assert keys
    return keys


@pytest.mark.parametrize("value", ["9477", ":70000", ":9477x", "host:", "[::1]:-1"])
def test_run_listen_is_a_clean_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--listen", value])
    assert exc.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "argument --listen" in err and repr(value) in err
    assert "Traceback" not in err


def test_config_before_and_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.toml"
    for argv in (["--config", str(missing), "run"], ["run", "--config", str(missing)]):
        assert main(argv) == ExitCode.USAGE
        assert f"{missing}: file not found" in capsys.readouterr().err
    cfg = tmp_path / "fw.toml"
    cfg.write_text('[daemon]\nnode = "after-the-command"\n')
    assert main(["check-config", "--config", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["daemon"]["node"] == "after-the-command"
    assert main(["--config", str(cfg), "check-config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["daemon"]["node"] == "after-the-command"
    # replay reads [engine] of the same file, from either place.
    om = tmp_path / "t.om"
    with om.open("w") as f:
        write_openmetrics(flatten(_scenario()), f.write)
    strict = tmp_path / "strict.toml"
    strict.write_text("[engine]\nmin_duration = '5m'\nmin_duration_with_evidence = '5m'\n")
    assert main(["replay", str(om), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    for argv in (["--config", str(strict), "replay"], ["replay", "--config", str(strict)]):
        assert main([*argv, str(om), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []  # the 30 s stall is under 5 min


def test_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"fabricwatch {__version__} ")


def test_incidents_follows_the_config_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    keys = _db_with_incidents(state)
    cfg = tmp_path / "fw.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{state}"\n')
    for argv in (
        ["--config", str(cfg), "incidents", "--since", "all", "--json"],
        ["incidents", "--config", str(cfg), "--since", "all", "--json"],
        ["incidents", "--config", str(cfg), "--since", "all", "--json", "--deliveries"],
    ):
        assert main(argv) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        if "--deliveries" not in argv:
            assert {d["key"] for d in json.loads(out)} == keys


def test_incidents_finds_the_daemons_fallback_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An unprivileged daemon on the default state_dir writes to $XDG_STATE_HOME/fabricwatch.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    keys = _db_with_incidents(tmp_path / "xdg" / "fabricwatch")
    cfg = tmp_path / "empty.toml"
    cfg.write_text("")
    assert main(["incidents", "--config", str(cfg), "--since", "all", "--json"]) == 0
    assert {d["key"] for d in json.loads(capsys.readouterr().out)} == keys


def test_incidents_wrong_state_dir_says_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "typo"
    assert main(["incidents", "--state-dir", str(wrong)]) == ExitCode.FAILURE
    cap = capsys.readouterr()
    assert f"no database at {wrong / DB_FILENAME}" in cap.err
    assert "no incidents" not in cap.out
    assert main(["incidents", "--state-dir", str(wrong), "--deliveries"]) == ExitCode.FAILURE
    assert f"no database at {wrong / DB_FILENAME}" in capsys.readouterr().err


def test_incidents_reads_a_database_it_may_not_write(tmp_path: Path) -> None:
    state = tmp_path / "state"
    keys = _db_with_incidents(state)
    db_file = state / DB_FILENAME
    before = db_file.read_bytes()
    cmd = [sys.executable, "-m", "fabricwatch", "incidents", "--state-dir", str(state)]
    cmd += ["--since", "all", "--json"]
    if os.geteuid() == 0:
        # Root may write any file, so make the state directory a read-only mount (in
        # a private mount namespace): what an operator's account meets with the
        # daemon's root-owned database.
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) (util-linux) to make a read-only mount as root")
        mount = f"mount --bind {state} {state} && mount -o remount,bind,ro {state}"
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"']
        cmd += ["sh", sys.executable, "-m", "fabricwatch", "incidents", "--state-dir"]
        cmd += [str(state), "--since", "all", "--json"]
    else:
        db_file.chmod(0o444)
        state.chmod(0o555)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            check=False,
        )
    finally:
        state.chmod(0o755)
    assert "corrupt" not in proc.stderr and "move the file aside" not in proc.stderr.lower()
    assert proc.returncode == 0, proc.stderr
    assert {d["key"] for d in json.loads(proc.stdout)} == keys
    assert db_file.read_bytes() == before
    assert sorted(p.name for p in state.iterdir()) == [DB_FILENAME]


def test_replay_reports_the_state_at_end_of_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stall (23 s) recovers, but the data end before the incident resolves.
    sc = Scenario(duration=185, injections=[Injection("pfc_storm", 150, 23)], seed=8)
    om = tmp_path / "window.om"
    with om.open("w") as f:
        write_openmetrics(flatten(sc), f.write)
    assert main(["replay", str(om), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["state"] == "open"
    assert doc["duration_seconds"] >= 18  # not the opening snapshot's 2 s
    assert doc["gpu_seconds_lost"] >= 8 * 18
    m = re.match(r"open at end of data, stalled (\d+) s so far: ", doc["summary"])
    assert m is not None, doc["summary"]
    assert int(m.group(1)) == round(doc["duration_seconds"])
    assert main(["replay", str(om)]) == 0
    assert "open at end of data, stalled" in capsys.readouterr().out


def test_replay_binary_input_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = tmp_path / "01HXYZ.chunk"
    blob.write_bytes(b'fabricwatch_gpu_power_watts{gpu="0"} 300 100\n\x00\xff\xfe\x9c binary\n')
    assert main(["replay", str(blob)]) == ExitCode.FAILURE
    err = capsys.readouterr().err
    assert f"{blob}:2: not UTF-8 text" in err
    assert "codec can't decode" not in err


def test_exit_codes_follow_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Connection refused is a failure (1), not a usage error.
    port = free_port()
    argv = ["replay", "--prometheus", f"http://127.0.0.1:{port}", "--from", "10m", "--timeout"]
    assert main([*argv, "2s"]) == ExitCode.FAILURE
    assert "cannot query Prometheus" in capsys.readouterr().err
    assert main(["replay"]) == ExitCode.USAGE  # nothing to replay
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "missing.om")]) == ExitCode.USAGE
    capsys.readouterr()
    # The README's table is the enum's.
    readme = (REPO / "README.md").read_text()
    assert (
        f"Exit codes: {ExitCode.OK.value} ok, {ExitCode.FAILURE.value} failure, "
        f"{ExitCode.USAGE.value} invalid configuration or usage, "
        f"{ExitCode.CANNOT_START.value} the daemon cannot start" in " ".join(readme.split())
    )
    for code in ExitCode:
        assert f"\n| {code.value} | " in readme, f"README's exit-code table lacks {code.name}"
    # Every command's --help ends with the same table.
    from fabricwatch.cli import build_parser
    from fabricwatch.errors import EXIT_CODE_HELP

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        epilog = p.epilog or ""
        assert "Exit codes: 0" in epilog, name
        if name != "probe-storage":
            assert epilog == EXIT_CODE_HELP, name


def test_console_log_format_on_a_terminal(tmp_path: Path) -> None:
    from fabricwatch.config import LogSettings

    assert LogSettings().format == "auto"
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            configure_logging("info", "auto", stream=tty)
            import structlog

            structlog.get_logger("t").info("hello_tty", n=1)
            tty.flush()
        on_tty = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "hello_tty" in on_tty and not on_tty.lstrip().startswith("{")
    piped = tmp_path / "log.txt"
    with piped.open("w") as f:
        configure_logging("info", "auto", stream=f)
        import structlog

        structlog.get_logger("t").info("hello_pipe", n=1)
    assert json.loads(piped.read_text())["event"] == "hello_pipe"
    configure_logging("info", "json")


def test_check_config_warns_about_missing_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    present = tmp_path / "present-secret"
    present.write_text("s3cret\n")
    cfg = tmp_path / "fw.toml"
    cfg.write_text(
        "[mqtt]\n"
        "enabled = true\n"
        'username = "fw"\n'
        f'password_file = "{tmp_path / "absent-password"}"\n'
        f'ca_file = "{present}"\n'
        "[collectors.storage]\n"
        "enabled = true\n"
        "[[collectors.storage.paths]]\n"
        'name = "ckpt"\n'
        f'path = "{tmp_path / "not-mounted"}"\n'
    )
    assert main(["check-config", str(cfg)]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("# valid:")
    warnings = [line for line in cap.err.splitlines() if "warning" in line]
    assert any("mqtt.password_file" in w and "absent-password" in w for w in warnings)
    assert any("collectors.storage.paths[0].path" in w and "not-mounted" in w for w in warnings)
    assert not any("ca_file" in w for w in warnings)
    # A disabled section is not read by the daemon, so not checked.
    cfg.write_text(cfg.read_text().replace("enabled = true", "enabled = false", 1))
    assert main(["check-config", str(cfg)]) == 0
    assert "mqtt.password_file" not in capsys.readouterr().err
    # A relative credential name resolves in $CREDENTIALS_DIRECTORY, as the daemon does.
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    cfg.write_text('[mqtt]\nenabled = true\nusername = "fw"\npassword_file = "present-secret"\n')
    assert main(["check-config", str(cfg)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_incidents_in_a_private_state_dir_says_run_as_root() -> None:
    # systemd's StateDirectory= with DynamicUser= lives under /var/lib/private (0700 root).
    outer = Path(tempfile.mkdtemp(prefix="fw-private-"))  # pytest's tmp dirs are 0700
    private = outer / "private"
    try:
        _db_with_incidents(private / "fabricwatch")
        code = (
            "import sys; sys.path[:0] = sys.argv[1:3]; from fabricwatch.cli import main; "
            f"sys.exit(main(['incidents', '--state-dir', {str(private / 'fabricwatch')!r}]))"
        )
        site = next((Path(sys.prefix) / "lib").glob("python3*/site-packages"))
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None or not Path("/usr/bin/python3").is_file():
                pytest.skip("needs setpriv(1) and /usr/bin/python3 to run as another user")
            # Debian's python3 (which nobody may run) with this checkout and the test
            # venv's libraries: root's own interpreter may sit under a 0700 home.
            outer.chmod(0o755)
            private.chmod(0o700)
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            argv += ["/usr/bin/python3", "-c", code, str(REPO), str(site)]
        else:
            private.chmod(0o000)
            argv = [sys.executable, "-c", code, str(REPO), str(site)]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, cwd="/", check=False
        )
    finally:
        private.chmod(0o700)
        shutil.rmtree(outer, ignore_errors=True)
    assert proc.returncode == ExitCode.FAILURE, proc.stderr
    assert "permission denied" in proc.stderr and "sudo fabricwatch incidents" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["sample-config"], ["version"]])
def test_a_closed_stdout_is_no_traceback(command: list[str]) -> None:
    # `fabricwatch incidents | head`: the reader goes away. Closing our end
    # before the child writes makes its first write fail with EPIPE, always.
    p = subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == ExitCode.OUTPUT_CLOSED, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
