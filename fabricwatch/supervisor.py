"""Runs each enabled collector on its own interval, isolated from the others.

Each collector gets one asyncio task. A collection that raises or outlives its
timeout is counted as failed and the collector backs off exponentially (capped)
until it succeeds again; no collector can delay another's ticks. ``start()``
failures follow the collector's startup policy.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import structlog

from fabricwatch.clock import Clock
from fabricwatch.collector import (
    CollectionFailedError,
    Collector,
    CollectorSettings,
    StartupPolicy,
)
from fabricwatch.errors import CollectorError, SourceAbsentError
from fabricwatch.readings import Batch, Columns, Reading
from fabricwatch.store import SnapshotStore

log = structlog.get_logger("fabricwatch.supervisor")

MAX_BACKOFF = 300.0


@dataclass(slots=True)
class CollectorState:
    """What the supervisor knows about one collector (exported as self metrics)."""

    name: str
    up: bool = False
    started: bool = False
    first_attempt_done: bool = False
    last_duration: float = 0.0
    last_success_wall: float = 0.0
    last_attempt_mono: float = 0.0
    consecutive_failures: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    collections: int = 0
    rejected_readings: int = 0
    last_error: str = ""
    series_dropped: int = 0  # readings refused: they would pass the series limit
    series_limited: bool = False
    # The last failure was a DegradedError: the collector backs off per source
    # itself and must keep being collected at its interval to notice recovery.
    degraded: bool = False

    def fail(self, reason: str, error: str) -> None:
        self.up = False
        self.consecutive_failures += 1
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_error = error


class DegradedError(CollectorError):
    """Every source of a collector failed, but it still has readings (its own
    health series, e.g. per-target ``up`` = 0): they are stored, and the
    collector counts as down."""

    def __init__(self, message: str, readings: Sequence[Reading]) -> None:
        super().__init__(message)
        self.readings = readings


def backoff_delay(interval: float, failures: int, cap: float = MAX_BACKOFF) -> float:
    """Delay before the next attempt after ``failures`` consecutive failures.

    The first failure retries at the normal interval; each further one doubles
    it, up to ``max(cap, interval)``.
    """
    if failures <= 1:
        return interval
    return min(max(cap, interval), interval * math.pow(2, min(failures - 1, 30)))


def grid_time(t: float, interval: float) -> float:
    """The first multiple of ``interval`` on the monotonic clock at or after ``t``.

    Every periodic loop of the daemon (each collector after its first
    collection, the tick) plans on this grid, so loops of one interval wake
    at the same instants: one wake-up of the event loop then serves them
    all. A wake-up of its own per loop costs about as much CPU as a small
    collector's whole cycle (``bench/daemon_budget.py``: the node daemon's
    "rest" went from 2.3-2.5 to 1.1-1.5 ms/s when its five 1 s loops shared one),
    more than the worker threads lose to the GIL by running at once.
    """
    if interval <= 0:
        return t
    return math.ceil(t / interval) * interval


class StartupFailedError(CollectorError):
    """A collector with ``startup = "error"`` could not start."""


class Supervisor:
    """Owns the collector tasks. Use :meth:`start` then :meth:`stop`."""

    def __init__(
        self,
        store: SnapshotStore,
        *,
        clock: Clock | None = None,
        on_collect: Callable[[str], None] | None = None,
        max_series: int = 0,
    ) -> None:
        self._store = store
        self._max_series = max_series
        self._limits: dict[str, int] = {}  # per collector: max_series x its sources
        self._families: dict[str, tuple[str, ...]] = {}
        clock = clock or Clock()
        self._monotonic = clock.monotonic
        self._wall = clock.wall
        self._sleep = clock.sleep
        self._on_collect = on_collect
        self._entries: list[tuple[Collector, CollectorSettings]] = []
        self._states: dict[str, CollectorState] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Per collector: the planned time of the collection it is about to
        # make or is making (inf while it backs off or restarts), and an
        # event set whenever one ends (see settled()).
        self._due: dict[str, float] = {}
        self._collected = asyncio.Event()

    def add(self, collector: Collector, settings: CollectorSettings) -> None:
        """Register a collector before :meth:`start`."""
        self._entries.append((collector, settings))
        self._states[collector.name] = CollectorState(collector.name)
        # Each switch (or gNMI target) a collector polls adds its own allowance: the
        # limit guards against a runaway table, not against polling more switches
        # (four 512-port switches in switch mode make ~105 000 series).
        self._limits[collector.name] = self._max_series * max(1, len(settings.sources()))
        specs = tuple(collector.metrics())
        self._families[collector.name] = tuple(sp.name for sp in specs)
        self._store.register(collector.name, specs)

    @property
    def states(self) -> Sequence[CollectorState]:
        """Per-collector state, in registration order."""
        return tuple(self._states.values())

    def loops_alive(self) -> bool:
        """False if any collector loop ended (it only ends by a bug or cancellation)."""
        return not any(t.done() for t in self._tasks)

    def ready(self) -> bool:
        """True once every collector has completed its first attempt."""
        return all(s.first_attempt_done for s in self._states.values())

    def _pending(self, at: float) -> bool:
        """Whether a collector due at or before ``at`` has not finished that collection."""
        # Planned times accumulate ``interval`` steps, the tick's ``tick``
        # steps: the same grid instant may differ in the last bits.
        at += 1e-6 * max(1.0, abs(at))
        return any(due <= at for due in self._due.values())

    async def settled(self, at: float, limit: float) -> None:
        """Return once every collector due at or before ``at`` (monotonic,
        the grid instant) has finished that collection, or at ``limit``.

        The engine ticks on the collectors' grid: woken at the same instant,
        it would otherwise run while their collections are still in flight
        (NVML is sampled in worker threads) and decide on the previous
        round, a whole tick late. ``limit`` bounds the wait: a collector that
        hangs until its own timeout must not hold the tick back.
        """
        if not self._pending(at):
            return
        expired = False

        def expire(_: object) -> None:
            nonlocal expired
            expired = True
            self._collected.set()

        timer = asyncio.ensure_future(self._sleep(max(0.0, limit - self._monotonic())))
        timer.add_done_callback(expire)
        try:
            while not expired and self._pending(at):
                self._collected.clear()
                await self._collected.wait()
        finally:
            timer.cancel()

    async def start(self) -> None:
        """Start every collector per its startup policy, then its collection loop.

        Raises:
            StartupFailedError: a collector with policy ``error`` failed to start.
        """
        to_run: list[tuple[Collector, CollectorSettings, bool]] = []
        for collector, settings in self._entries:
            started = await self._try_start(collector, settings)
            if not started and settings.startup is StartupPolicy.ERROR:
                await self._close_all()
                state = self._states[collector.name]
                msg = (
                    f"collector {collector.name} failed to start: {state.last_error}; "
                    f"fix it, disable it, or set collectors.{collector.name}.startup = "
                    '"retry" or "ignore"'
                )
                raise StartupFailedError(msg)
            if not started and settings.startup is StartupPolicy.IGNORE:
                self._states[collector.name].first_attempt_done = True
                continue
            to_run.append((collector, settings, started))
        for collector, settings, started in to_run:
            task = asyncio.create_task(
                self._run(collector, settings, started), name=f"collector:{collector.name}"
            )
            self._tasks.append(task)

    async def stop(self) -> None:
        """Cancel the loops and close every collector."""
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        # A loop cancelled while it slept leaves its planned time: nothing is due now.
        self._due.clear()
        await self._close_all()

    async def _close_all(self) -> None:
        # Concurrently: shutdown takes as long as the slowest close, not the sum.
        await asyncio.gather(*(self._close(c, s) for c, s in self._entries))

    async def _close(self, collector: Collector, settings: CollectorSettings) -> None:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(
                collector.close(), timeout=max(1.0, settings.collection_timeout())
            )
        except Exception as exc:  # noqa: BLE001 - close must never stop shutdown
            log.warning(
                "collector_close_failed",
                collector=collector.name,
                error=str(exc) or type(exc).__name__,
            )
        took = time.monotonic() - t0
        if took > 1.0:
            log.warning("collector_close_slow", collector=collector.name, seconds=round(took, 2))

    async def _try_start(self, collector: Collector, settings: CollectorSettings) -> bool:
        state = self._states[collector.name]
        timeout = settings.collection_timeout()
        try:
            await asyncio.wait_for(collector.start(), timeout=timeout)
        except TimeoutError:
            state.fail("start_timeout", f"start() took longer than {timeout}s")
        except Exception as exc:  # noqa: BLE001 - isolation is the point
            state.fail("start", str(exc) or type(exc).__name__)
        else:
            state.started = True
            state.consecutive_failures = 0
            return True
        if state.consecutive_failures == 1:
            log.warning(
                "collector_start_failed",
                collector=collector.name,
                error=state.last_error,
                policy=settings.startup.value,
            )
        return False

    async def _run(self, collector: Collector, settings: CollectorSettings, started: bool) -> None:
        state = self._states[collector.name]
        structlog.contextvars.bind_contextvars(collector=collector.name)
        next_at = self._monotonic()
        first = True
        while True:
            if not started:
                self._due[collector.name] = math.inf
                state.first_attempt_done = True
                await self._sleep(backoff_delay(settings.interval, state.consecutive_failures))
                started = await self._try_start(collector, settings)
                if not started:
                    continue
                next_at = self._monotonic()
                first = True
            self._due[collector.name] = next_at
            delay = next_at - self._monotonic()
            if delay > 0:
                await self._sleep(delay)
            try:
                await self._collect_once(collector, settings, state)
            finally:
                self._due[collector.name] = math.inf
                self._collected.set()
            # Schedule from the planned time, not from "now", so a slow cycle
            # does not drift the grid; skip missed slots instead of bursting.
            failures = 0 if state.degraded else state.consecutive_failures
            step = backoff_delay(settings.interval, failures)
            next_at += step
            if first:
                next_at = grid_time(next_at, settings.interval)
            first = False
            now = self._monotonic()
            if next_at < now:
                next_at = now + (step - (now - next_at) % step if step > 0 else 0)

    async def _collect_once(
        self, collector: Collector, settings: CollectorSettings, state: CollectorState
    ) -> None:
        t0 = self._monotonic()
        state.last_attempt_mono = t0
        state.degraded = False
        readings: Sequence[Reading]
        try:
            # asyncio.timeout runs collect() in this task; wait_for would wrap
            # it in a new task every cycle (measurable at 1 Hz x collectors).
            async with asyncio.timeout(settings.collection_timeout()):
                readings = await collector.collect()
        except TimeoutError:
            timeout = settings.collection_timeout()
            state.fail("timeout", f"collection took longer than {timeout}s")
            self._log_failure(state)
        except CollectionFailedError as exc:
            # Down, but its readings say why (e.g. every switch target down).
            result = self._store.ingest(collector.name, exc.readings, self._monotonic())
            state.rejected_readings += result.rejected
            state.fail("error", str(exc))
            self._log_failure(state)
        except SourceAbsentError as exc:
            # Absent hardware is the normal state of many nodes: the collector
            # logs it once itself; no warning per retry.
            state.fail("absent", str(exc))
        except DegradedError as exc:
            kept = self._cap(collector.name, exc.readings, state)
            state.rejected_readings += self._store.ingest(
                collector.name, kept, self._monotonic()
            ).rejected
            state.fail("error", str(exc))
            state.degraded = True
            self._log_failure(state)
        except Exception as exc:  # noqa: BLE001 - one collector must not stop another
            state.fail("error", str(exc) or type(exc).__name__)
            self._log_failure(state)
        else:
            now = self._monotonic()
            readings = self._cap(collector.name, readings, state)
            result = self._store.ingest(collector.name, readings, now)
            state.rejected_readings += result.rejected
            if state.consecutive_failures:
                log.info(
                    "collector_recovered",
                    collector=collector.name,
                    after_failures=state.consecutive_failures,
                )
            state.up = True
            state.consecutive_failures = 0
            state.collections += 1
            state.last_success_wall = self._wall()
            if self._on_collect is not None:
                self._on_collect(collector.name)
        finally:
            state.last_duration = self._monotonic() - t0
            state.first_attempt_done = True

    def _cap(
        self, name: str, readings: Sequence[Reading], state: CollectorState
    ) -> Sequence[Reading]:
        """Drop readings that would create series beyond ``max_series`` a source for
        this collector (a 10k-row table in switch mode must not take the node's memory)."""
        limit = self._limits.get(name, self._max_series)
        if limit <= 0:
            return readings
        store = self._store
        if not state.series_limited and len(store) + len(readings) <= limit:
            return readings  # the whole store is under this collector's limit
        have = sum(store.family_size(f) for f in self._families.get(name, ()))
        if have + len(readings) <= limit:
            if state.series_limited and have < limit:
                state.series_limited = False
                log.info("series_limit_cleared", collector=name, series=have, limit=limit)
            return readings
        # Every cycle of a big switch-mode poller lands here: one lookup per
        # reading in its family's dict, a key built only for a series not there.
        admitted: set[tuple[str, tuple[str, ...]]] = set()
        dropped = 0
        families: dict[str, Mapping[tuple[str, ...], object]] = {}

        def admit(r_name: str, labels: tuple[str, ...]) -> bool:
            nonlocal have, dropped
            family = families.get(r_name)
            if family is None:
                family = families[r_name] = store.family_series(r_name)
            if labels not in family:
                key = (r_name, labels)
                if key not in admitted:
                    if have >= limit:
                        dropped += 1
                        return False
                    have += 1
                    admitted.add(key)
            return True

        singles = readings.readings if type(readings) is Batch else readings
        kept: list[Reading] = [r for r in singles if admit(r[0], r[1])]
        if type(readings) is Batch:
            # Columns stay columns (the store keeps their counter state), less
            # the series over the limit.
            columns = []
            for c in readings.columns:
                if all(map(store.family_series(c.name).__contains__, c.labels)):
                    columns.append(c)  # every series exists (admit() keeps each): no loop
                    continue
                keep = [i for i, labels in enumerate(c.labels) if admit(c.name, labels)]
                if len(keep) == len(c.labels):
                    columns.append(c)
                elif keep:
                    columns.append(_subset(c, keep))
            kept_batch: Sequence[Reading] = Batch(kept, columns)
        else:
            kept_batch = kept
        if dropped:
            state.series_dropped += dropped
            if not state.series_limited:
                state.series_limited = True
                log.error(
                    "series_limit_reached",
                    collector=name,
                    limit=limit,
                    dropped=dropped,
                    hint="new series of this collector are dropped; narrow what it polls "
                    "(targets, ports, tables) or raise store.max_series_per_collector",
                )
        return kept_batch

    @staticmethod
    def _log_failure(state: CollectorState) -> None:
        # Log the first failure and then only at powers of two, so a source
        # that stays down does not flood the journal.
        n = state.consecutive_failures
        if n & (n - 1) == 0:
            log.warning(
                "collector_failed",
                collector=state.name,
                error=state.last_error,
                consecutive_failures=n,
            )


def _subset(c: Columns, keep: list[int]) -> Columns:
    """``c`` with only its series at the indexes ``keep``."""
    epochs = c.epochs
    return replace(
        c,
        labels=tuple(c.labels[i] for i in keep),
        values=[c.values[i] for i in keep],
        epochs=None if epochs is None else [epochs[i] for i in keep],
    )
