"""The durable alert outbox and its sender.

Every incident transition is written, in the transaction that records it,
as one pending row per routed sink (:func:`enqueue`). An :class:`OutboxSender`
runs one ordered worker per sink that drains those rows: it groups a backlog
into one request where the sink can (flood control), spaces requests with a
token bucket, retries network errors, timeouts, 5xx and 429 with exponential
backoff and jitter (a receiver's ``Retry-After`` wins), dead-letters a row
once it is older than ``max_age`` and resumes after a restart or ``kill -9``
from whatever the database says is still pending.

Delivery is at-least-once: a row is marked delivered only after the receiver
acknowledged it, so a crash between the two re-sends that one request. Each
transition carries a stable ``event_id`` (idempotency key, ``webhook-id``) and
each incident a stable ``dedup_key`` (PagerDuty ``dedup_key``, Alertmanager
label set) so receivers collapse such repeats.

Tables (``outbox``, ``outbox_meta``) live in the incident database file; they
are created idempotently and versioned in ``outbox_meta`` so the engine's own
``user_version`` migrations stay independent of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import structlog

from fabricwatch.errors import DeliveryError, StoreError
from fabricwatch.sqlite import immediate_transaction, store_error

log = structlog.get_logger("fabricwatch.outbox")

OUTBOX_SCHEMA_VERSION = 1
EVENT_SCHEMA = "fabricwatch.incident-event/v1"
DeliveryState = Literal["pending", "delivered", "dead"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        sink TEXT NOT NULL,
        event_id TEXT NOT NULL,
        dedup_key TEXT NOT NULL,
        incident_key TEXT NOT NULL,
        transition TEXT NOT NULL,
        revision INTEGER NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL,
        last_attempt_at REAL,
        last_error TEXT,
        done_at REAL,
        UNIQUE (sink, event_id)
    )""",
    "CREATE INDEX IF NOT EXISTS outbox_queue ON outbox(sink, state, id)",
    "CREATE INDEX IF NOT EXISTS outbox_incident ON outbox(sink, incident_key)",
)

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


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the outbox tables if needed (idempotent; refuses a newer schema)."""
    in_tx = conn.in_transaction
    if not in_tx:
        conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _SCHEMA:
            conn.execute(stmt)
        row = conn.execute("SELECT value FROM outbox_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO outbox_meta (key, value) VALUES ('schema_version', ?)",
                (str(OUTBOX_SCHEMA_VERSION),),
            )
        elif int(row[0]) > OUTBOX_SCHEMA_VERSION:
            msg = (
                f"outbox schema version {row[0]} is newer than this fabricwatch understands "
                f"({OUTBOX_SCHEMA_VERSION}); upgrade fabricwatch or point --state-dir elsewhere"
            )
            raise StoreError(msg)
    except BaseException:
        if not in_tx and conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                conn.execute("ROLLBACK")
        raise
    if not in_tx:
        conn.execute("COMMIT")


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
            ensure_schema(conn)
        except sqlite3.DatabaseError as exc:
            raise store_error("outbox", "cannot create tables", exc) from None

    @classmethod
    def open(cls, path: Path, *, clock: Callable[[], float] = time.time) -> Outbox:
        """A standalone outbox file (WAL, synchronous=FULL: commits survive kill -9)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open outbox database {path}: {exc}") from None
        return cls(conn, clock=clock)

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


def _well_formed(d: Delivery) -> bool:
    try:
        ev = d.event()
    except ValueError:
        return False
    return (
        isinstance(ev, dict)
        and isinstance(ev.get("data"), dict)
        and isinstance(ev.get("type"), str)
        and "key" in ev["data"]
    )


