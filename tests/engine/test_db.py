"""The SQLite incident store: durability, versioning, corruption, retention, hooks."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabricwatch.engine.db import DB_FILENAME, SCHEMA_VERSION, IncidentDB
from fabricwatch.engine.evidence import Culprit
from fabricwatch.engine.incidents import Incident, IncidentTransition, from_json, to_json
from fabricwatch.errors import StoreError

REPO = Path(__file__).resolve().parents[2]


def make(key: str, *, state: str = "open", at: float = 1_700_000_000.0) -> IncidentTransition:
    inc = Incident(
        key=key,
        node="n1",
        kind="stall",
        state=state,  # type: ignore[arg-type]
        cause="pfc_storm",
        confidence=0.9,
        culprit=Culprit("switch:leaf1:swp12:3", "switch_port", (("switch", "leaf1"),)),
        summary="s",
        onset=at,
        opened_at=at + 2,
        updated_at=at + 2,
        ended_at=None,
        resolved_at=at + 60 if state == "resolved" else None,
        gpus=("0", "1"),
        job="slurm:1",
        gpu_seconds=10.0,
        cost=None,
        episodes=1,
        evidence=(),
        missing=(),
        revision=1,
    )
    return IncidentTransition("opened" if state == "open" else "resolved", at + 2, inc)


def test_roundtrip_wal_and_version(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    db.record([make("a"), make("b")])
    conn = db.connect()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    docs = db.incidents()
    assert {d["key"] for d in docs} == {"a", "b"}
    assert docs[0]["schema"] == "fabricwatch.incident/v1"
    assert from_json(docs[0]).culprit.key == "switch:leaf1:swp12:3"
    db.record([make("a", state="resolved")])
    assert db.get("a")["state"] == "resolved"  # type: ignore[index]
    assert [t["state"] for t in db.transitions("a")] == ["open", "resolved"]
    db.close()
    db.close()
    again = IncidentDB.in_state_dir(tmp_path)
    assert len(again.incidents(state="open")) == 1
    again.close()


def test_json_roundtrip() -> None:
    inc = make("k").incident
    back = from_json(to_json(inc))
    assert back.key == inc.key and back.gpus == inc.gpus and back.onset == inc.onset


def test_too_new_database_is_refused(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    db.record([make("a")])
    db.close()
    with sqlite3.connect(tmp_path / DB_FILENAME) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match=r"schema version 99, newer than this fabricwatch"):
        IncidentDB.in_state_dir(tmp_path).connect()


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / DB_FILENAME).write_bytes(b"this is not sqlite at all\n" * 200)
    with pytest.raises(StoreError, match="corrupt or not a database"):
        IncidentDB.in_state_dir(tmp_path).connect()


def test_corrupted_pages_are_refused(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    db.record([make(f"k{i}") for i in range(300)])
    db.close()
    path = tmp_path / DB_FILENAME
    data = bytearray(path.read_bytes())
    for off in range(4096, len(data), 97):  # smash every page after the first
        data[off] ^= 0x5A
    path.write_bytes(bytes(data))
    for f in tmp_path.glob(DB_FILENAME + "-*"):
        f.unlink()
    with pytest.raises(StoreError, match=r"incident database .*(corrupt|integrity)"):
        db2 = IncidentDB.in_state_dir(tmp_path)
        db2.connect()
        db2.incidents()


def test_other_programs_database_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / DB_FILENAME) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a fabricwatch incident database"):
        IncidentDB.in_state_dir(tmp_path).connect()


def test_retention_and_cap(tmp_path: Path) -> None:
    now = 1_700_000_000.0 + 40 * 86400
    db = IncidentDB.in_state_dir(tmp_path, retention_days=30, max_incidents=10, clock=lambda: now)
    db.record([make(f"old{i}", state="resolved") for i in range(5)])
    db.record([make(f"new{i}", at=now - 100 + i) for i in range(12)])
    removed = db.prune(now)
    keys = {d["key"] for d in db.incidents()}
    assert removed == 2  # the 5 expired ones went at the first record() already
    assert not any(k.startswith("old") for k in keys)
    assert len(keys) == 10 and "new11" in keys
    assert db.transitions("old0") == []  # cascaded


def test_outbox_hook_runs_in_the_same_transaction(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    db.add_migration(2, ["CREATE TABLE outbox (id INTEGER PRIMARY KEY, key TEXT, kind TEXT)"])
    db.add_transition_hook(
        lambda conn, tr: conn.execute(
            "INSERT INTO outbox (key, kind) VALUES (?, ?)", (tr.incident.key, tr.kind)
        )
    )
    db.record([make("a")])
    assert db.connect().execute("SELECT key, kind FROM outbox").fetchall() == [("a", "opened")]

    def boom(conn: sqlite3.Connection, tr: IncidentTransition) -> None:
        raise RuntimeError("outbox full")

    db.add_transition_hook(boom)
    with pytest.raises(RuntimeError):
        db.record([make("b")])
    assert db.get("b") is None  # rolled back with the outbox row
    assert db.connect().execute("SELECT count(*) FROM outbox").fetchone()[0] == 1
    assert db.schema_version == 2


WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from engine.test_db import make
from fabricwatch.engine.db import IncidentDB
db = IncidentDB.in_state_dir(Path({state!r}))
for i in range(100000):
    db.record([make(f"k{{i}}")])
    print(f"k{{i}}", flush=True)
"""


def test_kill_9_loses_no_committed_incident(tmp_path: Path) -> None:
    script = WRITER.format(tests=str(REPO / "tests"), state=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None
    committed: list[str] = []
    deadline = time.monotonic() + 30
    while len(committed) < 40 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.append(line.strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert len(committed) >= 40, "writer did not get going"
    db = IncidentDB.in_state_dir(tmp_path)
    keys = {d["key"] for d in db.incidents()}
    assert set(committed) <= keys
    assert db.connect().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
