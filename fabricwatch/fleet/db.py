"""One replica's SQLite state: cluster incidents, their transitions and the outbox.

Opened and migrated like the incident store, by :mod:`fabricwatch.sqlite`:
WAL, ``synchronous=FULL`` (a recorded transition and its outbox rows survive
``kill -9``), forward-only migrations under ``PRAGMA user_version``, an
application id that refuses other programs' files; the outbox's tables are a
schema part of this file. A transition this replica decides is written together with
its outbox rows in one transaction (:meth:`FleetDB.record`); announcements
of other replicas are copied in (:meth:`FleetDB.remember`) so every replica's
file holds the fleet's history and ``/api/v1/incidents`` reads it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fabricwatch.errors import StoreError
from fabricwatch.fleet.jobwork import JobWork
from fabricwatch.sqlite import DatabaseFile, Schema, immediate_transaction, open_database

DB_FILENAME = "fleet.sqlite3"
APPLICATION_ID = 0x46574631  # "FWF1"
FLEET_SCHEMA = Schema(
    "fleet",
    {
        1: (
            """CREATE TABLE cluster_incidents (
            key TEXT PRIMARY KEY,
            cluster TEXT NOT NULL,
            group_id TEXT NOT NULL,
            state TEXT NOT NULL,
            cause TEXT NOT NULL,
            owner TEXT NOT NULL,
            onset REAL NOT NULL,
            updated_at REAL NOT NULL,
            resolved_at REAL,
            revision INTEGER NOT NULL,
            doc TEXT NOT NULL
        )""",
            "CREATE INDEX cluster_incidents_state ON cluster_incidents(state, updated_at)",
            """CREATE TABLE cluster_transitions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            at REAL NOT NULL,
            revision INTEGER NOT NULL,
            owner TEXT NOT NULL,
            doc TEXT NOT NULL
        )""",
            "CREATE INDEX cluster_transitions_key ON cluster_transitions(key)",
        ),
        # Nodes' job reports, reduced to what the badput needs (each job's GPUs
        # over the window), so `incidents --by job --fleet` and a restarted
        # replica's ledger know the jobs' GPU wall time, not only the loss.
        2: (
            """CREATE TABLE job_reports (
            cluster TEXT NOT NULL,
            node TEXT NOT NULL,
            start REAL NOT NULL,
            end REAL NOT NULL,
            jobs TEXT NOT NULL,
            PRIMARY KEY (cluster, node, start)
        )""",
            "CREATE INDEX job_reports_end ON job_reports(end)",
        ),
    },
)
_UPSERT = """INSERT INTO cluster_incidents (key, cluster, group_id, state, cause, owner, onset,
        updated_at, resolved_at, revision, doc) VALUES (?,?,?,?,?,?,?,?,?,?,?)
    ON CONFLICT(key) DO UPDATE SET state=excluded.state, cause=excluded.cause,
        owner=excluded.owner, updated_at=excluded.updated_at, resolved_at=excluded.resolved_at,
        revision=excluded.revision, doc=excluded.doc
    WHERE excluded.revision > cluster_incidents.revision"""


def _row(doc: Mapping[str, Any]) -> tuple[Any, ...]:
    group = doc.get("group") or {}
    return (
        str(doc["key"]),
        str(doc.get("cluster", "")),
        str(group.get("id", "")),
        str(doc.get("state", "open")),
        str(doc.get("cause", "unknown")),
        str(doc.get("owner", "")),
        float(doc.get("onset_unix") or 0.0),
        float(doc.get("updated_unix") or time.time()),
        doc.get("resolved_unix"),
        int(doc.get("revision", 0)),
        json.dumps(doc, separators=(",", ":"), sort_keys=True),
    )


class FleetDB:
    """SQLite state of one aggregator replica. Use from one thread (the event loop)."""

    def __init__(self, path: Path, *, retention: float = 30 * 86400.0) -> None:
        self.path = path
        self._retention = retention
        self._file = DatabaseFile(
            path, "fleet database", APPLICATION_ID, FLEET_SCHEMA, elsewhere="set fleet.state_dir"
        )
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def in_dir(cls, state_dir: Path, **kwargs: Any) -> FleetDB:
        """The database of a replica's state directory."""
        return cls(state_dir / DB_FILENAME, **kwargs)

    def connect(self) -> sqlite3.Connection:
        """Open, check and migrate (once); returns the connection."""
        if self._conn is None:
            self._conn = open_database(self._file)
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction, committed on success, rolled back on error."""
        with immediate_transaction(self.connect(), f"fleet database {self.path}") as conn:
            yield conn

    def record(
        self,
        kind: str,
        at: float,
        doc: Mapping[str, Any],
        hook: Callable[[sqlite3.Connection], object] | None = None,
    ) -> None:
        """Persist one transition this replica decided; ``hook`` (the outbox router)
        runs in the same transaction."""
        try:
            with self.transaction() as conn:
                row = _row(doc)
                conn.execute(_UPSERT, row)
                conn.execute(
                    "INSERT INTO cluster_transitions (key, kind, at, revision, owner, doc) "
                    "VALUES (?,?,?,?,?,?)",
                    (row[0], kind, at, row[9], row[5], row[10]),
                )
                if hook is not None:
                    hook(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"fleet database {self.path}: write failed: {exc}") from None

    def remember(self, doc: Mapping[str, Any]) -> bool:
        """Copy another replica's announcement in (if newer); True when it was."""
        try:
            with self.transaction() as conn:
                cur = conn.execute(_UPSERT, _row(doc))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"fleet database {self.path}: write failed: {exc}") from None
        return cur.rowcount > 0

    def incidents(
        self,
        *,
        since: float | None = None,
        state: str | None = None,
        cluster: str | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """Cluster incident documents, newest onset first."""
        where: list[str] = []
        args: list[Any] = []
        for col, op, val in (
            ("updated_at", ">=", since),
            ("state", "=", state),
            ("cluster", "=", cluster),
        ):
            if val is not None:
                where.append(f"{col} {op} ?")
                args.append(val)
        sql = "SELECT doc FROM cluster_incidents"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY onset DESC, key LIMIT ?"
        args.append(int(limit))
        return self._docs(sql, args)

    def get(self, key: str) -> dict[str, Any] | None:
        """One cluster incident by key."""
        found = self._docs("SELECT doc FROM cluster_incidents WHERE key = ?", (key,))
        return found[0] if found else None

    def transitions(self, key: str) -> list[tuple[str, int, str]]:
        """(kind, revision, owner) of the transitions this replica recorded for ``key``."""
        rows = self.connect().execute(
            "SELECT kind, revision, owner FROM cluster_transitions WHERE key = ? ORDER BY id",
            (key,),
        )
        return [(str(k), int(r), str(o)) for k, r, o in rows]

    def prune(self, now: float) -> int:
        """Drop resolved incidents older than the retention."""
        with self.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM cluster_incidents WHERE state = 'resolved' AND resolved_at < ?",
                (now - self._retention,),
            )
            conn.execute(
                "DELETE FROM cluster_transitions WHERE key NOT IN (SELECT key FROM "
                "cluster_incidents)"
            )
            conn.execute("DELETE FROM job_reports WHERE end < ?", (now - self._retention,))
        return cur.rowcount

    def add_report(self, cluster: str, report: JobWork) -> bool:
        """Keep one node's job report; False for a window of that node already kept."""
        return self.add_reports([(cluster, report)]) == 1

    def add_reports(self, reports: Sequence[tuple[str, JobWork]]) -> int:
        """Keep (cluster, report) pairs (each job's GPUs over its window) in one
        transaction; returns how many were new (a node's window is kept once)."""
        rows = [
            (cluster, r.node, r.start, r.end,
             json.dumps({job: list(gpus) for job, gpus in r.jobs}, sort_keys=True))
            for cluster, r in reports
        ]  # fmt: skip
        try:
            with self.transaction() as conn:
                before = conn.total_changes
                conn.executemany(
                    "INSERT OR IGNORE INTO job_reports (cluster, node, start, end, jobs) "
                    "VALUES (?,?,?,?,?)",
                    rows,
                )
                added = conn.total_changes - before
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"fleet database {self.path}: write failed: {exc}") from None
        return added

    def reports(self, *, since: float | None = None) -> list[tuple[str, JobWork]]:
        """(cluster, report) of the kept job reports ending at or after ``since``, oldest
        first; reports carry the jobs' GPUs and window only (no work points)."""
        sql = "SELECT cluster, node, start, end, jobs FROM job_reports"
        args: tuple[Any, ...] = ()
        if since is not None:
            sql += " WHERE end >= ?"
            args = (since,)
        try:
            rows = self.connect().execute(sql + " ORDER BY start, cluster, node", args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"fleet database {self.path}: read failed: {exc}") from None
        out: list[tuple[str, JobWork]] = []
        for cluster, node, start, end, jobs in rows:
            held = json.loads(jobs)
            pairs = tuple((str(j), tuple(str(g) for g in gpus)) for j, gpus in sorted(held.items()))
            out.append((str(cluster), JobWork(str(node), float(start), float(end), pairs, ())))
        return out

    def _docs(self, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        try:
            rows = self.connect().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"fleet database {self.path}: read failed: {exc}") from None
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
