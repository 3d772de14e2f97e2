"""The incident store: SQLite in the state directory.

WAL journal, ``synchronous=FULL`` (a committed transition survives ``kill -9``
and power loss), schema versioned with ``PRAGMA user_version`` and applied by
forward-only migrations, bounded retention. A file that is not ours, corrupt,
or written by a newer fabricwatch raises :class:`~fabricwatch.errors.StoreError`
with a message that says what to do.

Other parts add their own tables in the same file and write them in the same
transaction as each incident transition, e.g. the alerting outbox::

    db.add_migration(2, ["CREATE TABLE outbox (...)"])   # before first use
    db.add_transition_hook(lambda conn, tr: conn.execute("INSERT INTO outbox ..."))

A hook that raises rolls the whole transaction back: the incident is then not
recorded either, and the engine reports the error.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.errors import StoreError
from fabricwatch.sqlite import immediate_transaction

DB_FILENAME = "incidents.sqlite3"
APPLICATION_ID = 0x46574931  # "FWI1": lets us refuse other programs' SQLite files
SCHEMA_VERSION = 1

TransitionHook = Callable[[sqlite3.Connection, IncidentTransition], object]

_BASE_MIGRATIONS: dict[int, tuple[str, ...]] = {
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
}


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
    ) -> None:
        self.path = path
        self._retention = retention_days * 86400.0
        self._max = max_incidents
        self._clock = clock
        self._hooks: list[TransitionHook] = []
        self._migrations: dict[int, Sequence[str]] = dict(_BASE_MIGRATIONS)
        for version, stmts in (migrations or {}).items():
            self.add_migration(version, stmts)
        self._conn: sqlite3.Connection | None = None
        self._last_prune = -1e18

    @classmethod
    def in_state_dir(cls, state_dir: Path, **kwargs: Any) -> IncidentDB:
        """The database of a state directory (created on first use)."""
        return cls(state_dir / DB_FILENAME, **kwargs)

    @property
    def schema_version(self) -> int:
        """The newest schema version this instance migrates to."""
        return max(self._migrations)

    def add_migration(self, version: int, statements: Sequence[str]) -> None:
        """Register a migration (before first use). Versions must be new and > 1."""
        if self._conn_or_none() is not None:
            msg = "add migrations before the database is first used"
            raise RuntimeError(msg)
        if version in self._migrations:
            msg = f"migration {version} already registered"
            raise ValueError(msg)
        self._migrations[version] = tuple(statements)

    def add_transition_hook(self, hook: TransitionHook) -> None:
        """Call ``hook(conn, transition)`` inside each recording transaction."""
        self._hooks.append(hook)

    def _conn_or_none(self) -> sqlite3.Connection | None:
        return getattr(self, "_conn", None)

    def _fail(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"incident database {self.path}: {what}: {exc}. Move the file aside "
            "(fabricwatch starts a new one) or restore it from a backup."
        )

    def connect(self) -> sqlite3.Connection:
        """Open (creating and migrating as needed) and return the connection."""
        if self._conn is not None:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=5.0)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open incident database {self.path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables and version == 0):
                conn.close()
                msg = f"incident database {self.path}: not a fabricwatch incident database"
                raise StoreError(
                    msg + " (another program's SQLite file); point --state-dir elsewhere"
                )
            if version > self.schema_version:
                conn.close()
                msg = (
                    f"incident database {self.path} has schema version {version}, newer than this "
                    f"fabricwatch understands ({self.schema_version}); upgrade fabricwatch or "
                    "point --state-dir elsewhere"
                )
                raise StoreError(msg)
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                conn.close()
                raise self._fail("integrity check failed", RuntimeError(check))
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn, version)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._fail("corrupt or not a database", exc) from None
        self._conn = conn
        return conn

    def connect_read_only(self) -> sqlite3.Connection:
        """Open an existing database for reading only: no creation, migration or
        journal change, so it works beside the running daemon and for a user who
        may read the file but not write it (``fabricwatch incidents``)."""
        if self._conn is not None:
            return self._conn
        if not self.path.is_file():
            raise StoreError(f"no database at {self.path}")
        if not os.access(self.path, os.R_OK):
            msg = f"cannot read {self.path}: permission denied (the daemon's state is root's)"
            raise StoreError(msg)
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            conn = self._open_read_only(uri)
        except sqlite3.OperationalError as exc:
            if self.path.with_name(self.path.name + "-wal").exists():
                raise StoreError(f"cannot read incident database {self.path}: {exc}") from None
            # A WAL database whose writer is gone has no -shm to map, and a
            # reader who may not create one cannot open it; with no writer the
            # file is immutable for as long as we read.
            try:
                conn = self._open_read_only(uri + "&immutable=1")
            except sqlite3.OperationalError as exc2:
                msg = f"cannot read incident database {self.path}: {exc2}"
                raise StoreError(msg) from None
        except sqlite3.DatabaseError as exc:
            raise self._fail("corrupt or not a database", exc) from None
        self._conn = conn
        return conn

    def _open_read_only(self, uri: str) -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError:
            conn.close()
            raise
        if app_id not in (0, APPLICATION_ID) or version == 0:
            conn.close()
            msg = f"incident database {self.path}: not a fabricwatch incident database"
            raise StoreError(msg + " (another program's SQLite file); point --state-dir elsewhere")
        if version > self.schema_version:
            conn.close()
            msg = (
                f"incident database {self.path} has schema version {version}, newer than this "
                f"fabricwatch understands ({self.schema_version}); upgrade fabricwatch"
            )
            raise StoreError(msg)
        return conn

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        for v in sorted(self._migrations):
            if v <= version:
                continue
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in self._migrations[v]:
                    conn.execute(stmt)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {int(v)}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction, committed on success, rolled back on error."""
        with immediate_transaction(self.connect(), f"incident database {self.path}") as conn:
            yield conn

    def record(self, transitions: Sequence[IncidentTransition]) -> None:
        """Persist transitions (and run the hooks) in one transaction."""
        if not transitions:
            return
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
        now = self._clock()
        if now - self._last_prune >= 3600.0:
            self.prune(now)

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
