"""``fabricwatch demo`` end to end, as a user runs it: a subprocess on this machine.

The whole product runs (SNMP agent on loopback, NVML facade, sysfs/procfs
trees, daemon, engine, SQLite, /metrics, signed webhook pages); the test
checks the summary against the injected ground truth and that nothing is
left behind: no process of the demo's session, no temp dir, no port.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fabricwatch.cli import build_parser
from fabricwatch.demo.runner import alerting_wired
from fabricwatch.demo.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[2]


def _command() -> list[str]:
    """``fabricwatch demo`` when the CLI has it, else the module's own entry point."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction) and "demo" in action.choices:
            return [sys.executable, "-m", "fabricwatch", "demo"]
    return [sys.executable, "-m", "fabricwatch", "demo"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmp)
    env.pop("COLUMNS", None)
    return env


def _session_members(sid: int) -> list[str]:
    """Processes still in the demo's session (it was started as a session leader)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # Fields after the ")" of comm: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid:
            out.append(f"{d.name} {stat[:60]}")
    return out


def _port_free(port: int, kind: int) -> bool:
    """Nobody holds ``port`` (connections in TIME_WAIT from a closed server do not count)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(out: str) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = [
        (int(m), socket.SOCK_DGRAM)
        for m in re.findall(r"SNMP agent on udp 127\.0\.0\.1:(\d+)", out)
    ]
    found += [
        (int(m), socket.SOCK_STREAM)
        for m in re.findall(r"(?:/metrics on|receiver on) http://127\.0\.0\.1:(\d+)", out)
    ]
    return found


def test_demo_all_matches_ground_truth_pages_and_leaves_nothing(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    summary_path = tmp_path / "summary.json"
    proc = subprocess.Popen(
        # x5, not the default x10: the demo's node, agent and daemon share one process,
        # and on a loaded machine x10 outruns them (a fault's polls come too late).
        [*_command(), "--scenario", "all", "--speed", "5", "--summary-json", str(summary_path)],
        cwd=REPO,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out[-4000:]}\nstderr:\n{err}"
    doc = json.loads(summary_path.read_text())
    assert doc["schema"] == "fabricwatch.demo/v1"
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert list(by_name) == list(SCENARIOS)
    for name, sc in SCENARIOS.items():
        got = by_name[name]
        if sc.truth is None:
            assert got["incidents"] == [], f"{name}: {got['incidents']}"
            continue
        assert got["incidents"], f"{name}: nothing detected"
        first = got["incidents"][0]
        assert first["cause"] == sc.truth.cause, (name, first)
        assert first["culprit"] in sc.truth.culprits, (name, first)
        assert first["kind"] == sc.truth.kind, (name, first)
        assert got["detection_latency_seconds"] is not None
        assert got["injected_gpu_seconds"] > 0
        if alerting_wired():
            transitions = {(p["incident"], p["transition"]) for p in got["pages"]}
            assert (first["key"], "opened") in transitions, (name, got["pages"])
            assert (first["key"], "resolved") in transitions, (name, got["pages"])
    assert doc["unexpected_incidents"] == []
    assert doc["ok"] is True
    assert doc["alerting"] is alerting_wired()
    # Only GPU-seconds of injected faults are counted, by the injected causes.
    causes = {sc.truth.cause for sc in SCENARIOS.values() if sc.truth is not None}
    assert set(doc["gpu_seconds_by_cause"]) == causes
    # What the user sees: progress lines, incidents, pages, the summary table.
    assert "incident opened   pfc_storm on switch:leaf1:Ethernet0:3" in out
    assert "injected faults vs what fabricwatch reported" in out
    assert "GPU-seconds lost by cause" in out
    assert "simulated storage backend" in out
    if alerting_wired():
        assert "page     opened   [critical]" in out
    assert "Traceback" not in out + err
    # Nothing left behind.
    assert _session_members(proc.pid) == []
    assert list(tmp.iterdir()) == []
    ports = _ports(out)
    assert len(ports) == 3
    for port, kind in ports:
        assert _port_free(port, kind), port


def _read_until(proc: subprocess.Popen[str], pattern: str, seconds: float) -> str:
    """Lines of stdout until one matches ``pattern`` (bounded in time and lines)."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + seconds
    # poll, not select: select() refuses descriptors above 1023, which a
    # long-lived test worker can reach.
    poller = select.poll()
    poller.register(proc.stdout, select.POLLIN)
    for _ in range(10_000):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if not poller.poll(left * 1000):
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    pytest.fail(f"no line matching {pattern!r} within {seconds} s; got:\n{seen[-3000:]}")


def test_ctrl_c_stops_cleanly_and_metrics_were_served(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [*_command(), "--scenario", "pfc-storm", "--speed", "10"],
        cwd=REPO,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        seen = _read_until(proc, r"daemon ready", 60)
        port = int(re.findall(r"/metrics on http://127\.0\.0\.1:(\d+)", seen)[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert 'fabricwatch_collector_up{collector="switch"} 1' in metrics
        assert "fabricwatch_gpu_sm_active_ratio" in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/incidents", timeout=10) as r:
            assert json.loads(r.read())["incidents"] == []
        assert list(tmp.iterdir()), "the demo works in a temp dir under TMPDIR"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert "Traceback" not in err
    assert _session_members(proc.pid) == []
    assert list(tmp.iterdir()) == []
    assert _port_free(port, socket.SOCK_STREAM)
