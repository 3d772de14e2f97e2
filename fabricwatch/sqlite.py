"""The one way fabricwatch opens, checks and migrates its SQLite files.

Each file has an owner (the incident store :mod:`fabricwatch.engine.db`, the
fleet store :mod:`fabricwatch.fleet.db`) that declares its tables as a
:class:`Schema` of forward-only migrations and an application id. The owner's
version is ``PRAGMA user_version``; the application id refuses other programs'
files. :func:`open_database` creates, checks (ours, not newer, not corrupt) and
migrates a file: WAL journal and ``synchronous=FULL``, so a commit survives
``kill -9`` and power loss. :func:`open_read_only` opens one without writing.

A part that lives in other owners' files (the alert outbox, in the incident and
the fleet file) declares its own :class:`Schema` too, and :func:`migrate_part`
applies it on the owner's connection; its version is kept per part in the
``schema_parts`` table, so the owner's ``user_version`` stays its own.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.errors import StateWriteError, StoreError

# Primary result codes that say "not now", not "this file is bad": a full
# disk, an I/O error (a full tmpfs cannot grow the -shm file), a read-only
# mount, a lock held too long, a file that cannot be opened for writing.
# BUSY LOCKED READONLY IOERR FULL CANTOPEN PROTOCOL
_TRANSIENT = frozenset({5, 6, 8, 10, 13, 14, 15})


def is_transient(exc: BaseException) -> bool:
    """Whether a SQLite error is a condition of the disk, not of the file."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in _TRANSIENT
    text = str(exc).lower()
    return any(w in text for w in ("disk is full", "disk i/o error", "readonly", "locked"))


def describe(exc: BaseException) -> str:
    """``message (SQLITE_NAME)``: the real SQLite error, for logs and metrics."""
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} ({name})" if name else str(exc)


def store_error(label: str, what: str, exc: BaseException) -> StoreError:
    """A :class:`StateWriteError` for disk conditions, else a :class:`StoreError`."""
    if is_transient(exc):
        return StateWriteError(f"{label}: {what}: {describe(exc)}")
    return StoreError(f"{label}: {what}: {describe(exc)}")


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite rolls back by itself on SQLITE_FULL and some I/O errors; a second
    # ROLLBACK then fails with "no transaction is active" and would replace
    # the real error.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


@contextmanager
def immediate_transaction(conn: sqlite3.Connection, label: str) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolled back on any error.

    SQLite failures to begin or commit become :class:`StoreError` prefixed
    with ``label`` (e.g. ``incident database /var/lib/fabricwatch/...``),
    :class:`StateWriteError` when the disk is the problem (full, I/O error,
    read-only). An error in the body propagates unchanged.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise store_error(label, "cannot write", exc) from None
    try:
        yield conn
    except BaseException:
        _rollback(conn)
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(conn)
        raise store_error(label, "commit failed", exc) from None


@dataclass(frozen=True, slots=True)
class Schema:
    """The forward-only migrations of one owner or part of a database file.

    Attributes:
        name: the part's key in ``schema_parts`` (owners: for messages only).
        migrations: version -> statements, applied in order; an owner's each
            in one transaction with its version number, a part's all in one.
    """

    name: str
    migrations: Mapping[int, Sequence[str]]

    @property
    def newest(self) -> int:
        """The version a file has once every migration ran."""
        return max(self.migrations, default=0)

    def with_migration(self, version: int, statements: Sequence[str]) -> Schema:
        """This schema plus one migration; versions must be new."""
        if version in self.migrations:
            msg = f"migration {version} already registered"
            raise ValueError(msg)
        return Schema(self.name, {**self.migrations, version: tuple(statements)})


@dataclass(frozen=True, slots=True)
class DatabaseFile:
    """One owner's file: where it is, what it is called in messages, its schema.

    Attributes:
        path: the file.
        label: ``incident database``, ``fleet database``: messages say
            ``{label} {path}: ...`` and refuse "not a fabricwatch {label}".
        application_id: ``PRAGMA application_id`` of the owner's files.
        schema: the owner's migrations (``PRAGMA user_version``).
        elsewhere: what the operator sets to use another file
            (``point --state-dir elsewhere``).
    """

    path: Path
    label: str
    application_id: int
    schema: Schema
    elsewhere: str

    def error(self, what: str, exc: BaseException) -> StoreError:
        """The error for a failed operation, with what to do about it.

        A disk condition (:func:`is_transient`) is a :class:`StateWriteError`:
        the file is fine and moving it aside would lose what it holds.
        """
        where = f"{self.label} {self.path}: {what}: {describe(exc)}"
        if is_transient(exc):
            return StateWriteError(
                f"{where}. Free space on (or remount read-write) the file system of "
                f"{self.path.parent}; fabricwatch keeps monitoring and retries."
            )
        return StoreError(
            f"{where}. Move the file aside (fabricwatch starts a new one) or restore it "
            "from a backup."
        )

    def _not_ours(self) -> StoreError:
        return StoreError(
            f"{self.label} {self.path}: not a fabricwatch {self.label} (another program's "
            f"SQLite file); {self.elsewhere}"
        )

    def _too_new(self, version: int, *, upgrade: str) -> StoreError:
        return StoreError(
            f"{self.label} {self.path} has schema version {version}, newer than this "
            f"fabricwatch understands ({self.schema.newest}); {upgrade}"
        )


