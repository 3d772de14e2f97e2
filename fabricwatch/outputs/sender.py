"""The outbox sender: one ordered worker per sink draining the outbox.

It groups a backlog into one request where the sink can (flood control), spaces
requests with a token bucket, retries network errors, timeouts, 5xx and 429 with
exponential backoff and jitter (a receiver's ``Retry-After`` wins), dead-letters
a row once it is older than ``max_age`` and resumes after a restart or ``kill -9``
from whatever the database says is still pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from fabricwatch.errors import StoreError
from fabricwatch.outputs.outbox import Delivery, Outbox, QueueStats
from fabricwatch.outputs.settings import AlertingSettings
from fabricwatch.outputs.sinks import Route, build_sinks
from fabricwatch.outputs.sinks.protocol import RefreshingSink, Sink, SinkError
from fabricwatch.outputs.token_bucket import TokenBucket

log = structlog.get_logger("fabricwatch.outbox")


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


@dataclass(frozen=True, slots=True)
class BuiltSender:
    """A sender over the configured sinks, and the routes that feed them."""

    sender: OutboxSender
    routes: list[Route]


def build_sender(
    outbox: Outbox,
    alerting: AlertingSettings,
    *,
    extra: Sequence[tuple[Sink, Route]] = (),
    monotonic: Callable[[], float] = time.monotonic,
    clock: Callable[[], float] = time.time,
) -> BuiltSender:
    """The sender of ``[alerting]`` (the node daemon's and the fleet aggregator's).

    ``extra`` adds sinks that are not in ``[[alerting.sinks]]`` (the node's MQTT
    publisher), each with its route. Raises ConfigError for a missing secret.
    """
    built = build_sinks(
        alerting.sinks if alerting.enabled else [], monotonic=monotonic, clock=clock
    )
    sinks: list[Sink] = [*built.sinks, *(sink for sink, _ in extra)]
    routes: list[Route] = [*built.routes, *(route for _, route in extra)]
    policy = RetryPolicy(
        max_age=alerting.max_age,
        backoff_initial=alerting.backoff_initial,
        backoff_max=alerting.backoff_max,
        max_retry_after=alerting.max_retry_after,
        retention=alerting.retention,
        auth_retries=alerting.auth_failure_retries,
    )
    sender = OutboxSender(outbox, sinks, policy, limits=built.limits, monotonic=monotonic)
    return BuiltSender(sender, routes)
