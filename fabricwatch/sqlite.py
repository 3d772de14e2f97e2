"""SQLite helpers shared by the incident store and the fleet aggregator's state."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from fabricwatch.errors import StoreError


@contextmanager
def immediate_transaction(conn: sqlite3.Connection, label: str) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolled back on any error.

    SQLite failures to begin or commit become :class:`StoreError` prefixed
    with ``label`` (e.g. ``incident database /var/lib/fabricwatch/...``).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise StoreError(f"{label}: cannot write: {exc}") from None
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        conn.execute("ROLLBACK")
        raise StoreError(f"{label}: commit failed: {exc}") from None