def open_database(db: DatabaseFile) -> sqlite3.Connection:
    """Open ``db.path`` for writing, creating and migrating it as needed.

    Raises :class:`StateWriteError` when the disk refuses (the file may be
    fine) and :class:`StoreError` for a file that is another program's,
    written by a newer fabricwatch, corrupt, or not a database.
    """
    try:
        db.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db.path, isolation_level=None, timeout=5.0)
    except (OSError, sqlite3.Error) as exc:
        if isinstance(exc, OSError) or is_transient(exc):
            raise StateWriteError(f"cannot open {db.label} {db.path}: {describe(exc)}") from None
        raise StoreError(f"cannot open {db.label} {db.path}: {exc}") from None
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id not in (0, db.application_id) or (app_id == 0 and tables and version == 0):
            raise db._not_ours()
        if version > db.schema.newest:
            raise db._too_new(version, upgrade=f"upgrade fabricwatch or {db.elsewhere}")
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise db.error("integrity check failed", RuntimeError(check))
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate_owner(conn, db, version)
    except StoreError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        what = "cannot open" if is_transient(exc) else "corrupt or not a database"
        raise db.error(what, exc) from None
    return conn


def open_read_only(db: DatabaseFile) -> sqlite3.Connection:
    """Open an existing file for reading only: no creation, migration or journal
    change, so it works beside the running daemon and for a user who may read
    the file but not write it."""
    if not db.path.is_file():
        raise StoreError(f"no database at {db.path}")
    if not os.access(db.path, os.R_OK):
        msg = f"cannot read {db.path}: permission denied (the daemon's state is root's)"
        raise StoreError(msg)
    uri = db.path.resolve().as_uri() + "?mode=ro"
    try:
        return _checked_read_only(db, uri)
    except sqlite3.OperationalError as exc:
        if db.path.with_name(db.path.name + "-wal").exists():
            raise StoreError(f"cannot read {db.label} {db.path}: {exc}") from None
        # A WAL database whose writer is gone has no -shm to map, and a
        # reader who may not create one cannot open it; with no writer the
        # file is immutable for as long as we read.
        try:
            return _checked_read_only(db, uri + "&immutable=1")
        except sqlite3.OperationalError as exc2:
            raise StoreError(f"cannot read {db.label} {db.path}: {exc2}") from None
    except sqlite3.DatabaseError as exc:
        raise db.error("corrupt or not a database", exc) from None


def _checked_read_only(db: DatabaseFile, uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id not in (0, db.application_id) or version == 0:
            raise db._not_ours()
        if version > db.schema.newest:
            raise db._too_new(version, upgrade="upgrade fabricwatch")
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate_owner(conn: sqlite3.Connection, db: DatabaseFile, version: int) -> None:
    for v in sorted(db.schema.migrations):
        if v <= version:
            continue
        with immediate_transaction(conn, f"{db.label} {db.path}"):
            for stmt in db.schema.migrations[v]:
                conn.execute(stmt)
            conn.execute(f"PRAGMA application_id = {int(db.application_id)}")
            conn.execute(f"PRAGMA user_version = {int(v)}")


_PARTS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_parts (name TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)


def migrate_part(conn: sqlite3.Connection, part: Schema) -> None:
    """Bring ``part``'s tables on ``conn`` to its newest version (idempotent).

    Runs inside the caller's transaction when one is open, else in its own.
    Raises :class:`StoreError` when the file holds a newer version of the part,
    and lets :class:`sqlite3.Error` through for the caller to word.
    """
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_PARTS_TABLE)
        row = conn.execute(
            "SELECT version FROM schema_parts WHERE name = ?", (part.name,)
        ).fetchone()
        version = 0 if row is None else int(row[0])
        if version > part.newest:
            msg = (
                f"{part.name} schema version {version} is newer than this fabricwatch "
                f"understands ({part.newest}); upgrade fabricwatch or point --state-dir elsewhere"
            )
            raise StoreError(msg)
        for v in sorted(part.migrations):
            if v > version:
                for stmt in part.migrations[v]:
                    conn.execute(stmt)
        if version != part.newest:
            conn.execute(
                "INSERT INTO schema_parts (name, version) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET version = excluded.version",
                (part.name, part.newest),
            )
    except BaseException:
        if own:
            _rollback(conn)
        raise
    if own:
        conn.execute("COMMIT")
