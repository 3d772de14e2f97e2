"""SQLite helpers shared by the incident store and the fleet aggregator's state."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

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
