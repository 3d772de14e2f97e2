"""A state directory on a real tmpfs that fills and empties (issue 17, items 2-3)."""

from __future__ import annotations

import sqlite3

import pytest
import structlog

from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.errors import StateWriteError
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.sqlite import immediate_transaction
from tests.alerting.conftest import opened, resolved
from tests.faults.conftest import SmallFs


def _kinds(db: IncidentDB, key: str) -> list[str]:
    return [str(d["state"]) for d in db.transitions(key)]


def test_full_disk_keeps_transitions_and_writes_them_in_order(small_fs: SmallFs) -> None:
    db = IncidentDB.in_state_dir(small_fs.root)
    hooked: list[tuple[str, str]] = []
    db.add_transition_hook(lambda _c, tr: hooked.append((tr.incident.key, tr.kind)))
    db.connect()
    assert db.record([opened("a" * 16)])
    small_fs.fill()
    # Big documents so the writes cannot fit into pages SQLite already has.
    pending: list[IncidentTransition] = []
    with structlog.testing.capture_logs() as logs:
        for i in range(6):
            key = f"{i:x}" * 16
            pending += [opened(key, evidence_count=10), resolved(key, evidence_count=10)]
            assert not db.record(pending[-2:])
    assert db.pending == len(pending)
    assert not db.writable and db.write_errors >= 1
    failed = [e for e in logs if e["event"] == "state_write_failed"]
    assert failed, logs
    text = str(failed[0]["error"])
    assert "full" in text.lower(), text  # the real SQLite error, not "no transaction is active"
    assert "no transaction is active" not in text
    assert "Move the file aside" not in text and "move the file aside" not in failed[0]["hint"]
    values = {r.name: r.value for r in db.readings()}
    assert values["fabricwatch_state_writable"] == 0.0
    assert values["fabricwatch_state_write_errors"] >= 1.0
    assert values["fabricwatch_state_pending_transitions"] == len(pending)
    small_fs.empty()
    hooked.clear()  # hooks of the rolled-back attempts ran in transactions that never committed
    assert db.flush()
    assert db.pending == 0
    assert {r.name: r.value for r in db.readings()}["fabricwatch_state_writable"] == 1.0
    assert hooked == [(t.incident.key, t.kind) for t in pending]  # in order, hooks ran
    for i in range(6):
        assert _kinds(db, f"{i:x}" * 16) == ["open", "resolved"]
    db.close()


def test_pending_transitions_are_bounded_updates_first(small_fs: SmallFs) -> None:
    db = IncidentDB.in_state_dir(small_fs.root, max_pending=4, retention_days=3650)
    db.connect()
    small_fs.fill()
    first = opened("b" * 16, evidence_count=10)
    upd = [IncidentTransition("updated", first.at + i, first.incident) for i in range(1, 5)]
    last = resolved("b" * 16, evidence_count=10)
    db.record([first, *upd, last])
    assert db.pending == 4 and db.dropped == 2
    small_fs.empty()
    assert db.flush()
    assert _kinds(db, "b" * 16)[0] == "open" and _kinds(db, "b" * 16)[-1] == "resolved"


def test_rollback_does_not_hide_the_real_error(small_fs: SmallFs) -> None:
    conn = sqlite3.connect(small_fs.root / "t.sqlite3", isolation_level=None)
    conn.execute("CREATE TABLE t (v BLOB)")
    small_fs.fill()
    # SQLite already rolled back: the body's real error propagates, not ROLLBACK's
    # "cannot rollback - no transaction is active".
    with (
        pytest.raises(sqlite3.OperationalError, match="full"),
        immediate_transaction(conn, "test db") as c,
    ):
        for _ in range(64):
            c.execute("INSERT INTO t VALUES (randomblob(65536))")
    assert not conn.in_transaction
    conn.close()


def test_full_disk_at_open_is_a_state_write_error(small_fs: SmallFs) -> None:
    db = IncidentDB.in_state_dir(small_fs.root)
    db.connect()
    db.close()
    (small_fs.root / "incidents.sqlite3-shm").unlink(missing_ok=True)
    small_fs.fill()
    with pytest.raises(StateWriteError) as info:
        IncidentDB.in_state_dir(small_fs.root).connect()
    assert "corrupt" not in str(info.value) and "Move the file aside" not in str(info.value)
    small_fs.empty()
    IncidentDB.in_state_dir(small_fs.root).connect()


def test_outbox_tables_on_a_full_disk_are_a_state_write_error(small_fs: SmallFs) -> None:
    db = IncidentDB.in_state_dir(small_fs.root)
    conn = db.connect()  # an incident database from before the outbox existed
    small_fs.fill()
    with pytest.raises(StateWriteError, match="outbox: cannot create tables"):
        Outbox(conn)
    assert not conn.in_transaction
    small_fs.empty()
    Outbox(conn)
