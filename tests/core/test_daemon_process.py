"""The daemon as a real subprocess: HTTP, signals, sd_notify, reload, shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def _has_nvml() -> bool:
    import ctypes.util

    return ctypes.util.find_library("nvidia-ml") is not None


def _config(tmp_path: Path, port: int, extra: str = "") -> Path:
    p = tmp_path / "fabricwatch.toml"
    p.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\ntick = 0.1\n'
        f'[web]\nlisten = "127.0.0.1:{port}"\n' + extra
    )
    return p


def _start(cfg: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", "--config", str(cfg), "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _wait_ready(proc: subprocess.Popen[str], port: int, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"daemon exited early with {proc.returncode}:\n{out}")
        try:
            if _get(f"http://127.0.0.1:{port}/-/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail("daemon never became ready")


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=5)
        pytest.fail(f"daemon did not exit within 5 s of SIGTERM:\n{out}")
    return proc.returncode, out


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    path = tmp_path / "notify.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(5.0)
    yield s
    s.close()


def _recv_until(
    sock: socket.socket, wanted: str, limit: int = 200, within: float = 60.0
) -> list[str]:
    """Messages up to the one starting with ``wanted`` (bounded in count and time: a
    daemon that starts slowly on a loaded machine is waited for, one that is silent is not)."""
    seen: list[str] = []
    deadline = time.monotonic() + within
    for _ in range(limit):
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            msg = sock.recv(4096).decode()
        except TimeoutError:
            break
        seen.append(msg)
        if msg.startswith(wanted):
            return seen
    pytest.fail(f"{wanted} not received within {within} s / {limit} messages; got {seen}")


def test_run_serves_metrics_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    proc = _start(_config(tmp_path, port))
    try:
        _wait_ready(proc, port)
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "fabricwatch_build_info{" in body
        assert "process_resident_memory_bytes" in body
        assert "fabricwatch_config_last_reload_successful 1.0" in body
        assert _get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200
        if not _has_nvml():
            # No GPU here: the GPU collector reports absent, once, and stays down.
            assert 'fabricwatch_collector_up{collector="gpu"} 0.0' in body
            assert 'fabricwatch_collector_failures_total{collector="gpu",reason="absent"}' in body
            time.sleep(1.5)  # a few more collection cycles
    finally:
        rc, out = _stop(proc)
    assert rc == 0, out
    assert "Traceback" not in out, out
    if not _has_nvml():
        assert out.count('"event": "nvml_absent"') == 1, out
    assert '"event": "stopping"' in out


def test_sd_notify_sequence(tmp_path: Path, notify_socket: socket.socket) -> None:
    port = free_port()
    path = notify_socket.getsockname()
    proc = _start(_config(tmp_path, port), {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
    try:
        first = _recv_until(notify_socket, "READY=1")
        assert not any(m.startswith("WATCHDOG=1") for m in first)  # no ping before ready
        pings = 0
        notify_socket.settimeout(30.0)  # pings come every 0.1 s; 30 s covers a loaded machine
        for _ in range(50):
            if notify_socket.recv(4096).decode() == "WATCHDOG=1":
                pings += 1
                if pings == 3:
                    break
        assert pings == 3
        proc.send_signal(signal.SIGHUP)
        msgs = _recv_until(notify_socket, "RELOADING=1")
        reloading = msgs[-1]
        assert "MONOTONIC_USEC=" in reloading
        usec = int(reloading.split("MONOTONIC_USEC=")[1].split()[0])
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert 0 < now - usec < 60_000_000  # same clock as ours
        _recv_until(notify_socket, "READY=1")
        proc.send_signal(signal.SIGTERM)
        _recv_until(notify_socket, "STOPPING=1")
    finally:
        rc, out = _stop(proc)
    assert rc == 0, out


def test_sighup_with_invalid_file_keeps_old_config(tmp_path: Path) -> None:
    port = free_port()
    cfg = _config(tmp_path, port)
    good = cfg.read_text()
    proc = _start(cfg)
    try:
        _wait_ready(proc, port)
        cfg.write_text(good.replace("tick = 0.1", "tick = 0.1\nnonsense = 1"))
        proc.send_signal(signal.SIGHUP)
        body = ""
        for _ in range(100):
            body = _get(f"http://127.0.0.1:{port}/metrics")[1]
            if "fabricwatch_config_last_reload_successful 0.0" in body:
                break
            time.sleep(0.05)
        assert "fabricwatch_config_last_reload_successful 0.0" in body
        assert _get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200  # still serving
        cfg.write_text(good.replace("tick = 0.1", "tick = 0.2"))
        proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            body = _get(f"http://127.0.0.1:{port}/metrics")[1]
            if "fabricwatch_config_last_reload_successful 1.0" in body:
                break
            time.sleep(0.05)
        assert "fabricwatch_config_last_reload_successful 1.0" in body
    finally:
        rc, out = _stop(proc)
    assert rc == 0
    assert '"event": "reload_failed"' in out
    assert "daemon.nonsense" in out


def test_port_in_use_exits_3_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _start(_config(tmp_path, port))
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert "listen_failed" in out
    assert "Traceback" not in out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fabricwatch", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_config_reports_key_path_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[store]\nhistory = -1\n")
    r = _cli("check-config", str(bad))
    assert r.returncode == 2
    assert f"{bad}: store.history: expected a value between 2 and 100000" in r.stderr


def test_check_config_accepts_the_shipped_sample() -> None:
    r = _cli("check-config", str(REPO / "deploy" / "fabricwatch.toml"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# valid: ")
    assert "[daemon]" in r.stdout


def test_help_explains_every_subcommand() -> None:
    r = _cli("--help")
    assert r.returncode == 0
    for cmd in (
        "run",
        "check-config",
        "sample-config",
        "version",
        "probe-storage",
        "incidents",
        "replay",
    ):
        assert cmd in r.stdout
    assert "Exit codes" in r.stdout
