"""The incident store: SQLite in the state directory.

WAL journal, ``synchronous=FULL`` (a committed transition survives ``kill -9``
and power loss), schema versioned with ``PRAGMA user_version`` and applied by
forward-only migrations, bounded retention; opening, the application id and
the migrations are :mod:`fabricwatch.sqlite`'s. A file that is not ours,
corrupt, or written by a newer fabricwatch raises
:class:`~fabricwatch.errors.StoreError` with a message that says what to do.

Other parts keep their own tables in the same file and write them in the same
transaction as each incident transition. The alerting outbox does both: it
applies its tables as a schema part on this connection, and the daemon installs
its router as a transition hook::

    outbox = Outbox(db.connect())          # fabricwatch.sqlite.migrate_part
    db.add_transition_hook(router)         # router(conn, tr) enqueues outbox rows

A hook that raises rolls the whole transaction back: the incident is then not
recorded either, and the engine reports the error.

When the disk refuses writes (full, I/O error, read-only), :meth:`IncidentDB.record`
keeps the transitions in memory, bounded, and writes them, in order and with
their hooks, on the next :meth:`IncidentDB.flush` that succeeds: a page is
late, never lost. :meth:`IncidentDB.readings` says so in metrics.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.errors import StateWriteError, StoreError
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.sqlite import (
    DatabaseFile,
    Schema,
    immediate_transaction,
    open_database,
    open_read_only,
)

log = structlog.get_logger("fabricwatch.state")

DB_FILENAME = "incidents.sqlite3"
APPLICATION_ID = 0x46574931  # "FWI1": lets us refuse other programs' SQLite files

TransitionHook = Callable[[sqlite3.Connection, IncidentTransition], object]

STATE_WRITE_ERRORS = MetricSpec(
    "fabricwatch_state_write_errors",
    MetricKind.COUNTER,
    "Failed writes of the state database (disk full, I/O error, read-only); each retry counts.",
)
STATE_WRITABLE = MetricSpec(
    "fabricwatch_state_writable",
    MetricKind.GAUGE,
    "1 while the state database accepts writes; 0 while transitions wait in memory.",
)
STATE_PENDING = MetricSpec(
    "fabricwatch_state_pending_transitions",
    MetricKind.GAUGE,
    "Incident transitions kept in memory because the state database refused them.",
)
STATE_METRICS: tuple[MetricSpec, ...] = (STATE_WRITE_ERRORS, STATE_WRITABLE, STATE_PENDING)
MAX_PENDING = 10_000
"""Transitions kept in memory while the disk refuses writes (about 30 MB at most)."""
_LOG_EVERY = 60.0

INCIDENTS_SCHEMA = Schema(
    "incidents",
    {
        1: (
            """CREATE TABLE incidents (
            key TEXT PRIMARY KEY,
            node TEXT NOT NULL,
            kind TEXT NOT NULL,
            state TEXT NOT NULL,
            cause TEXT NOT NULL,
            culprit TEXT NOT NULL,
            onset REAL NOT NULL,
            opened_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            resolved_at REAL,
            gpu_seconds REAL NOT NULL,
            revision INTEGER NOT NULL,
            doc TEXT NOT NULL
        )""",
            "CREATE INDEX incidents_updated ON incidents(updated_at)",
            "CREATE INDEX incidents_state ON incidents(state, node)",
            """CREATE TABLE transitions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL REFERENCES incidents(key) ON DELETE CASCADE,
            kind TEXT NOT NULL,
            at REAL NOT NULL,
            revision INTEGER NOT NULL,
            doc TEXT NOT NULL
        )""",
            "CREATE INDEX transitions_key ON transitions(key)",
        ),
    },
)
SCHEMA_VERSION = INCIDENTS_SCHEMA.newest


class IncidentDB:
    """SQLite-backed incident store. Use from one thread (the event loop)."""

    def __init__(
        self,
        path: Path,
        *,
        retention_days: float = 30.0,
        max_incidents: int = 100_000,
        migrations: dict[int, Sequence[str]] | None = None,
        clock: Callable[[], float] = time.time,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.path = path
        self._retention = retention_days * 86400.0
        self._max = max_incidents
        self._clock = clock
        self._hooks: list[TransitionHook] = []
        self._file = DatabaseFile(
            path,
            "incident database",
            APPLICATION_ID,
            INCIDENTS_SCHEMA,
            elsewhere="point --state-dir elsewhere",
        )
        for version, stmts in (migrations or {}).items():
            self.add_migration(version, stmts)
        self._conn: sqlite3.Connection | None = None
        self._last_prune = -1e18
        self._pending: deque[IncidentTransition] = deque()
        self._max_pending = max(1, max_pending)
        self._held = False
        self.write_errors = 0
        self.dropped = 0
        self.writable = True
        self.last_error = ""
        self._logged_at = -1e18

    @classmethod
    def in_state_dir(cls, state_dir: Path, **kwargs: Any) -> IncidentDB:
        """The database of a state directory (created on first use)."""
        return cls(state_dir / DB_FILENAME, **kwargs)

    @property
    def schema_version(self) -> int:
        """The newest schema version this instance migrates to."""
        return self._file.schema.newest

    def add_migration(self, version: int, statements: Sequence[str]) -> None:
        """Register a migration (before first use). Versions must be new and > 1."""
        if self._conn_or_none() is not None:
            msg = "add migrations before the database is first used"
            raise RuntimeError(msg)
        self._file = replace(
            self._file, schema=self._file.schema.with_migration(version, statements)
        )

    def add_transition_hook(self, hook: TransitionHook) -> None:
        """Call ``hook(conn, transition)`` inside each recording transaction."""
        self._hooks.append(hook)

    def remove_transition_hook(self, hook: TransitionHook) -> None:
        """Stop calling ``hook`` (a reload replaced the outputs); absent hooks are ignored."""
        self._hooks = [h for h in self._hooks if h is not hook]

    def _conn_or_none(self) -> sqlite3.Connection | None:
        return getattr(self, "_conn", None)

    def _fail(self, what: str, exc: BaseException) -> StoreError:
        return self._file.error(what, exc)

    def connect(self) -> sqlite3.Connection:
        """Open (creating and migrating as needed) and return the connection."""
        if self._conn is None:
            self._conn = open_database(self._file)
        return self._conn

    def connect_read_only(self) -> sqlite3.Connection:
        """Open an existing database for reading only: no creation, migration or
        journal change, so it works beside the running daemon and for a user who
        may read the file but not write it (``fabricwatch incidents``)."""
        if self._conn is None:
            self._conn = open_read_only(self._file)
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction, committed on success, rolled back on error."""
        with immediate_transaction(self.connect(), f"incident database {self.path}") as conn:
            yield conn

    def record(self, transitions: Sequence[IncidentTransition]) -> bool:
        """Persist transitions (and run the hooks) in one transaction.

        Returns whether they are on disk. When the disk refuses the write
        (:class:`StateWriteError`) they are kept in memory, after any kept
        earlier, and written by the next successful :meth:`flush` or
        ``record``; other errors (a corrupt file) raise, keeping them too.
        """
        self._pending.extend(transitions)
        self._bound()
        return self.flush()

    @property
    def pending(self) -> int:
        """Transitions waiting in memory for the disk."""
        return len(self._pending)

    def hold_writes(self, held: bool) -> None:
        """Keep transitions in memory without trying the disk (until the
        outputs that hook into the transaction are wired)."""
        self._held = held

    def flush(self) -> bool:
        """Write the transitions kept in memory, oldest first; True when none remain."""
        if not self._pending:
            return True
        if self._held:
            return False
        batch = list(self._pending)
        try:
            self._write(batch)
        except StateWriteError as exc:
            self._write_failed(exc)
            return False
        except StoreError as exc:
            self._write_failed(exc)
            raise
        for _ in batch:
            self._pending.popleft()
        if not self.writable:
            log.warning("state_writable_again", path=str(self.path), written=len(batch))
        self.writable = True
        self.last_error = ""
        now = self._clock()
        if now - self._last_prune >= 3600.0:
            with contextlib.suppress(StateWriteError):
                self.prune(now)
        return True

    def _write_failed(self, exc: StoreError) -> None:
        self.write_errors += 1
        now = time.monotonic()
        text = str(exc)
        if self.writable or text != self.last_error or now - self._logged_at >= _LOG_EVERY:
            self._logged_at = now
            log.error(
                "state_write_failed",
                error=text,
                pending=len(self._pending),
                errors=self.write_errors,
                hint="transitions are kept in memory and written in order once the disk "
                "accepts writes; do not move the database aside",
            )
        self.writable = False
        self.last_error = text

    def _bound(self) -> None:
        """Keep at most ``max_pending``: superseded updates go first, then the oldest."""
        excess = len(self._pending) - self._max_pending
        if excess <= 0:
            return
        kept: deque[IncidentTransition] = deque()
        for tr in self._pending:
            if excess > 0 and tr.kind == "updated":
                excess -= 1
                self.dropped += 1
                continue
            kept.append(tr)
        while excess > 0 and kept:
            kept.popleft()
            excess -= 1
            self.dropped += 1
        self._pending = kept
        log.error(
            "state_pending_dropped",
            dropped=self.dropped,
            kept=len(kept),
            hint="the state database refused writes for too long; free space on its disk",
        )

    def readings(self) -> list[Reading]:
        """Values of :data:`STATE_METRICS`."""
        return [
            Reading(STATE_WRITE_ERRORS.name, (), float(self.write_errors)),
            Reading(STATE_WRITABLE.name, (), 1.0 if self.writable else 0.0),
            Reading(STATE_PENDING.name, (), float(len(self._pending))),
        ]

    def _write(self, transitions: Sequence[IncidentTransition]) -> None:
        try:
            with self.transaction() as conn:
                for tr in transitions:
                    inc = tr.incident
                    doc = json.dumps(to_json(inc), separators=(",", ":"), sort_keys=True)
                    conn.execute(
                        """INSERT INTO incidents (key, node, kind, state, cause, culprit, onset,
                               opened_at, updated_at, resolved_at, gpu_seconds, revision, doc)
                           VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
                           ON CONFLICT(key) DO UPDATE SET state=excluded.state,
                               cause=excluded.cause, culprit=excluded.culprit,
                               updated_at=excluded.updated_at, resolved_at=excluded.resolved_at,
                               gpu_seconds=excluded.gpu_seconds, revision=excluded.revision,
                               doc=excluded.doc""",
                        (
                            inc.key,
                            inc.node,
                            inc.kind,
                            inc.state,
                            inc.cause,
                            inc.culprit.key,
                            inc.onset,
                            inc.opened_at,
                            inc.updated_at,
                            inc.resolved_at,
                            inc.gpu_seconds,
                            inc.revision,
                            doc,
                        ),
                    )
                    conn.execute(
                        "INSERT INTO transitions (key, kind, at, revision, doc) VALUES (?,?,?,?,?)",
                        (inc.key, tr.kind, tr.at, inc.revision, doc),
                    )
                    for hook in self._hooks:
                        hook(conn, tr)
        except sqlite3.DatabaseError as exc:
            raise self._fail("write failed", exc) from None

    def prune(self, now: float | None = None) -> int:
        """Apply retention: old resolved incidents go, then the oldest beyond the cap."""
        now = self._clock() if now is None else now
        self._last_prune = now
        with self.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM incidents WHERE state = 'resolved' AND resolved_at < ?",
                (now - self._retention,),
            )
            removed = cur.rowcount
            count = conn.execute("SELECT count(*) FROM incidents").fetchone()[0]
            if count > self._max:
                cur = conn.execute(
                    """DELETE FROM incidents WHERE key IN (SELECT key FROM incidents
                       ORDER BY state = 'open', updated_at LIMIT ?)""",
                    (count - self._max,),
                )
                removed += cur.rowcount
        return removed

    def _query(self, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        try:
            rows = self.connect().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._fail("read failed", exc) from None
        return [json.loads(r[0]) for r in rows]

    def incidents(
        self,
        *,
        since: float | None = None,
        node: str | None = None,
        state: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Incident documents updated since ``since`` (wall seconds), newest first."""
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("updated_at >= ?")
            args.append(since)
        if node is not None:
            where.append("node = ?")
            args.append(node)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        sql = "SELECT doc FROM incidents"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY onset DESC, key"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return self._query(sql, args)

    def get(self, key: str) -> dict[str, Any] | None:
        """One incident document by key."""
        found = self._query("SELECT doc FROM incidents WHERE key = ?", (key,))
        return found[0] if found else None

    def transitions(self, key: str) -> list[dict[str, Any]]:
        """The recorded revisions of one incident, oldest first."""
        return self._query("SELECT doc FROM transitions WHERE key = ? ORDER BY id", (key,))

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
