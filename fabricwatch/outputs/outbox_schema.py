"""The outbox's tables, a part of the incident (node) and the fleet database files.

Registered as the ``outbox`` part with :func:`fabricwatch.sqlite.migrate_part`,
which :class:`~fabricwatch.outputs.outbox.Outbox` applies on the connection it
is given; the version is kept in ``schema_parts`` (see :mod:`fabricwatch.sqlite`).
"""

from __future__ import annotations

from fabricwatch.sqlite import Schema

OUTBOX_SCHEMA = Schema(
    "outbox",
    {
        1: (
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
        ),
        # Fabricwatch before the shared migrations kept the outbox's version in
        # its own table, and created these tables with IF NOT EXISTS on every
        # start: on such a file version 1 changes nothing and version 2 drops
        # that table (schema_parts keeps the version now).
        2: ("DROP TABLE IF EXISTS outbox_meta",),
    },
)
