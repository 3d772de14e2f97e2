"""The durable alert outbox: the event envelope and the rows that carry it.

Every incident transition is written, in the transaction that records it,
as one pending row per routed sink (:func:`enqueue`);
:class:`~fabricwatch.outputs.sender.OutboxSender` drains them. A row is marked
delivered only after the receiver acknowledged it (at-least-once: a crash
between the two re-sends that one request). Each transition carries a stable
``event_id`` (idempotency key, ``webhook-id``) and each incident a stable
``dedup_key`` (PagerDuty ``dedup_key``, Alertmanager label set) so receivers
collapse such repeats.

The ``outbox`` table lives in the incident (or fleet) database file: a schema
part (:mod:`fabricwatch.outputs.outbox_schema`) that :class:`Outbox` applies
on the connection it is given.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from fabricwatch.outputs.outbox_schema import OUTBOX_SCHEMA
from fabricwatch.sqlite import (
    DatabaseFile,
    Schema,
    immediate_transaction,
    migrate_part,
    open_database,
    store_error,
)

EVENT_SCHEMA = "fabricwatch.incident-event/v1"
DeliveryState = Literal["pending", "delivered", "dead"]

OUTBOX_FILE_APPLICATION_ID = 0x46574F31  # "FWO1": a file that holds only an outbox
# Such a file has no tables of its own: its one version marks it as ours, the
# outbox part brings its tables.
_STANDALONE = Schema("outbox database", {1: ()})

_COLUMNS = (
    "id, sink, event_id, dedup_key, incident_key, transition, revision, payload, created_at, "
    "state, attempts, next_attempt_at, last_attempt_at, last_error, done_at"
)


def dedup_key(cluster: str, incident_key: str) -> str:
    """The stable per-incident key receivers deduplicate on (<= 255 characters)."""
    digest = hashlib.sha256(f"fabricwatch|{cluster}|{incident_key}".encode()).hexdigest()
    return f"fabricwatch-{digest[:32]}"


def event_id(dedup: str, transition: str, revision: int) -> str:
    """The stable id of one transition: constant across retries and restarts."""
    digest = hashlib.sha256(f"{dedup}|{transition}|{revision}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def iso(ts: float) -> str:
    """RFC 3339 UTC with milliseconds, as in the incident schema."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_event(
    *, transition: str, at: float, incident: Mapping[str, Any], cluster: str, severity: str
) -> dict[str, Any]:
    """The envelope every sink renders from (and the MQTT/webhook body).

    ``type``/``timestamp``/``data`` follow Standard Webhooks; ``data`` is the
    ``fabricwatch.incident/v1`` document unchanged.
    """
    dk = dedup_key(cluster, str(incident["key"]))
    revision = int(incident.get("revision", 0))
    return {
        "schema": EVENT_SCHEMA,
        "type": f"incident.{transition}",
        "event_id": event_id(dk, transition, revision),
        "dedup_key": dk,
        "cluster": cluster,
        "severity": severity,
        "timestamp": iso(at),
        "data": dict(incident),
    }


def enqueue(conn: sqlite3.Connection, sink: str, event: Mapping[str, Any], *, now: float) -> bool:
    """Add one pending delivery of ``event`` to ``sink``.

    Call it inside the open transaction that records the transition, so both
    commit or neither does. Idempotent per (sink, event_id): returns False when
    the row already existed.
    """
    data = event["data"]
    cur = conn.execute(
        """INSERT OR IGNORE INTO outbox (sink, event_id, dedup_key, incident_key, transition,
               revision, payload, created_at, next_attempt_at)
           VALUES (?,?,?,?,?,?,?,?,?)""",
        (
            sink,
            event["event_id"],
            event["dedup_key"],
            str(data["key"]),
            str(event["type"]).removeprefix("incident."),
            int(data.get("revision", 0)),
            json.dumps(event, separators=(",", ":"), sort_keys=True),
            now,
            now,
        ),
    )
    return cur.rowcount > 0


def settle_pending(
    conn: sqlite3.Connection,
    incident_key: str,
    *,
    up_to_revision: int,
    now: float,
    reason: str,
) -> int:
    """Mark an incident's pending rows up to a revision as delivered by someone
    else (a peer replica that paged them), with ``reason`` kept as the note.

    Call it inside the transaction that decided so. Returns the rows settled.
    """
    cur = conn.execute(
        "UPDATE outbox SET state = 'delivered', done_at = ?, last_error = ? "
        "WHERE incident_key = ? AND state = 'pending' AND revision <= ?",
        (now, reason[:500], incident_key, int(up_to_revision)),
    )
    return cur.rowcount


def has_incident(conn: sqlite3.Connection, sink: str, incident_key: str) -> bool:
    """Whether ``sink`` was already sent (or queued) anything about this incident."""
    row = conn.execute(
        "SELECT 1 FROM outbox WHERE sink = ? AND incident_key = ? LIMIT 1", (sink, incident_key)
    ).fetchone()
    return row is not None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One outbox row."""

    id: int
    sink: str
    event_id: str
    dedup_key: str
    incident_key: str
    transition: str
    revision: int
    payload: str
    created_at: float
    state: DeliveryState
    attempts: int
    next_attempt_at: float
    last_attempt_at: float | None
    last_error: str | None
    done_at: float | None

    def event(self) -> dict[str, Any]:
        """The stored envelope (see :func:`build_event`)."""
        doc: dict[str, Any] = json.loads(self.payload)
        return doc

    def body(self) -> bytes:
        """The envelope as compact JSON bytes (what webhook and MQTT send)."""
        return self.payload.encode()


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Pending rows of one sink."""

    depth: int
    oldest_created_at: float | None


