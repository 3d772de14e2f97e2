"""The ``fabricwatch`` command line.

Exit codes are :class:`fabricwatch.errors.ExitCode`, one table for every
command: 0 ok, 1 failure, 2 invalid configuration or usage, 3 the daemon
could not start (port in use, a required collector failed).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from fabricwatch import __version__
from fabricwatch.config import (
    CREDENTIALS_SOURCE,
    DEFAULT_CONFIG_PATH,
    DEFAULT_PORT,
    Config,
    load_config,
    split_listen,
)
from fabricwatch.errors import EXIT_CODE_HELP, ConfigError, ExitCode, FabricwatchError
from fabricwatch.logs import configure_logging
from fabricwatch.settings import dumps_toml, to_table

EXIT_CONFIG = ExitCode.USAGE


class _Subcommand(Protocol):
    def configure_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class _External:
    """A subcommand implemented in another module, imported only when used."""

    name: str
    module: str
    help: str


# Subcommands whose implementation lives beside the feature they drive.
_EXTERNAL: tuple[_External, ...] = (
    _External(
        "demo",
        "fabricwatch.cli.demo",
        "the whole pipeline on simulated hardware: a PFC storm, ECN congestion, an NVLink "
        "fault, a link flap and a checkpoint stall, detected and explained live",
    ),
    _External(
        "probe-storage",
        "fabricwatch.cli.probe_storage",
        "rehearse a checkpoint: write SIZE to PATH with fsync, report GB/s and per-write "
        "latency, and whether a model's checkpoint fits the time budget",
    ),
    _External(
        "incidents",
        "fabricwatch.incidents_cli",
        "list the incidents recorded in the state directory (--deliveries: the alert outbox)",
    ),
    _External(
        "fleet",
        "fabricwatch.cli.fleet",
        "run the fleet aggregator: group node incidents from MQTT into one page per fabric fault",
    ),
    _External(
        "replay",
        "fabricwatch.cli.replay",
        "run the correlation engine offline over OpenMetrics files or a Prometheus server",
    ),
)


def _load(args: argparse.Namespace, path: Path | None = None) -> Config:
    from fabricwatch.collectors import builtin_registry

    return load_config(path if path is not None else args.config, builtin_registry())


def cmd_run(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground (systemd Type=notify)."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.daemon import Daemon

    cfg = _load(args)
    if args.listen:
        cfg.web.listen = args.listen
    configure_logging(args.log_level or cfg.log.level, args.log_format or cfg.log.format)
    daemon = Daemon(
        cfg, builtin_registry(), config_path=args.config, web_config_path=args.web_config
    )
    return asyncio.run(daemon.run())


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a config file and print the effective config, secrets redacted."""
    path: Path | None = args.file or args.config
    cfg = _load(args, path)
    if cfg.web.config_file:
        from fabricwatch.webconfig import load_web_config

        load_web_config(Path(cfg.web.config_file))
    where = cfg.source or f"embedded defaults ({DEFAULT_CONFIG_PATH} not present)"
    table = to_table(cfg)
    table.pop("source", None)
    for warning in missing_paths(table):
        print(f"fabricwatch: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        print(f"# valid: {where}")
        print(dumps_toml(table), end="")
    return ExitCode.OK


def _credential(value: str) -> Path:
    """Where the daemon would look for a ``*_file`` value, seen from this shell.

    Under systemd a relative name is in ``$CREDENTIALS_DIRECTORY``; from an
    operator's shell the unit's ``LoadCredential=fabricwatch:DIR`` means
    ``fabricwatch_NAME`` is ``DIR/NAME``.
    """
    p = Path(value)
    if p.is_absolute():
        return p
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds:
        return Path(creds) / p
    prefix = "fabricwatch_"
    if value.startswith(prefix):
        return CREDENTIALS_SOURCE / value.removeprefix(prefix)
    return p


def missing_paths(table: object, key: str = "") -> list[str]:
    """Warnings for referenced files and directories that do not exist.

    Valid config, wrong machine: a credential file not yet installed or a
    checkpoint directory not mounted would fail at start or stay silent, so
    ``check-config`` names the key. Disabled collectors are not checked.
    """
    out: list[str] = []
    if isinstance(table, dict):
        if table.get("enabled") is False:
            return out
        for k, v in table.items():
            sub = f"{key}.{k}" if key else str(k)
            if isinstance(v, str) and v and k.endswith("_file"):
                where = _credential(v)
                if not where.is_file():
                    out.append(f"{sub}: file {where} does not exist (the daemon reads it at start)")
            elif isinstance(v, str) and v and sub.startswith("collectors.storage.paths"):
                if k == "path" and not Path(v).is_dir():
                    out.append(f"{sub}: directory {v} does not exist (nothing to probe or map)")
            else:
                out.extend(missing_paths(v, sub))
    elif isinstance(table, list):
        for i, v in enumerate(table):
            out.extend(missing_paths(v, f"{key}[{i}]"))
    return out


def cmd_sample_config(_args: argparse.Namespace) -> int:
    """Print the fully commented sample config (all defaults)."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.sample import render_sample

    print(render_sample(builtin_registry()), end="")
    return ExitCode.OK


def version_text() -> str:
    """``fabricwatch X.Y.Z (Python A.B.C)``."""
    return f"fabricwatch {__version__} (Python {platform.python_version()})"


def cmd_version(_args: argparse.Namespace) -> int:
    """Print the version."""
    print(version_text())
    return ExitCode.OK


def listen_address(text: str) -> str:
    """argparse type of ``--listen``: host:port with a port 0-65535."""
    try:
        split_listen(text)
    except ValueError:
        msg = (
            f"expected HOST:PORT with a port 0-65535 (0.0.0.0:{DEFAULT_PORT}, "
            f"[::1]:{DEFAULT_PORT}, :{DEFAULT_PORT}), got {text!r}"
        )
        raise argparse.ArgumentTypeError(msg) from None
    return text


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "run",
        help="run the node daemon in the foreground",
        description="Run collectors, engine and outputs; serve /metrics. "
        "Works with no config file, no GPU and no switch.",
    )
    p.add_argument("--listen", metavar="HOST:PORT", type=listen_address, help="override web.listen")
    p.add_argument(
        "--web-config",
        type=Path,
        metavar="FILE",
        help="exporter-toolkit web-config (TLS, basic auth); overrides web.config_file",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "check-config",
        help="validate a config file and print the effective config",
        description="Validate without starting anything; exit 2 "
        "with the key path on error. Secrets are redacted.",
    )
    p.add_argument(
        "file",
        nargs="?",
        type=Path,
        help=f"file to check (default: --config or {DEFAULT_CONFIG_PATH})",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser(
        "sample-config",
        help="print a fully commented config with every default",
        description="The output is deploy/fabricwatch.toml: every key, its help and its default.",
    )
    p.set_defaults(func=cmd_sample_config)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(func=cmd_version)

    for ext in _EXTERNAL:
        module = cast(_Subcommand, importlib.import_module(ext.module))
        p = sub.add_parser(ext.name, help=ext.help, description=ext.help)
        module.configure_parser(p)
        p.set_defaults(func=module.run)
    for p in sub.choices.values():
        if p.epilog is None:
            p.epilog = EXIT_CODE_HELP
        if p.prog.split()[-1] in _USES_CONFIG:
            _config_option(p)
    return parser


# Commands that read fabricwatch.toml and so take --config after the name too
# (replay and fleet define their own, also with default=SUPPRESS: given after the
# command it wins, absent it leaves the one given before).
_USES_CONFIG = frozenset({"run", "check-config", "incidents"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fabricwatch`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = cast(Callable[[argparse.Namespace], int], args.func)
    try:
        return func(args)
    except ConfigError as exc:
        print(f"fabricwatch: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
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


if __name__ == "__main__":
    sys.exit(main())
