"""``fabricwatch incidents --deliveries``: the alert outbox, for people.

Lists outbox rows (pending, delivered, dead) from the state directory's
incident database, newest first, read-only (safe while the daemon runs).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.errors import ExitCode

if TYPE_CHECKING:
    from fabricwatch.outputs.outbox import Delivery

DB_FILENAME = "incidents.sqlite3"  # the engine's IncidentDB file name
DEFAULT_STATE_DIR = Path("/var/lib/fabricwatch")


def _add(parser: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    # The lead may mount these on a parser that already has --state-dir or --json.
    if any(f in parser._option_string_actions for f in flags):
        return
    parser.add_argument(*flags, **kwargs)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the listing options (skipping any the parser already has)."""
    _add(parser, "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="State directory.")
    _add(
        parser,
        "--delivery-state",
        choices=("pending", "delivered", "dead", "all"),
        default="all",
        help="Show only rows in this state.",
    )
    _add(parser, "--sink", default=None, help="Show only this sink's rows.")
    _add(parser, "--limit", type=int, default=50, help="At most this many rows (newest first).")
    _add(parser, "--json", action="store_true", help="One JSON object per line.")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _row_json(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "sink": d.sink,
        "state": d.state,
        "transition": d.transition,
        "incident": d.incident_key,
        "revision": d.revision,
        "event_id": d.event_id,
        "dedup_key": d.dedup_key,
        "created_at": d.created_at,
        "attempts": d.attempts,
        "next_attempt_at": d.next_attempt_at if d.state == "pending" else None,
        "done_at": d.done_at,
        "last_error": d.last_error,
    }


def list_deliveries(
    db_path: Path, *, state: str = "all", sink: str | None = None, limit: int = 50
) -> list[Delivery]:
    """Outbox rows of a database file, read-only; [] when there is no outbox yet."""
    from fabricwatch.outputs.outbox import Outbox

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)
    try:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox'"
        ).fetchone()
        if not has:
            return []
        return Outbox(conn, create=False).rows(
            state=None if state == "all" else state,  # type: ignore[arg-type]
            sink=sink,
            limit=limit,
        )
    finally:
        conn.close()


def run(args: argparse.Namespace) -> int:
    """Print the rows; 0 on success, 1 if the database cannot be read."""
    path = Path(args.state_dir) / DB_FILENAME
    if not path.exists():
        print(f"no incident database at {path} (nothing was ever enqueued)")
        return ExitCode.OK
    try:
        rows = list_deliveries(
            path,
            state=getattr(args, "delivery_state", "all"),
            sink=getattr(args, "sink", None),
            limit=max(1, int(getattr(args, "limit", 50))),
        )
    except sqlite3.Error as exc:
        print(f"cannot read {path}: {exc}")
        return ExitCode.FAILURE
    if getattr(args, "json", False):
        for d in rows:
            print(json.dumps(_row_json(d), sort_keys=True))
        return ExitCode.OK
    if not rows:
        print("no deliveries")
        return ExitCode.OK
    now = time.time()
    header = f"{'ID':>6}  {'STATE':<9}  {'SINK':<14}  {'TRANSITION':<10}  {'INCIDENT':<16}  "
    header += f"{'TRIES':>5}  {'AGE':>5}  DETAIL"
    print(header)
    for d in rows:
        if d.state == "pending":
            wait = d.next_attempt_at - now
            detail = f"next try in {_age(wait)}" if wait > 0 else "due now"
            if d.last_error:
                detail += f"; last error: {d.last_error}"
        elif d.state == "dead":
            detail = d.last_error or "dead"
        else:
            detail = f"delivered {_age(now - (d.done_at or now))} ago"
        print(
            f"{d.id:>6}  {d.state:<9}  {d.sink:<14}  {d.transition:<10}  {d.incident_key:<16}  "
            f"{d.attempts:>5}  {_age(now - d.created_at):>5}  {detail}"
        )
    return ExitCode.OK
