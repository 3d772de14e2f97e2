"""``fabricwatch incidents``: list incidents from the state directory's database.

With ``--deliveries`` it lists the alert outbox instead
(:mod:`fabricwatch.cli.deliveries`), with ``--by job`` the per-job ledger
(:mod:`fabricwatch.cli.jobs`); all three find the database the same way
(:func:`database_path`), and each imports what it reads only when it runs.

The database is found the way the daemon finds its state directory:
``--state-dir``, else ``daemon.state_dir`` of ``--config`` (or of
``/etc/fabricwatch/fabricwatch.toml``), else, for the built-in default, the
fallback an unprivileged daemon uses (``$XDG_STATE_HOME/fabricwatch``). It is
opened read-only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabricwatch.cli import deliveries as cli_deliveries
from fabricwatch.cli import jobs as cli_jobs
from fabricwatch.cli._common import err, parse_time, print_json, print_table
from fabricwatch.errors import ExitCode, StoreError


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Incident options, the delivery options, and the ``--deliveries`` switch."""
    _incident_options(parser)
    parser.add_argument(
        "--deliveries",
        action="store_true",
        help="list alert deliveries (pending, delivered, dead-lettered) instead of incidents",
    )
    cli_deliveries.configure_parser(parser)
    cli_jobs.configure_parser(parser)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the incident, the delivery or the job listing."""
    if args.deliveries:
        if args.limit is None:
            args.limit = 50
        try:
            args.state_dir = database_path(args).parent
        except StoreError as exc:
            err(str(exc))
            return ExitCode.FAILURE
        return cli_deliveries.run(args)
    if args.by == "job":
        return cli_jobs.run(args)
    return list_incidents(args)


def _incident_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="state directory holding incidents.sqlite3 (default: daemon.state_dir of the "
        "config, or the daemon's fallback directory)",
    )
    parser.add_argument(
        "--since",
        default="24h",
        help="incidents updated since: a duration ago (24h), unix seconds or RFC 3339; "
        "'all' for everything (default: %(default)s)",
    )
    parser.add_argument("--state", choices=("open", "resolved", "all"), default="all")
    parser.add_argument("--node", default=None, help="only this node's incidents")
    parser.add_argument("--limit", type=int, default=None, help="at most this many")
    parser.add_argument("--json", action="store_true", help="fabricwatch.incident/v1 JSON array")


def database_path(args: argparse.Namespace) -> Path:
    """The incident database the daemon of this config writes.

    Raises StoreError ("no database at ...", naming every place looked at) when
    none exists, ConfigError for a bad config file.
    """
    from fabricwatch.engine.db import DB_FILENAME

    if args.state_dir is not None:
        candidates = [Path(args.state_dir)]
    else:
        from fabricwatch.collectors import builtin_registry
        from fabricwatch.config import DaemonSettings, fallback_state_dir, load_config

        cfg = load_config(getattr(args, "config", None), builtin_registry())
        candidates = [cfg.daemon.state_dir]
        if cfg.daemon.state_dir == DaemonSettings().state_dir:
            candidates.append(fallback_state_dir())
    paths = [c / DB_FILENAME for c in candidates]
    for path in paths:
        try:
            if path.is_file():
                return path
        except PermissionError:
            # systemd keeps a DynamicUser= service's state under /var/lib/private (0700).
            msg = (
                f"cannot look for {path}: permission denied; the daemon's state is "
                "readable by root: sudo fabricwatch incidents"
            )
            raise StoreError(msg) from None
    where = " nor at ".join(str(p) for p in paths)
    msg = (
        f"no database at {where}: give the daemon's --state-dir (or --config), "
        "or the daemon has not started there yet"
    )
    raise StoreError(msg)


def list_incidents(args: argparse.Namespace) -> int:
    """List incidents; 0 on success, 1 without a usable database, 2 on a bad argument."""
    from fabricwatch.engine.db import IncidentDB

    try:
        since = None if args.since == "all" else parse_time(args.since)
    except ValueError as exc:
        err(f"--since: {exc}")
        return ExitCode.USAGE
    try:
        path = database_path(args)
    except StoreError as exc:
        err(str(exc))
        return ExitCode.FAILURE
    db = IncidentDB(path)
    try:
        db.connect_read_only()
        docs = list(
            db.incidents(
                since=since,
                node=args.node,
                state=None if args.state == "all" else args.state,
                limit=args.limit,
            )
        )
    except StoreError as exc:
        err(str(exc))
        return ExitCode.FAILURE
    finally:
        db.close()
    if args.json:
        print_json(docs, sys.stdout)
    else:
        print_table(docs, sys.stdout)
    return ExitCode.OK
