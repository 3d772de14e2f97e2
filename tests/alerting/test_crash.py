"""kill -9 with deliveries pending: on restart they are delivered; nothing is
delivered twice within one process lifetime."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fabricwatch.cli import deliveries as cli_deliveries
from tests.alerting.conftest import Receiver, new_secret, python_env

pytestmark = pytest.mark.integration

N = 40


async def wait_proc(proc: asyncio.subprocess.Process, within: float) -> int:
    return await asyncio.wait_for(proc.wait(), within)


async def test_kill_9_then_restart_delivers_everything_once_per_lifetime(
    tmp_path: Path, receiver: Receiver
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(new_secret() + "\n")
    receiver.delay = 0.05  # slow enough to kill it mid-way
    common = [
        sys.executable, "-m", "tests.alerting.driver", "webhook",
        "--state-dir", str(tmp_path / "state"), "--url", receiver.url,
        "--secret-file", str(secret_file),
    ]  # fmt: skip
    first = await asyncio.create_subprocess_exec(
        *common, "--enqueue", str(N), env=python_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(3000):  # up to 30 s
            if len(receiver.ok()) >= 10:
                break
            await asyncio.sleep(0.01)
        assert len(receiver.ok()) >= 10, "the first process delivered nothing"
    finally:
        first.send_signal(signal.SIGKILL)
        await wait_proc(first, 10)
    life1 = [r.headers["webhook-id"] for r in receiver.requests]
    assert len(life1) < N, "killed too late: nothing was pending"

    # Pending rows are visible to operators while the daemon is down.
    args = argparse.Namespace(
        state_dir=tmp_path / "state", delivery_state="pending", sink=None, limit=1000, json=True
    )
    rows = cli_deliveries.list_deliveries(
        tmp_path / "state" / "incidents.sqlite3", state="pending", limit=1000
    )
    assert len(rows) >= N - len(life1)
    assert cli_deliveries.run(args) == 0

    second = await asyncio.create_subprocess_exec(
        *common, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out, _ = await asyncio.wait_for(second.communicate(), 60)
    assert second.returncode == 0, out
    assert b"drained" in out
    life2 = [r.headers["webhook-id"] for r in receiver.requests[len(life1) :]]

    assert len(set(life1)) == len(life1), "duplicate within the first lifetime"
    assert len(set(life2)) == len(life2), "duplicate within the second lifetime"
    assert len(set(life1) | set(life2)) == N, "a delivery was lost"
    # At-least-once bound: only the request in flight at the kill may repeat.
    assert len(set(life1) & set(life2)) <= 1
    bodies = [json.loads(r.body) for r in receiver.requests]
    assert {b["data"]["node"] for b in bodies} == {"crash-node"}