class SinkError(DeliveryError):
    """A delivery attempt failed; says whether and when to retry.

    Attributes:
        retryable: try again later (network, timeout, 5xx, 429, 401/403).
        retry_after: the receiver's ``Retry-After`` in seconds, if it sent one.
        gone: the receiver said 410 Gone: stop this sink until restart.
        auth: the receiver refused the credentials (401/403): retried up to
            ``RetryPolicy.auth_retries`` attempts, then dead-lettered.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        retry_after: float | None = None,
        gone: bool = False,
        auth: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.gone = gone
        self.auth = auth


@runtime_checkable
class Sink(Protocol):
    """A destination the sender drives; one ordered worker each."""

    @property
    def name(self) -> str:
        """The outbox ``sink`` key and metrics label."""
        ...

    @property
    def max_batch(self) -> int:
        """How many pending transitions one request may carry (1 = no grouping)."""
        ...

    @property
    def timeout(self) -> float:
        """Seconds one :meth:`deliver` may take."""
        ...

    async def start(self) -> None:
        """Acquire sessions; must not raise for an unreachable receiver."""
        ...

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        """Send ``batch`` (in order) or raise :class:`SinkError`."""
        ...

    async def close(self) -> None:
        """Release sessions. Must not raise."""
        ...


@runtime_checkable
class RefreshingSink(Sink, Protocol):
    """A sink that must re-send firing incidents (Alertmanager)."""

    @property
    def refresh_interval(self) -> float:
        """Seconds between re-sends."""
        ...

    @property
    def resolved_resend(self) -> float:
        """How long after resolve the resolved state keeps being re-sent."""
        ...

    async def refresh(self, firing: Sequence[Delivery]) -> None:
        """Re-send these (latest delivered transition per incident)."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the sender retries and when it gives up."""

    max_age: float = 86400.0
    backoff_initial: float = 1.0
    backoff_max: float = 300.0
    max_retry_after: float = 3600.0
    retention: float = 7 * 86400.0
    auth_retries: int = 20

    def backoff(self, attempts: int, rng: random.Random) -> float:
        """Delay after the ``attempts``-th failure: doubling, "equal jitter".

        Half the doubled delay is fixed and half random, so retries from many
        nodes spread out while every retry still waits longer than the last
        one's floor.
        """
        base = min(self.backoff_max, self.backoff_initial * 2.0 ** max(0, attempts - 1))
        return base / 2.0 + rng.uniform(0.0, base / 2.0)


