"""The ``fabricwatch`` command line: one module per command, imported only when used.

:data:`COMMANDS` is the registry: each entry names a command, its help, and the
module of this package that implements it (``configure_parser(parser)`` and
``run(args) -> int``). :func:`main` registers every command with its help only
and imports a command's module (and with it what the command needs: the
engine, SNMP, MQTT...) when that command is the one on the command line, so
``fabricwatch version`` loads none of them. :func:`build_parser` configures
every command (the man page and the tests).

Exit codes are :class:`fabricwatch.errors.ExitCode`, one table for every
command: 0 ok, 1 failure, 2 invalid configuration or usage, 3 the daemon
could not start (port in use, a required collector failed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from fabricwatch.cli.version import version_text
from fabricwatch.defaults import DEFAULT_CONFIG_PATH, DEFAULT_PORT
from fabricwatch.errors import EXIT_CODE_HELP, ConfigError, ExitCode, FabricwatchError


class _Subcommand(Protocol):
    def configure_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help, and the module that implements it.

    Attributes:
        name: the word on the command line.
        module: the module with ``configure_parser`` and ``run``; imported only
            when the command runs or a complete parser is built.
        help: the line in ``fabricwatch --help``.
        description: the first paragraph of ``fabricwatch NAME --help``.
        uses_config: reads fabricwatch.toml, so takes ``--config`` after the
            name too (replay and fleet define their own, also with
            default=SUPPRESS: given after the command it wins, absent it leaves
            the one given before).
    """

    name: str
    module: str
    help: str
    description: str | None = None
    uses_config: bool = False

    def load(self) -> _Subcommand:
        """The implementing module."""
        return cast(_Subcommand, importlib.import_module(self.module))


def _described(name: str, module: str, help: str, *, uses_config: bool = False) -> Command:
    return Command(name, module, help, description=help, uses_config=uses_config)


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "fabricwatch.cli.run",
        "run the node daemon in the foreground",
        "Run collectors, engine and outputs; serve /metrics. "
        "Works with no config file, no GPU and no switch.",
        uses_config=True,
    ),
    Command(
        "check-config",
        "fabricwatch.cli.check_config",
        "validate a config file and print the effective config",
        "Validate without starting anything; exit 2 "
        "with the key path on error. Secrets are redacted.",
        uses_config=True,
    ),
    Command(
        "sample-config",
        "fabricwatch.cli.sample_config",
        "print a fully commented config with every default",
        "The output is deploy/fabricwatch.toml: every key, its help and its default.",
    ),
    Command("version", "fabricwatch.cli.version", "print the version"),
    _described(
        "demo",
        "fabricwatch.cli.demo",
        "the whole pipeline on simulated hardware: a PFC storm, ECN congestion, an NVLink "
        "fault, a link flap and a checkpoint stall, detected and explained live",
    ),
    _described(
        "probe-storage",
        "fabricwatch.cli.probe_storage",
        "rehearse a checkpoint: write SIZE to PATH with fsync, report GB/s and per-write "
        "latency, and whether a model's checkpoint fits the time budget",
    ),
    _described(
        "incidents",
        "fabricwatch.cli.incidents",
        "list the incidents recorded in the state directory (--deliveries: the alert outbox)",
        uses_config=True,
    ),
    _described(
        "fleet",
        "fabricwatch.cli.fleet",
        "run the fleet aggregator: group node incidents from MQTT into one page per fabric fault",
    ),
    _described(
        "replay",
        "fabricwatch.cli.replay",
        "run the correlation engine offline over OpenMetrics files or a Prometheus server",
    ),
)
_BY_NAME = {c.name: c for c in COMMANDS}


def _config_option(parser: argparse.ArgumentParser) -> None:
    """``--config`` after the command too (``run --config FILE``).

    SUPPRESS: absent after the command, it leaves the value given before it.
    """
    if "--config" in parser._option_string_actions:
        return
    parser.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help=f"config file (default: {DEFAULT_CONFIG_PATH} if present); also before COMMAND",
    )


def _configure(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give ``parser`` the options of ``command`` (imports its module)."""
    command.load().configure_parser(parser)
    if command.uses_config:
        _config_option(parser)


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose options are added only when one is chosen.

    ``pending`` holds the commands not configured yet; the one named on the
    command line is configured just before its arguments are parsed.
    """

    pending: dict[str, Command]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        name = values[0] if isinstance(values, Sequence) and values else None
        command = self.pending.pop(str(name), None)
        if command is not None:
            _configure(self.choices[command.name], command)
        super().__call__(parser, namespace, values, option_string)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The argument parser with every subcommand.

    ``lazy``: register the commands by name and help only, and configure (and
    import) a command when it is parsed: what :func:`main` uses, so a command
    imports only its own module.
    """
    parser = argparse.ArgumentParser(
        prog="fabricwatch",
        description=(
            "GPU fabric-health monitor: watches switch PFC/ECN, host RDMA NICs, NVLink/NVML "
            "and checkpoint storage, and explains why GPUs of a running job went idle."
        ),
        epilog=f"Default config: {DEFAULT_CONFIG_PATH} (optional). Default listen port: "
        f"{DEFAULT_PORT}. {EXIT_CODE_HELP}",
    )
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"config file (default: {DEFAULT_CONFIG_PATH} if present); also after COMMAND",
    )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="override log.level"
    )
    parser.add_argument(
        "--log-format",
        choices=["auto", "json", "console"],
        help="override log.format (json for journald, console for people, auto: console on "
        "a terminal)",
    )
    sub = cast(
        _Commands,
        parser.add_subparsers(dest="command", metavar="COMMAND", required=True, action=_Commands),
    )
    sub.pending = {}
    for command in COMMANDS:
        # The epilog first: a command may set its own (probe-storage does).
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=EXIT_CODE_HELP,
        )
        if lazy:
            sub.pending[command.name] = command
        else:
            _configure(p, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fabricwatch`` console script."""
    args = build_parser(lazy=True).parse_args(argv)
    try:
        return _BY_NAME[args.command].load().run(args)
    except ConfigError as exc:
        print(f"fabricwatch: configuration error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except FabricwatchError as exc:
        print(f"fabricwatch: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`fabricwatch incidents | head`): nothing left to
        # say to it. Point stdout at /dev/null so the interpreter's final flush
        # does not raise a second time, and exit as a command killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.OUTPUT_CLOSED
