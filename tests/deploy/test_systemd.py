"""The systemd unit: verified by systemd-analyze, sandboxed, and runnable by the CLI."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from fabricwatch.cli import build_parser
from fabricwatch.defaults import DEFAULT_CONFIG_PATH
from tests.deploy.conftest import UNIT, need

MAX_EXPOSURE = 2.5


def directives(text: str) -> dict[str, list[str]]:
    """Key -> values (in order) of a unit file's [Service]/[Unit]/[Install] lines."""
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        out.setdefault(key, []).append(value)
    return out


def runnable_copy(tmp_path: Path, text: str | None = None) -> Path:
    """The unit with ExecStart pointing at an existing binary (verify checks it exists)."""
    src = UNIT.read_text(encoding="utf-8") if text is None else text
    unit = tmp_path / "fabricwatch.service"
    unit.write_text(
        re.sub(r"^ExecStart=/usr/bin/fabricwatch", "ExecStart=/bin/true", src, flags=re.M),
        encoding="utf-8",
    )
    return unit


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit.parent,
        check=False,
    )


def test_unit_has_the_required_directives() -> None:
    d = directives(UNIT.read_text(encoding="utf-8"))
    assert d["Type"] == ["notify"]  # not notify-reload: systemd 252
    assert d["NotifyAccess"] == ["main"]
    assert d["Restart"] == ["on-failure"]
    assert d["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert d["WatchdogSec"] and d["WatchdogSec"][0] != "0"
    assert d["ConfigurationDirectory"] == ["fabricwatch"]
    assert d["StateDirectory"] == ["fabricwatch"]
    assert d["DynamicUser"] == ["yes"]
    assert d["ProtectSystem"] == ["strict"]
    assert d["ProtectHome"] == ["yes"]
    assert d["PrivateTmp"] == ["yes"]
    assert d["NoNewPrivileges"] == ["yes"]
    assert d["CapabilityBoundingSet"] == [""]
    assert d["DevicePolicy"] == ["closed"]
    assert "char-nvidia* rw" in d["DeviceAllow"]
    assert any(v.startswith("fabricwatch:/etc/fabricwatch/") for v in d["LoadCredential"])
    assert "PrivateDevices" not in d  # would hide /dev/nvidia*
    assert d["WantedBy"] == ["multi-user.target"]


def test_exec_start_is_a_valid_fabricwatch_command_line() -> None:
    d = directives(UNIT.read_text(encoding="utf-8"))
    argv = shlex.split(d["ExecStart"][0])
    assert argv[0] == "/usr/bin/fabricwatch"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "run"
    assert args.config == DEFAULT_CONFIG_PATH


@pytest.mark.integration
def test_systemd_analyze_verify_is_silent(tmp_path: Path) -> None:
    need("systemd-analyze")
    proc = verify(runnable_copy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


@pytest.mark.integration
def test_verify_would_catch_a_typo(tmp_path: Path) -> None:
    """systemd-analyze exits 0 on unknown keys, so only stderr tells: prove we read it."""
    need("systemd-analyze")
    bad = UNIT.read_text(encoding="utf-8").replace("WatchdogSec=", "WatchdogSecs=")
    proc = verify(runnable_copy(tmp_path, bad))
    assert "WatchdogSecs" in proc.stderr


def exposure(unit: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--threshold=25", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit.parent,
        check=False,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr
    return float(m.group(1)), proc


@pytest.mark.integration
def test_security_exposure_below_threshold(tmp_path: Path) -> None:
    need("systemd-analyze")
    score, proc = exposure(runnable_copy(tmp_path))
    print(f"systemd-analyze security exposure: {score}")
    assert proc.returncode == 0
    assert score < MAX_EXPOSURE


@pytest.mark.integration
def test_security_score_reacts_to_sandbox_removal(tmp_path: Path) -> None:
    need("systemd-analyze")
    loose = "\n".join(
        line
        for line in UNIT.read_text(encoding="utf-8").splitlines()
        if not line.startswith(("ProtectSystem=", "DynamicUser=", "CapabilityBoundingSet="))
    )
    score, _ = exposure(runnable_copy(tmp_path, loose + "\n"))
    assert score >= MAX_EXPOSURE