class Outbox:
    """The outbox tables on one SQLite connection (used from one thread).

    Pass the incident database's connection (``IncidentDB.connect()``) so
    :func:`enqueue` runs in its transactions, or use :meth:`open` for a
    standalone file.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Callable[[], float] = time.time,
        create: bool = True,
    ) -> None:
        if conn.isolation_level is not None:
            msg = "the outbox needs a connection opened with isolation_level=None"
            raise ValueError(msg)
        self.conn = conn
        self.clock = clock
        if not create:
            return  # a read-only view (``incidents --deliveries``)
        try:
            migrate_part(conn, OUTBOX_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise store_error("outbox", "cannot create tables", exc) from None

    @classmethod
    def open(cls, path: Path, *, clock: Callable[[], float] = time.time) -> Outbox:
        """A file holding only an outbox (benches and tests; the daemon and the
        fleet keep theirs in their own files). Opened like every state file
        (:func:`fabricwatch.sqlite.open_database`: WAL, synchronous=FULL)."""
        file = DatabaseFile(
            path,
            "outbox database",
            OUTBOX_FILE_APPLICATION_ID,
            _STANDALONE,
            elsewhere="use another path",
        )
        return cls(open_database(file), clock=clock)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction (for enqueueing outside the engine)."""
        with immediate_transaction(self.conn, "outbox") as conn:
            yield conn

    def _rows(self, sql: str, args: Sequence[Any]) -> list[Delivery]:
        return [Delivery(*r) for r in self.conn.execute(sql, args).fetchall()]

    def head(self, sink: str, limit: int) -> list[Delivery]:
        """The oldest pending rows of ``sink``, in order."""
        return self._rows(
            f"SELECT {_COLUMNS} FROM outbox WHERE sink = ? AND state = 'pending' "  # noqa: S608
            "ORDER BY id LIMIT ?",
            (sink, max(1, limit)),
        )

    def rows(
        self,
        *,
        state: DeliveryState | None = None,
        sink: str | None = None,
        limit: int | None = None,
    ) -> list[Delivery]:
        """Rows for people (``incidents --deliveries``), newest first."""
        where: list[str] = []
        args: list[Any] = []
        if state is not None:
            where.append("state = ?")
            args.append(state)
        if sink is not None:
            where.append("sink = ?")
            args.append(sink)
        sql = f"SELECT {_COLUMNS} FROM outbox"  # noqa: S608 - constant columns, bound values
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return self._rows(sql, args)

    def _update(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        with self.transaction() as conn:
            conn.executemany(sql, rows)

    def mark_delivered(self, ids: Sequence[int], *, attempts_now: bool = True) -> None:
        """Receiver acknowledged these rows."""
        now = self.clock()
        inc = 1 if attempts_now else 0
        self._update(
            "UPDATE outbox SET state = 'delivered', done_at = ?, last_attempt_at = ?, "
            "attempts = attempts + ?, last_error = NULL WHERE id = ? AND state = 'pending'",
            [(now, now, inc, i) for i in ids],
        )

    def mark_failed(self, ids: Sequence[int], error: str, next_attempt_at: float) -> None:
        """An attempt failed; retry no earlier than ``next_attempt_at``."""
        now = self.clock()
        self._update(
            "UPDATE outbox SET attempts = attempts + 1, last_attempt_at = ?, last_error = ?, "
            "next_attempt_at = ? WHERE id = ? AND state = 'pending'",
            [(now, error[:500], next_attempt_at, i) for i in ids],
        )

    def mark_dead(self, ids: Sequence[int], reason: str, *, attempted: bool = False) -> None:
        """Give up on these rows (kept, visible, counted); ``attempted``: after a try."""
        now = self.clock()
        inc = 1 if attempted else 0
        self._update(
            "UPDATE outbox SET state = 'dead', done_at = ?, last_error = ?, "
            "attempts = attempts + ? WHERE id = ? AND state = 'pending'",
            [(now, reason[:500], inc, i) for i in ids],
        )

    def reset_backoff(self, sink: str) -> int:
        """Make every pending row of ``sink`` due now (the receiver came back)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE outbox SET next_attempt_at = ? WHERE sink = ? AND state = 'pending'",
                (self.clock(), sink),
            )
        return cur.rowcount

    def queue_stats(self) -> dict[str, QueueStats]:
        """Pending depth and oldest enqueue time per sink."""
        out: dict[str, QueueStats] = {}
        for sink, depth, oldest in self.conn.execute(
            "SELECT sink, count(*), min(created_at) FROM outbox WHERE state = 'pending' "
            "GROUP BY sink"
        ):
            out[sink] = QueueStats(int(depth), oldest)
        return out

    def firing(self, sink: str, *, resolved_within: float) -> list[Delivery]:
        """Latest delivered row per incident that is still firing or recently resolved.

        Alertmanager needs these re-sent periodically: firing alerts so they do
        not time out, resolved ones for a while so every cluster peer sees them.
        """
        return self._rows(
            f"SELECT {_COLUMNS} FROM outbox WHERE id IN ("  # noqa: S608 - constant columns
            "SELECT max(id) FROM outbox WHERE sink = ? AND state = 'delivered' "
            "GROUP BY dedup_key) AND (transition != 'resolved' OR done_at >= ?) ORDER BY id",
            (sink, self.clock() - resolved_within),
        )

    def prune(self, retention: float) -> int:
        """Drop delivered and dead rows older than ``retention`` seconds."""
        with self.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM outbox WHERE state != 'pending' AND done_at < ?",
                (self.clock() - retention,),
            )
        return cur.rowcount
