"""A command imports its own module and what it needs, nothing of the others.

Each check runs the real entry point in a fresh interpreter and reads
``sys.modules`` afterwards: module names, not timings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from fabricwatch.cli import COMMANDS, build_parser

HEAVY = (
    "pysnmp",
    "grpc",
    "prometheus_client",
    "aiomqtt",
    "aiohttp",
    "structlog",
    "rich",
    "fabricwatch.engine",
    "fabricwatch.collectors",
    "fabricwatch.config",
    "fabricwatch.daemon",
    "fabricwatch.outputs",
    "fabricwatch.fleet",
    "fabricwatch.demo",
)
"""Packages no command should need just to parse its arguments or print the version."""

_PROBE = """
import json, sys
from fabricwatch.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --help
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded_by(*argv: str) -> tuple[int, set[str]]:
    """Exit code and the modules imported by ``fabricwatch ARGV`` in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(doc["code"]), set(doc["modules"])


def _within(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


@pytest.mark.parametrize("argv", [["version"], ["--help"], ["--version"]])
def test_version_and_help_import_no_command(argv: list[str]) -> None:
    code, modules = loaded_by(*argv)
    assert code == 0
    heavy = {p for p in HEAVY if _within(modules, p)}
    assert not heavy, f"fabricwatch {' '.join(argv)} imported {sorted(heavy)}"
    ours = _within(modules, "fabricwatch")
    assert ours <= {
        "fabricwatch",
        "fabricwatch.cli",
        "fabricwatch.cli.version",
        "fabricwatch.defaults",
        "fabricwatch.errors",
    }, sorted(ours)


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_a_command_imports_no_other_commands_module(command: str) -> None:
    code, modules = loaded_by(command, "--help")
    assert code == 0
    mine = next(c.module for c in COMMANDS if c.name == command)
    assert mine in modules
    others = {c.module for c in COMMANDS if c.name != command} - {"fabricwatch.cli.version"}
    assert not others & modules, f"{command} --help imported {sorted(others & modules)}"


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_help_of_a_command_imports_nothing_heavy(command: str) -> None:
    code, modules = loaded_by(command, "--help")
    assert code == 0
    own = {"demo": "fabricwatch.demo"}.get(command)
    heavy = {p for p in HEAVY if p != own and _within(modules, p)}
    assert not heavy, f"fabricwatch {command} --help imported {sorted(heavy)}"


def test_the_complete_parser_knows_every_command() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [c.name for c in COMMANDS]
    # Configured, not only registered: every command with options has them.
    bare = {name for name, p in sub.choices.items() if len(p._actions) == 1}
    assert bare == {"version", "sample-config"}


_DAEMON_PROBE = """
import json, sys
from fabricwatch.collectors import builtin_registry
from fabricwatch.config import parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.logs import configure_logging
cfg = parse_config({}, builtin_registry(), source=None)
configure_logging(cfg.log.level, cfg.log.format)
Daemon(cfg, builtin_registry(), config_path=None)
print(json.dumps(sorted(sys.modules)))
"""

UNUSED_BY_DEFAULT = ("aiomqtt", "paho", "yaml", "bcrypt")
"""Libraries of features the embedded defaults leave off: MQTT (``[mqtt]``) and the
exporter-toolkit web-config (YAML, bcrypt basic auth). The daemon's RSS budget
(80 MiB, issue #19) has no room for them."""


def test_the_default_daemon_imports_no_library_of_an_unconfigured_feature() -> None:
    # What `fabricwatch run` does before asyncio.run, on the embedded defaults.
    proc = subprocess.run(
        [sys.executable, "-c", _DAEMON_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "fabricwatch.daemon" in modules
    unused = {p for p in UNUSED_BY_DEFAULT if _within(modules, p)}
    assert not unused, f"the default daemon imported {sorted(unused)}"
