"""``fabricwatch fleet`` as a command: config errors, exit codes, SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiomqtt
import pytest

from fabricwatch.cli import fleet as cli
from fabricwatch.config import parse_config
from tests.alerting.conftest import Mosquitto, python_env
from tests.conftest import free_port
from tests.fleet.conftest import http_get, wait_for


def run_cli(tmp_path: Path, text: str, *extra: str) -> tuple[int, str]:
    cfg = tmp_path / "f.toml"
    cfg.write_text(text)
    p = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "fleet", "--config", str(cfg), *extra],
        capture_output=True,
        text=True,
        timeout=30,
        env=python_env(),
        check=False,
    )
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[fleet]\npartitions = 0\n", "fleet.partitions"),
        ('[fleet]\nsettle = "soon"\n', "fleet.settle"),
        ("[fleet]\nbogus = 1\n", "fleet.bogus"),
        ('[fleet]\nreplica_id = "Has Spaces"\n', "replica_id"),
        ('[fleet]\ngroup_by = ["switch", "switch"]\n', "twice"),
        ('[fleet]\ngroup_by = ["rack"]\n', "fleet.group_by[0]"),
        ('[[fleet.cliques]]\nname = "x"\n', "fleet.cliques[0]"),
    ],
)
def test_bad_fleet_config_exits_2_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    code, out = run_cli(tmp_path, text)
    assert code == 2, out
    assert needle in out


def test_mqtt_must_be_enabled(tmp_path: Path) -> None:
    code, out = run_cli(tmp_path, f'[daemon]\nstate_dir = "{tmp_path}"\n')
    assert code == 2
    assert "fleet_needs_mqtt" in out


def test_bad_listen_override_exits_2(tmp_path: Path) -> None:
    code, out = run_cli(tmp_path, "[mqtt]\nenabled = true\n", "--listen", "nowhere")
    assert code == 2 and "listen" in out


def test_the_fleet_table_is_part_of_the_node_config() -> None:
    from fabricwatch.collectors import builtin_registry

    cfg = parse_config({"fleet": {"settle": "10s", "cliques": [{"name": "a", "nodes": ["n*"]}]}},
                       builtin_registry())  # fmt: skip
    assert cfg.fleet.settle == 10.0 and cfg.fleet.cliques[0].nodes == ["n*"]


def test_parser_leaves_the_main_parsers_config_alone() -> None:
    main = argparse.ArgumentParser()
    main.add_argument("--config", type=Path)
    sub = main.add_subparsers()
    cli.configure_parser(sub.add_parser("fleet"))
    args = main.parse_args(["--config", "/x.toml", "fleet", "--replica-id", "a"])
    assert args.config == Path("/x.toml") and args.replica_id == "a"


@pytest.mark.integration
async def test_runs_serves_and_stops_on_sigterm(tmp_path: Path, mosquitto: Mosquitto) -> None:
    http = free_port()
    cfg = tmp_path / "f.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}"\n[mqtt]\nenabled = true\nport = {mosquitto.port}\n'
        f'[fleet]\nreplica_id = "solo"\nlisten = "127.0.0.1:{http}"\nhandover_delay = "0s"\n'
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fabricwatch", "fleet", "--config", str(cfg),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=python_env(),
    )  # fmt: skip
    try:

        async def ready() -> bool:
            try:
                return (await http_get(f"http://127.0.0.1:{http}/-/ready"))[0] == 200
            except OSError:
                return False

        await wait_for(ready, 20.0, "the replica to be ready")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15.0) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # A clean stop leaves the replica's retained status "offline".
    async with aiomqtt.Client("127.0.0.1", mosquitto.port, identifier="cli-test") as c:
        await c.subscribe("fabricwatch/v1/_fleet/fleet/replicas/solo", qos=1)
        async with asyncio.timeout(5):
            async for msg in c.messages:
                assert msg.payload == b"offline" and msg.retain
                break
    assert (tmp_path / "fleet" / "fleet.sqlite3").exists()
