"""``fabricwatch probe-storage`` end to end: in process, as a subprocess, interrupted."""

from __future__ import annotations

import argparse
import json
import math
import os
import pty
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.cli import probe_storage as probe_cli

COMMAND = ["-m", "fabricwatch", "probe-storage"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabricwatch probe-storage")
    probe_cli.configure_parser(parser)
    return parser.parse_args(list(argv))


def _check_consistent(r: dict[str, Any]) -> None:
    assert r["schema"] == "fabricwatch.probe-storage/v1"
    assert r["seconds"] > 0
    assert r["bytes_per_second"] == pytest.approx(r["bytes_written"] / r["seconds"])
    assert r["gb_per_second"] == pytest.approx(r["bytes_per_second"] / 1e9)
    lat = r["write_latency_seconds"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] <= r["seconds"]
    assert lat["count"] >= r["bytes_written"] // r["block_size"]
    assert r["fsync_seconds"]["count"] >= r["streams"]


def test_in_process_256mib_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(
        str(tmp_path), "--size", "256MiB", "--params", "175e9", "--budget", "60s", "--json"
    )
    rc = probe_cli.run(args)
    r = json.loads(capsys.readouterr().out)
    _check_consistent(r)
    assert r["requested_bytes"] == r["bytes_written"] == 256 << 20
    assert r["block_size"] == 16 << 20 and r["streams"] == 1 and r["direct"] is False
    assert r["write_latency_seconds"]["count"] == 16
    c = r["checkpoint"]
    assert c["bytes"] == pytest.approx(175e9 * 14)  # 2.45 TB
    assert c["seconds"] == pytest.approx(c["bytes"] / r["bytes_per_second"])
    assert c["fits"] is (c["seconds"] <= 60)
    assert c["budget_ratio"] == pytest.approx(c["seconds"] / 60)
    assert rc == (0 if c["fits"] else 1)
    assert r["fstype"] and r["mountpoint"]
    assert list(tmp_path.iterdir()) == []


def test_subprocess_streams_direct_and_small_model_fits(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            *COMMAND,
            str(tmp_path),
            "--size",
            "256MiB",
            "--streams",
            "4",
            "--block-size",
            "4MiB",
            "--direct",
            "--params",
            "1M",
            "--bytes-per-param",
            "16",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # not a TTY: no progress bar
    r = json.loads(proc.stdout)
    _check_consistent(r)
    assert r["streams"] == 4 and r["direct"] is True
    assert r["bytes_written"] == 256 << 20
    assert r["checkpoint"]["bytes"] == 16e6 and r["checkpoint"]["fits"] is True
    assert list(tmp_path.iterdir()) == []


def test_human_output_and_over_budget_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 1 ms budget for a 1.75 PB checkpoint cannot fit anywhere.
    rc = probe_cli.run(
        _args(
            str(tmp_path),
            "--size",
            "8MiB",
            "--block-size",
            "1MiB",
            "--params",
            "125T",
            "--budget",
            "1ms",
            "--fsync-every",
            "2MiB",
        )
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "sustained" in out and "p99" in out and "DOES NOT FIT" in out
    assert "1.6 PiB" in out  # 125e12 x 14 B, in the units --size takes


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert probe_cli.run(_args(str(tmp_path / "missing"), "--size", "1MiB")) == 2
    assert "not an existing directory" in capsys.readouterr().err
    assert probe_cli.run(_args(str(tmp_path), "--size", "1000PiB")) == 2
    err = capsys.readouterr().err
    assert "pass a smaller --size" in err
    assert "asks for 1000.0 PiB" in err and " bytes free" not in err
    for bad, needle in (
        (["--size", "lots"], "expected a size"),
        (["--size", "0"], "more than 0 bytes"),
        (["--params", "-5"], "expected a parameter count"),
        (["--params", "x"], "expected a parameter count"),
        (["--budget", "soon"], "expected a duration"),
        (["--streams", "0"], "streams must be 1-256"),
        (["--bytes-per-param", "nan"], "positive number"),
    ):
        with pytest.raises(SystemExit) as exc:
            _args(str(tmp_path), *bad)
        assert exc.value.code == 2
        assert needle in capsys.readouterr().err, bad


@pytest.mark.parametrize(
    "text,value", [("175e9", 175e9), ("70B", 70e9), ("1.5T", 1.5e12), ("350m", 350e6), ("8", 8.0)]
)
def test_parse_count(text: str, value: float) -> None:
    assert probe_cli.parse_count(text) == value


def test_write_error_is_reported_and_files_removed(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel fail the write past 1 MiB (EFBIG) for real."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    proc = subprocess.run(
        [sys.executable, *COMMAND, str(tmp_path), "--size", "4MiB", "--block-size", "256KiB"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=limit,
    )
    assert proc.returncode == 2, proc.stderr
    assert "write failed: File too large" in proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_removes_files(tmp_path: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            *COMMAND,
            str(tmp_path),
            "--size",
            "8GiB",
            "--block-size",
            "1MiB",
            "--fsync-every",
            "1MiB",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        written = False
        for _ in range(6000):
            files = (
                [p for d in tmp_path.iterdir() for p in d.iterdir()]
                if any(tmp_path.iterdir())
                else []
            )
            if any(f.stat().st_size > 0 for f in files if f.exists()):
                written = True
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert written, "the probe never started writing"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted; files removed" in err
    assert list(tmp_path.iterdir()) == []
    assert out == ""


def test_quantile_nearest_rank() -> None:
    vals = [float(i) for i in range(1, 101)]
    assert probe_cli._quantile(vals, 0.5) == 50.0
    assert probe_cli._quantile(vals, 0.99) == 99.0
    assert probe_cli._quantile([], 0.5) == 0.0
    assert math.isclose(probe_cli._quantile([3.0], 0.99), 3.0)


def test_progress_bar_on_a_tty_only(tmp_path: Path) -> None:

    main_fd, child_fd = pty.openpty()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                *COMMAND,
                str(tmp_path),
                "--size",
                "64MiB",
                "--block-size",
                "1MiB",
                "--fsync-every",
                "4MiB",
            ],
            stdout=subprocess.PIPE,
            stderr=child_fd,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
        )
        os.close(child_fd)
        child_fd = -1
        chunks = []
        for _ in range(1000):
            try:
                data = os.read(main_fd, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(main_fd)
        if child_fd >= 0:
            os.close(child_fd)
    tty_err = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0
    assert "writing" in tty_err
    assert "sustained" in proc.stdout
