"""``fabricwatch incidents``: list incidents from the state directory's database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabricwatch.engine._cli_common import (
    EXIT_ERROR,
    EXIT_OK,
    err,
    parse_time,
    print_json,
    print_table,
)
from fabricwatch.engine.db import DB_FILENAME, IncidentDB
from fabricwatch.errors import StoreError


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser``."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/fabricwatch"),
        help="state directory holding incidents.sqlite3 (default: %(default)s)",
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


def run(args: argparse.Namespace) -> int:
    """List incidents; 0 on success, 2 on a bad argument or unusable database."""
    path = Path(args.state_dir) / DB_FILENAME
    try:
        since = None if args.since == "all" else parse_time(args.since)
    except ValueError as exc:
        err(f"--since: {exc}")
        return EXIT_ERROR
    if not path.exists():
        docs: list[dict[str, object]] = []
    else:
        db = IncidentDB(path)
        try:
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
            return EXIT_ERROR
        finally:
            db.close()
    if args.json:
        print_json(docs, sys.stdout)
    else:
        print_table(docs, sys.stdout)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m fabricwatch.engine.cli_incidents``)."""
    parser = argparse.ArgumentParser(prog="fabricwatch incidents", description=__doc__)
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
