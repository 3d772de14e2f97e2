"""The outbox tables: ``outbox`` rows in the incident (or fleet) database file."""

from __future__ import annotations

import contextlib
import sqlite3

from fabricwatch.errors import StoreError

OUTBOX_SCHEMA_VERSION = 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        sink TEXT NOT NULL,
        event_id TEXT NOT NULL,
        dedup_key TEXT NOT NULL,
        incident_key TEXT NOT NULL,
        transition TEXT NOT NULL,
        revision INTEGER NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL,
        last_attempt_at REAL,
        last_error TEXT,
        done_at REAL,
        UNIQUE (sink, event_id)
    )""",
    "CREATE INDEX IF NOT EXISTS outbox_queue ON outbox(sink, state, id)",
    "CREATE INDEX IF NOT EXISTS outbox_incident ON outbox(sink, incident_key)",
)


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the outbox tables if needed (idempotent; refuses a newer schema)."""
    in_tx = conn.in_transaction
    if not in_tx:
        conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _SCHEMA:
            conn.execute(stmt)
        row = conn.execute("SELECT value FROM outbox_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO outbox_meta (key, value) VALUES ('schema_version', ?)",
                (str(OUTBOX_SCHEMA_VERSION),),
            )
        elif int(row[0]) > OUTBOX_SCHEMA_VERSION:
            msg = (
                f"outbox schema version {row[0]} is newer than this fabricwatch understands "
                f"({OUTBOX_SCHEMA_VERSION}); upgrade fabricwatch or point --state-dir elsewhere"
            )
            raise StoreError(msg)
    except BaseException:
        if not in_tx and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                conn.execute("ROLLBACK")
        raise
    if not in_tx:
        conn.execute("COMMIT")
