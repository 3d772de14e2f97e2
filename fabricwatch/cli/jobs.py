"""``fabricwatch incidents --by job``: the per-job ledger of lost GPU-hours.

Reads the node daemon's incidents (``<state-dir>/incidents.sqlite3``: each
incident charged to its own cause), or with ``--fleet`` the aggregator's
cluster incidents (``<state-dir>/fleet/fleet.sqlite3``: the waiting nodes of a
job charged to its origin's cause). Same ledger code as the fleet's
``/api/v1/jobs``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.cli._common import err, parse_time, print_json
from fabricwatch.errors import ExitCode, StoreError

if TYPE_CHECKING:
    from fabricwatch.fleet.jobwork import JobWork


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``--by job``, ``--fleet`` and ``--cost-per-gpu-hour`` (the rest is the incidents')."""
    parser.add_argument(
        "--by",
        choices=("job",),
        default=None,
        help="job: the ledger of GPU-hours each job lost, by cause and culprit kind",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="with --by job: read the fleet aggregator's database (<state-dir>/fleet)",
    )
    parser.add_argument(
        "--cost-per-gpu-hour", type=float, default=0.0, help="with --by job: add money lost"
    )


def _docs(
    args: argparse.Namespace, since: float | None
) -> tuple[list[dict[str, Any]], list[tuple[str, JobWork]]]:
    """The incident documents and, with --fleet, the kept job reports (for the badput)."""
    from fabricwatch.engine.db import DB_FILENAME, IncidentDB
    from fabricwatch.fleet.db import DB_FILENAME as FLEET_DB
    from fabricwatch.fleet.db import FleetDB

    state = None if args.state == "all" else args.state
    if args.fleet:
        path = Path(args.state_dir) / "fleet" / FLEET_DB
        if not path.is_file():
            # As plain ``incidents`` does: a wrong --state-dir must not look like "no jobs".
            raise StoreError(f"no database at {path} (is --state-dir the aggregator's?)")
        fdb = FleetDB(path)
        try:
            docs = fdb.incidents(since=since, state=state, limit=args.limit or 1_000_000)
            return docs, fdb.reports(since=since)
        finally:
            fdb.close()
    path = Path(args.state_dir) / DB_FILENAME
    if not path.is_file():
        raise StoreError(f"no database at {path} (is --state-dir the daemon's?)")
    db = IncidentDB(path)
    try:
        return list(db.incidents(since=since, node=args.node, state=state, limit=args.limit)), []
    finally:
        db.close()


def run(args: argparse.Namespace) -> int:
    """Print the ledger; 0 on success, 2 on a bad argument, 1 on an unusable database."""
    from fabricwatch.fleet.ledger import ledger_lines, ledger_of

    try:
        since = None if args.since == "all" else parse_time(args.since)
    except ValueError as exc:
        err(f"--since: {exc}")
        return ExitCode.USAGE
    if args.cost_per_gpu_hour < 0:
        err("--cost-per-gpu-hour must not be negative")
        return ExitCode.USAGE
    try:
        docs, reports = _docs(args, since)
    except StoreError as exc:
        err(str(exc))
        return ExitCode.FAILURE
    entries = ledger_of(docs, reports=reports, cost_per_gpu_hour=args.cost_per_gpu_hour).entries()
    if args.json:
        print_json(entries, sys.stdout)
    else:
        sys.stdout.write("\n".join(ledger_lines(entries)) + "\n")
    return ExitCode.OK