class TokenBucket:
    """Flood control: at most ``rate`` requests per second, bursts of ``burst``."""

    def __init__(
        self, rate: float, burst: int, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._mono = monotonic
        self._tokens = float(self.burst)
        self._at = monotonic()

    def _refill(self) -> None:
        now = self._mono()
        if self.rate > 0:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def delay(self) -> float:
        """Seconds until a request may go (0 = now)."""
        if self.rate <= 0:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        """Spend one token (call after :meth:`delay` returned 0)."""
        if self.rate <= 0:
            return
        self._refill()
        self._tokens -= 1.0


@dataclass(slots=True)
class SinkStats:
    """Counters of one sink since start (exported as self metrics)."""

    attempted: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    requests: int = 0
    refreshes: int = 0
    disabled: bool = False


@dataclass(slots=True)
class _Worker:
    sink: Sink
    bucket: TokenBucket
    stats: SinkStats = field(default_factory=SinkStats)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    split_through: int = 0
    next_refresh: float = 0.0
    unrecorded: list[int] = field(default_factory=list)


class OutboxSender:
    """Drains the outbox: one ordered worker task per sink."""

    def __init__(
        self,
        outbox: Outbox,
        sinks: Sequence[Sink],
        policy: RetryPolicy | None = None,
        *,
        limits: Mapping[str, TokenBucket] | None = None,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outbox = outbox
        self.policy = policy or RetryPolicy()
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._mono = monotonic
        limits = limits or {}
        self._workers = {
            s.name: _Worker(s, limits.get(s.name) or TokenBucket(0.0, 1, monotonic=monotonic))
            for s in sinks
        }
        self._last_prune = -1e18

    @property
    def sinks(self) -> list[str]:
        """Names of the sinks this sender drives."""
        return list(self._workers)

    def stats(self) -> dict[str, SinkStats]:
        """Per-sink counters (live objects; read, do not modify)."""
        return {name: w.stats for name, w in self._workers.items()}

    def wake(self, sink: str | None = None) -> None:
        """New rows were enqueued (for ``sink`` or all): look now."""
        for name, w in self._workers.items():
            if sink is None or name == sink:
                w.wake.set()

    def receiver_back(self, sink: str) -> None:
        """The receiver is reachable again: retry its backlog without waiting."""
        if sink in self._workers:
            self.outbox.reset_backoff(sink)
            self._workers[sink].wake.set()

    async def start(self) -> None:
        """Start the sinks and their workers."""
        for w in self._workers.values():
            await w.sink.start()
            w.task = asyncio.create_task(self._run(w), name=f"outbox-{w.sink.name}")

    async def close(self) -> None:
        """Stop the workers (pending rows stay for the next start) and the sinks."""
        for w in self._workers.values():
            if w.task is not None:
                w.task.cancel()
        for w in self._workers.values():
            if w.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await w.task
                w.task = None
            await w.sink.close()

    async def drain(self, within: float) -> bool:
        """Wait up to ``within`` seconds until nothing is pending for the running sinks."""
        deadline = self._mono() + within
        while self._mono() < deadline:
            stats = self.outbox.queue_stats()
            if not any(
                stats.get(n, QueueStats(0, None)).depth
                for n, w in self._workers.items()
                if not w.stats.disabled
            ):
                return True
            await asyncio.sleep(0.02)
        return False

    async def _sleep(self, w: _Worker, seconds: float) -> None:
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(w.wake.wait(), timeout=seconds)

    async def _run(self, w: _Worker) -> None:
        name = w.sink.name
        while True:
            try:
                delay = await self._step(w)
            except asyncio.CancelledError:
                raise
            except (sqlite3.Error, StoreError) as exc:
                # A full or locked disk degrades delivery; it must not end the worker.
                log.error("outbox_database_error", sink=name, error=str(exc))
                delay = min(self.policy.backoff_max, 5.0)
            except Exception as exc:  # noqa: BLE001 - a bug must not silently stop paging
                log.error("outbox_worker_error", sink=name, error=f"{type(exc).__name__}: {exc}")
                delay = self.policy.backoff_max
            if w.stats.disabled:
                return
            await self._sleep(w, delay)

    async def _step(self, w: _Worker) -> float:
        """One round; returns how long to wait before the next one."""
        if w.unrecorded:
            # Delivered, but the database refused the write: record it before anything
            # else, so this process never sends it twice.
            self.outbox.mark_delivered(w.unrecorded)
            w.unrecorded = []
        now = self.outbox.clock()
        wait_refresh = await self._maybe_refresh(w)
        if now - self._last_prune > 3600.0:
            self._last_prune = now
            self.outbox.prune(self.policy.retention)
        w.wake.clear()
        if w.split_through:
            first = self.outbox.head(w.sink.name, 1)
            if not first or first[0].id > w.split_through:
                w.split_through = 0
        limit = 1 if w.split_through else w.sink.max_batch
        batch = self.outbox.head(w.sink.name, limit)
        if not batch:
            w.split_through = 0
            return min(wait_refresh, 3600.0)
        expired = [d for d in batch if now - d.created_at > self.policy.max_age]
        if expired:
            self._dead(w, expired, "older than max_age")
            return 0.0
        corrupt = [d for d in batch if not _well_formed(d)]
        if corrupt:
            # Retrying cannot repair a row someone edited or a disk mangled.
            self._dead(w, corrupt, "corrupt payload (not an event envelope)")
            return 0.0
        due = batch[0].next_attempt_at
        if due > now + self.policy.backoff_max + self.policy.max_retry_after:
            due = now  # the wall clock went back: do not wait for a time that is far away
        if due > now:
            return min(due - now, wait_refresh)
        rate_wait = w.bucket.delay()
        if rate_wait > 0:
            return min(rate_wait, wait_refresh)
        w.bucket.take()
        await self._attempt(w, batch)
        return 0.0

    async def _attempt(self, w: _Worker, batch: Sequence[Delivery]) -> None:
        name = w.sink.name
        w.stats.attempted += len(batch)
        w.stats.requests += 1
        ids = [d.id for d in batch]
        try:
            async with asyncio.timeout(w.sink.timeout + 1.0):
                await w.sink.deliver(batch)
        except SinkError as exc:
            self._failed(w, batch, exc)
            return
        except TimeoutError:
            self._failed(w, batch, SinkError(f"timed out after {w.sink.timeout:g} s"))
            return
        except Exception as exc:  # noqa: BLE001 - a sink bug must not stop the other rows
            self._failed(w, batch, SinkError(f"{type(exc).__name__}: {exc}"))
            return
        w.stats.succeeded += len(batch)
        try:
            self.outbox.mark_delivered(ids)
        except (sqlite3.Error, StoreError):
            w.unrecorded = ids
            raise
        log.info(
            "delivered",
            sink=name,
            count=len(batch),
            event_id=batch[0].event_id,
            attempts=batch[0].attempts + 1,
        )

    def _failed(self, w: _Worker, batch: Sequence[Delivery], exc: SinkError) -> None:
        name = w.sink.name
        w.stats.failed += len(batch)
        if exc.gone:
            w.stats.disabled = True
            self.outbox.mark_failed([d.id for d in batch], str(exc), self.outbox.clock())
            log.error(
                "sink_disabled",
                sink=name,
                error=str(exc),
                pending_kept="rows stay pending until restart",
            )
            return
        if not exc.retryable:
            if len(batch) > 1:
                # One bad member must not sink the whole group: retry them one by one.
                w.split_through = batch[-1].id
                self.outbox.mark_failed([d.id for d in batch], str(exc), self.outbox.clock())
                return
            self._dead(w, batch, f"rejected: {exc}", attempted=True)
            return
        attempts = batch[0].attempts + 1
        if exc.auth and attempts >= self.policy.auth_retries:
            self._dead(w, batch, f"rejected after {attempts} attempts: {exc}", attempted=True)
            return
        if exc.retry_after is not None:
            ra = min(max(0.0, exc.retry_after), self.policy.max_retry_after)
            delay = ra + self._rng.uniform(0.0, min(1.0, 0.1 * ra))
        else:
            delay = self.policy.backoff(attempts, self._rng)
        self.outbox.mark_failed([d.id for d in batch], str(exc), self.outbox.clock() + delay)
        log.warning(
            "delivery_failed",
            sink=name,
            error=str(exc),
            attempts=attempts,
            retry_in=round(delay, 3),
            count=len(batch),
        )

    def _dead(
        self, w: _Worker, rows: Sequence[Delivery], reason: str, *, attempted: bool = False
    ) -> None:
        w.stats.dead += len(rows)
        for d in rows:
            full = reason if d.last_error is None else f"{reason} (last error: {d.last_error})"
            self.outbox.mark_dead([d.id], full, attempted=attempted)
            log.error(
                "delivery_dead_lettered",
                sink=w.sink.name,
                event_id=d.event_id,
                incident=d.incident_key,
                transition=d.transition,
                attempts=d.attempts + (1 if attempted else 0),
                reason=full,
            )

    async def _maybe_refresh(self, w: _Worker) -> float:
        """Re-send firing incidents to sinks that need it; returns seconds to the next one."""
        sink = w.sink
        if not isinstance(sink, RefreshingSink):
            return 3600.0
        mono = self._mono()
        if w.next_refresh == 0.0:
            w.next_refresh = mono + sink.refresh_interval
        if mono < w.next_refresh:
            return w.next_refresh - mono
        w.next_refresh = mono + sink.refresh_interval
        firing = self.outbox.firing(sink.name, resolved_within=sink.resolved_resend)
        if firing:
            try:
                async with asyncio.timeout(sink.timeout + 1.0):
                    await sink.refresh(firing)
                w.stats.refreshes += 1
            except Exception as exc:  # noqa: BLE001 - a failed refresh is retried next interval
                log.warning("refresh_failed", sink=sink.name, error=str(exc), count=len(firing))
        return sink.refresh_interval
