"""State files written by the fabricwatch before the shared SQLite migrations
(outbox versioned in its own ``outbox_meta`` table) open, keep what they hold,
and migrate.

``tests/data/state/*-v1.sqlite3`` were written by commit 790af4d's code: an
``IncidentDB`` with two incidents whose transitions enqueued one ``pager`` row
each through ``Outbox(db.connect())``, and a ``FleetDB`` with one cluster
incident and its ``pager`` row, each closed cleanly.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from fabricwatch.engine.db import SCHEMA_VERSION, IncidentDB
from fabricwatch.fleet.db import FleetDB
from fabricwatch.outputs.outbox import Outbox, build_event, enqueue
from fabricwatch.outputs.outbox_schema import OUTBOX_SCHEMA
from tests.conftest import REPO

STATE = REPO / "tests" / "data" / "state"


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copyfile(STATE / name, dst)
    return dst


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_incident_database_of_the_previous_version_opens_and_migrates(tmp_path: Path) -> None:
    path = _copy("incidents-v1.sqlite3", tmp_path)
    with sqlite3.connect(path) as old:
        before = old.execute("SELECT event_id FROM outbox ORDER BY id").fetchall()
        assert "outbox_meta" in _tables(old)
    # Read-only first (``fabricwatch incidents`` beside an old daemon's file).
    ro = IncidentDB(path)
    ro.connect_read_only()
    assert {d["key"] for d in ro.incidents()} == {"k1", "k2"}
    ro.close()

    db = IncidentDB(path)
    conn = db.connect()
    box = Outbox(conn)
    assert {d["key"] for d in db.incidents()} == {"k1", "k2"}
    rows = box.head("pager", 10)
    assert [(d.event_id,) for d in rows] == before and all(d.state == "pending" for d in rows)
    assert "outbox_meta" not in _tables(conn)
    assert conn.execute("SELECT version FROM schema_parts WHERE name = 'outbox'").fetchone() == (
        OUTBOX_SCHEMA.newest,
    )
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    ev = build_event(
        transition="resolved",
        at=5.0,
        incident=db.get("k1") or {},
        cluster="c1",
        severity="critical",
    )
    with box.transaction() as tx:
        assert enqueue(tx, "pager", ev, now=5.0)
    db.close()

    again = IncidentDB(path)
    assert len(Outbox(again.connect()).head("pager", 10)) == 3  # migrating twice is a no-op
    again.close()


def test_fleet_database_of_the_previous_version_opens_and_migrates(tmp_path: Path) -> None:
    path = _copy("fleet-v1.sqlite3", tmp_path)
    db = FleetDB(path)
    conn = db.connect()
    box = Outbox(conn)
    assert db.get("c1:g1") is not None
    assert db.transitions("c1:g1") == [("opened", 1, "r1")]
    assert [d.incident_key for d in box.head("pager", 10)] == ["c1:g1"]
    assert "outbox_meta" not in _tables(conn)
    db.close()
