"""``fabricwatch incidents``: incidents, or with ``--deliveries`` the alert outbox.

One command over the state directory's database; the listing itself lives
with the feature that owns the table (engine for incidents, outputs for the
outbox). Both find the database the same way (:func:`cli_incidents.database_path`).
"""

from __future__ import annotations

import argparse

from fabricwatch.cli import deliveries as cli_deliveries
from fabricwatch.cli import incidents as cli_incidents
from fabricwatch.cli import jobs as cli_jobs
from fabricwatch.cli._common import EXIT_FAILURE, err
from fabricwatch.errors import StoreError


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Incident options, the delivery options, and the ``--deliveries`` switch."""
    cli_incidents.configure_parser(parser)
    parser.add_argument(
        "--deliveries",
        action="store_true",
        help="list alert deliveries (pending, delivered, dead-lettered) instead of incidents",
    )
    cli_deliveries.configure_parser(parser)
    cli_jobs.configure_parser(parser)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the incident or the delivery listing."""
    if args.deliveries:
        if args.limit is None:
            args.limit = 50
        try:
            args.state_dir = cli_incidents.database_path(args).parent
        except StoreError as exc:
            err(str(exc))
            return EXIT_FAILURE
        return cli_deliveries.run(args)
    if args.by == "job":
        return cli_jobs.run(args)
    return cli_incidents.run(args)
