"""The ``fabricwatch`` command line.

Exit codes: 0 success, 1 failure, 2 invalid configuration or usage,
3 the daemon could not start (port in use, a required collector failed).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from fabricwatch import __version__
from fabricwatch.config import DEFAULT_CONFIG_PATH, DEFAULT_PORT, Config, load_config
from fabricwatch.errors import ConfigError, FabricwatchError
from fabricwatch.logs import configure_logging
from fabricwatch.settings import dumps_toml, to_table

EXIT_CONFIG = 2


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
        "fabricwatch.demo.cli",
        "the whole pipeline on simulated hardware: a PFC storm, ECN congestion, an NVLink "
        "fault, a link flap and a checkpoint stall, detected and explained live",
    ),
    _External(
        "probe-storage",
        "fabricwatch.collectors.storage.probe_cli",
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
        "fabricwatch.fleet.cli",
        "run the fleet aggregator: group node incidents from MQTT into one page per fabric fault",
    ),
    _External(
        "replay",
        "fabricwatch.engine.cli_replay",
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
        cfg.web.validate()
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
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        print(f"# valid: {where}")
        print(dumps_toml(table), end="")
    return 0


def cmd_sample_config(_args: argparse.Namespace) -> int:
    """Print the fully commented sample config (all defaults)."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.sample import render_sample

    print(render_sample(builtin_registry()), end="")
    return 0


def cmd_version(_args: argparse.Namespace) -> int:
    """Print the version."""
    print(f"fabricwatch {__version__} (Python {platform.python_version()})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="fabricwatch",
        description=(
            "GPU fabric-health monitor: watches switch PFC/ECN, host RDMA NICs, NVLink/NVML "
            "and checkpoint storage, and explains why GPUs of a running job went idle."
        ),
        epilog=f"Default config: {DEFAULT_CONFIG_PATH} (optional). Default listen port: "
        f"{DEFAULT_PORT}. Exit codes: 0 ok, 1 failure, 2 bad config/usage, 3 cannot start.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"config file (default: {DEFAULT_CONFIG_PATH} if present)",
    )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="override log.level"
    )
    parser.add_argument(
        "--log-format",
        choices=["json", "console"],
        help="override log.format (json for journald, console for people)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "run",
        help="run the node daemon in the foreground",
        description="Run collectors, engine and outputs; serve /metrics. "
        "Works with no config file, no GPU and no switch.",
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="override web.listen")
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
    return parser


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
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
