"""immediate_transaction: commit, rollback, and a clear StoreError when SQLite refuses."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fabricwatch.errors import StoreError
from fabricwatch.sqlite import immediate_transaction


def _conn(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    return conn


def test_commits_on_success_and_rolls_back_on_error(tmp_path: Path) -> None:
    conn = _conn(tmp_path / "db")
    with immediate_transaction(conn, "test db") as c:
        c.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(RuntimeError), immediate_transaction(conn, "test db") as c:
        c.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("boom")
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_a_locked_database_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "db"
    holder, other = _conn(path), _conn(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with (
            pytest.raises(StoreError, match="test db: cannot write"),
            immediate_transaction(other, "test db"),
        ):
            pass
    finally:
        holder.execute("ROLLBACK")
    with immediate_transaction(other, "test db") as c:  # usable again afterwards
        c.execute("INSERT INTO t VALUES (3)")
