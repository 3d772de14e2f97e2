"""The device check script: here (no driver) it must say so and fail; over a fake NVML it passes."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from pathlib import Path

import pytest

from . import check_nvml
from ._fakes import FakeGpu
from .conftest import MakeNvml

SCRIPT = Path(check_nvml.__file__)


def test_script_without_driver_exits_nonzero() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("libnvidia-ml is installed here: the no-NVML path cannot be exercised")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "1"],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        cwd=SCRIPT.parents[2],
    )
    assert proc.returncode == 2
    assert "no NVML: NVML Shared Library Not Found" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


async def test_script_over_fake_h100(
    make_nvml: MakeNvml, h100: list[FakeGpu], capsys: pytest.CaptureFixture[str]
) -> None:
    make_nvml(h100)
    rc = await check_nvml.run(seconds=0.6, interval=0.2)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: all core signals present" in out
    assert 'fabricwatch_gpu_power_watts{gpu="0"} 71.97' in out
    assert 'fabricwatch_gpu_nvlink_transmit_bytes{gpu="7",link="17"} total=0 rate=' in out


async def test_script_reports_missing_core_signal(
    make_nvml: MakeNvml, h100: list[FakeGpu], capsys: pytest.CaptureFixture[str]
) -> None:
    for g in h100:
        g.power_mw = None  # NOT_SUPPORTED
        g.gpm = None  # an H100 without GPM is a finding
    make_nvml(h100)
    rc = await check_nvml.run(seconds=0.4, interval=0.2)
    err = capsys.readouterr().err
    assert rc == 1
    assert "fabricwatch_gpu_power_watts" in err
    assert "GPM expected" in err
