"""``fabricwatch check-config``: validate a config file, print the effective config."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fabricwatch.defaults import CREDENTIALS_SOURCE, DEFAULT_CONFIG_PATH
from fabricwatch.errors import ExitCode


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """FILE and ``--json``."""
    parser.add_argument(
        "file",
        nargs="?",
        type=Path,
        help=f"file to check (default: --config or {DEFAULT_CONFIG_PATH})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of TOML")


def run(args: argparse.Namespace) -> int:
    """Validate a config file and print the effective config, secrets redacted."""
    from fabricwatch.collectors import builtin_registry
    from fabricwatch.config import load_config
    from fabricwatch.settings import dumps_toml, to_table

    path: Path | None = args.file or args.config
    cfg = load_config(path, builtin_registry())
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
