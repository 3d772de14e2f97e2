"""The node daemon: wires config, collectors, store, HTTP endpoint and systemd.

Lifecycle: load config -> bind HTTP -> start collectors (per startup policy)
-> wait for every collector's first attempt -> ``READY=1`` -> tick until
SIGTERM/SIGINT -> ``STOPPING=1`` -> close everything within the shutdown
timeout. SIGHUP validates the config file first and swaps only if it is valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import signal
from dataclasses import replace
from pathlib import Path

import structlog
from aiohttp import web

from fabricwatch.clock import Clock
from fabricwatch.collector import Collector, CollectorEnv, Registry
from fabricwatch.config import (
    Config,
    DaemonSettings,
    fallback_state_dir,
    load_config,
    split_listen,
)
from fabricwatch.counters import TrackerSettings
from fabricwatch.engine import signals as engine_signals
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import STATE_METRICS, IncidentDB
from fabricwatch.engine.incidents import IncidentTransition, to_json
from fabricwatch.engine.signals import ENGINE_FAMILIES
from fabricwatch.errors import (
    ConfigError,
    ExitCode,
    FabricwatchError,
    StateWriteError,
    StoreError,
)
from fabricwatch.logs import configure_logging
from fabricwatch.netaddrs import local_addresses
from fabricwatch.outputs.alerting import AlertingService, secrets_fingerprint
from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.outputs.jobreports import JobWorkBuffer
from fabricwatch.outputs.web import Route, WebServer
from fabricwatch.sdnotify import Notifier
from fabricwatch.settings import parse_duration
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import StartupFailedError, Supervisor, grid_time
from fabricwatch.webconfig import WebConfig, load_web_config

GC_YOUNG_THRESHOLD = 100_000
"""Net allocations between young collections once the daemon runs (CPython's
default: 700). What a cycle allocates (readings, rates, label tuples) is freed
by reference counting at the end of the cycle, so a young collection only
rescans the cycle's objects in flight. With the count above what one cycle has
in flight (a few thousand on a node, ~60 000 for a 512-port switch-mode poller)
no collection runs in a steady cycle: in ``bench/daemon_budget.py`` the
collector's CPU went from 0.5 ms/s (node) and 7 ms/s (512-port switch mode)
to none. Cyclic garbage, which is rare, waits at most this many allocations."""

_GPU_SIGNALS = frozenset(
    (
        engine_signals.GPU_SM,
        engine_signals.GPU_POWER,
        engine_signals.GPU_UTIL,
        engine_signals.GPU_HEALTHY,
    )
)
"""Families from which the engine learns that a GPU exists and works."""

log = structlog.get_logger("fabricwatch.daemon")


def _freeze_startup_heap() -> None:
    """Keep start-up objects (modules, config, collectors' tables), which live as long
    as the process, out of every later collection; young collections only every
    :data:`GC_YOUNG_THRESHOLD` allocations (the caller restores the thresholds)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def raise_open_file_limit(want: int = 65536) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit; return the new soft limit.

    Collectors keep sysfs counter files open between cycles (pread is ~8x
    cheaper than open/read/close); systemd's default soft limit of 1024 would
    cap that on nodes with many ports.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


def resolve_state_dir(settings: DaemonSettings, explicit: bool) -> Path:
    """The state directory to use, created if needed.

    The built-in default (``/var/lib/fabricwatch``) falls back to
    ``$XDG_STATE_HOME/fabricwatch`` when it cannot be created, so an
    unprivileged ``fabricwatch run`` works; an explicitly configured directory
    must be usable.
    """
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        if os.access(settings.state_dir, os.W_OK):
            return settings.state_dir
        problem = "not writable"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if explicit:
        msg = f"{problem}; create it or set daemon.state_dir to a writable directory"
        raise ConfigError(msg, key="daemon.state_dir")
    fallback = fallback_state_dir()
    try:
        fallback.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = (
            f"{settings.state_dir}: {problem}, and the fallback {fallback}: "
            f"{exc.strerror or exc}; set daemon.state_dir to a writable directory"
        )
        raise ConfigError(msg, key="daemon.state_dir") from None
    log.warning(
        "state_dir_fallback", wanted=str(settings.state_dir), reason=problem, using=str(fallback)
    )
    return fallback


class Daemon:
    """One node's fabricwatch pipeline."""

    def __init__(
        self,
        config: Config,
        registry: Registry,
        *,
        config_path: Path | None,
        web_config_path: Path | None = None,
        notifier: Notifier | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self._registry = registry
        self._config_path = config_path
        self._web_config_override = web_config_path
        self._notifier = notifier or Notifier()
        self.clock = clock or Clock()
        self._monotonic = self.clock.monotonic
        self._wall = self.clock.wall
        self._sleep = self.clock.sleep
        self.reload_status = ReloadStatus(successful=True, success_timestamp=self._wall())
        self.store = SnapshotStore(
            history=config.store.history,
            stale_after=config.store.stale_after,
            tracker=TrackerSettings(gap_after=config.store.gap_after),
            # Only the engine reads history; /metrics and MQTT read latest values.
            history_families=ENGINE_FAMILIES,
        )
        self.supervisor = self._new_supervisor(config)
        self._stop = asyncio.Event()
        self._heartbeat = self._monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self._web: WebServer | None = None
        self.env: CollectorEnv | None = None
        self.db: IncidentDB | None = None
        self.engine: Engine | None = None
        self.alerting: AlertingService | None = None
        self.jobwork: JobWorkBuffer | None = None
        self._secrets_fingerprint = ""

    # -- construction -------------------------------------------------------

    def _web_config(self, config: Config) -> WebConfig:
        path = self._web_config_override or (
            Path(config.web.config_file) if config.web.config_file else None
        )
        return load_web_config(path) if path is not None else WebConfig()

    def _new_supervisor(self, config: Config) -> Supervisor:
        return Supervisor(
            self.store, clock=self.clock, max_series=config.store.max_series_per_collector
        )

    def _collectors(self, config: Config, env: CollectorEnv) -> Supervisor:
        sup = self._new_supervisor(config)
        for name, settings in config.collectors.items():
            if not settings.enabled:
                continue
            collector: Collector = self._registry[name].build(settings, env)
            sup.add(collector, settings)
        # History feeds only the engine's evidence, and the engine opens
        # incidents only for GPUs it sees working: a poller without GPU work
        # signals (a whole switch in switch mode) keeps latest values only.
        gpu_fed = not _GPU_SIGNALS.isdisjoint(self.store.specs())
        self.store.set_history_families(
            ENGINE_FAMILIES if gpu_fed and self.engine is not None else ()
        )
        return sup

    # -- lifecycle ----------------------------------------------------------

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (or :meth:`request_stop`); return the exit code."""
        cfg = self.config
        raise_open_file_limit()
        state_dir = resolve_state_dir(cfg.daemon, explicit=self._state_dir_explicit())
        self.env = CollectorEnv(
            node=cfg.daemon.node_name(),
            proc_root=cfg.daemon.proc_root,
            sys_root=cfg.daemon.sys_root,
            state_dir=state_dir,
            monotonic=self._monotonic,
            wall=self._wall,
        )
        web_config = self._web_config(cfg)
        # Wired in the order data flows: the incident database and its outputs,
        # the engine recording into it, collectors feeding the store, /metrics.
        code = self._open_state(cfg, state_dir)
        if code is not None:
            return code
        if cfg.engine.enabled:
            self.engine = Engine(
                cfg.engine, self.store, self.env.node, self.db, tick=cfg.daemon.tick
            )
            self.store.register("engine", self.engine.metrics())
        self.supervisor = self._collectors(cfg, self.env)
        registry = build_registry(self.store, lambda: self.supervisor.states, self.reload_status)
        routes = [Route("/api/v1/incidents", self._api_incidents, "incidents (JSON)")]
        self._web = WebServer(registry, self._ready, web_config, routes)
        host, port = split_listen(cfg.web.listen)
        try:
            await self._web.start(host, port)
        except OSError as exc:
            log.error(
                "listen_failed",
                address=cfg.web.listen,
                error=exc.strerror,
                hint="another process uses the port; set web.listen",
            )
            return ExitCode.CANNOT_START
        log.info(
            "listening",
            url=f"{self._web.scheme}://{host}:{self._web.port}/metrics",
            node=self.env.node,
            state_dir=str(state_dir),
        )
        loop = asyncio.get_running_loop()
        gc_thresholds = gc.get_threshold()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload()))
        try:
            if self.alerting is not None:
                await self.alerting.start()
            else:
                self._tasks.append(asyncio.create_task(self._state_retry_loop(), name="state"))
            try:
                await self.supervisor.start()
            except StartupFailedError as exc:
                log.error("startup_failed", error=str(exc))
                return ExitCode.CANNOT_START
            await self._wait_first_attempts()
            _freeze_startup_heap()
            self._tasks.append(asyncio.create_task(self._tick_loop(), name="tick"))
            if self._notifier.watchdog_usec:
                self._tasks.append(asyncio.create_task(self._watchdog_loop(), name="watchdog"))
            self._notifier.ready()
            self._notifier.status("running")
            log.info("ready", collectors=[s.name for s in self.supervisor.states])
            await self._stop.wait()
        finally:
            self._notifier.stopping()
            await self._shutdown()
            gc.unfreeze()  # a daemon run inside a larger process (tests) leaves nothing pinned
            gc.set_threshold(*gc_thresholds)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        return ExitCode.OK

    def _open_state(self, cfg: Config, state_dir: Path) -> int | None:
        """Open the incident database and attach the outputs; an exit code if unusable.

        When the disk refuses writes now, monitoring runs anyway: transitions
        wait in memory and :meth:`_state_retry_loop` attaches the outputs later.
        """
        self.db = IncidentDB.in_state_dir(state_dir)
        self.store.register("state", STATE_METRICS)
        try:
            self.db.connect()
        except StateWriteError as exc:
            # The disk, not the file: monitor anyway (collectors, /metrics,
            # engine), keep transitions in memory and retry the store.
            log.error(
                "state_db_unavailable",
                error=str(exc),
                hint="monitoring runs; incidents are kept in memory and paged once the "
                "state directory accepts writes",
            )
            self.db.hold_writes(True)
        except FabricwatchError as exc:
            log.error("state_db_unusable", error=str(exc))
            return ExitCode.CANNOT_START
        else:
            code = self._build_alerting(cfg)
            if code is not None:
                self.db.close()
                return code
        return None

    def _build_alerting(self, cfg: Config) -> int | None:
        """Wire the outbox on the open database; an exit code if that fails."""
        assert self.db is not None and self.env is not None
        try:
            # Before the engine records anything: its transition hook puts every
            # delivery in the outbox in the same transaction as the incident.
            self.alerting = AlertingService(
                cfg.alerting,
                cfg.mqtt,
                self.db,
                node=self.env.node,
                cluster=cfg.daemon.cluster,
                summary=self._summary,
                clock=self._wall,
                monotonic=self._monotonic,
            )
        except StateWriteError as exc:
            # The outbox tables could not be written (disk full): wire later.
            log.error("state_db_unavailable", error=str(exc), component="outbox")
            self.db.hold_writes(True)
            return None
        except FabricwatchError as exc:
            log.error("alerting_unusable", error=str(exc))
            return ExitCode.USAGE if isinstance(exc, ConfigError) else ExitCode.CANNOT_START
        self._attach_outputs(self.alerting)
        self._secrets_fingerprint = secrets_fingerprint(cfg.alerting, cfg.mqtt)
        return None

    def _attach_outputs(self, alerting: AlertingService) -> None:
        """Hook ``alerting`` into the pipeline: the daemon's one place for it.

        A transition travels ``Engine.tick`` -> ``IncidentDB.record`` (one
        transaction) -> the transition hook installed here, ``alerting.router``,
        which enqueues one outbox row per routed sink inside that transaction
        and wakes the sender -> the sender's per-sink workers deliver. After
        the commit the tick loop logs the transition (:meth:`_on_transition`)
        and stores the alerting self metrics registered here. With ``[mqtt]
        jobwork`` each tick also hands the readings a job report needs to
        :attr:`jobwork`, and each report that window yields to
        ``alerting.jobwork`` for the fleet (:meth:`_jobwork_tick`); the buffer
        outlives a reload of the outputs.
        """
        assert self.db is not None and self.env is not None
        self.db.add_transition_hook(alerting.router)
        self.store.register("alerting", alerting.metrics())
        if alerting.jobwork is None:
            self.jobwork = None  # turned off by a reload: keep no readings
        elif self.jobwork is None:
            self.jobwork = JobWorkBuffer(
                self.env.node, addresses=local_addresses(self.env.proc_root)
            )

    async def _state_retry_loop(self) -> None:
        """Open the state database once the disk lets us, then wire alerting.

        Until then the engine's transitions wait in memory (writes held, so
        none is written before the outbox hook is installed).
        """
        assert self.db is not None
        delay = 1.0
        while True:
            await self._sleep(delay)
            try:
                self.db.connect()
                if self._build_alerting(self.config) is not None or self.alerting is None:
                    raise StoreError("alerting could not be wired (see the error above)")
            except StoreError as exc:
                self.db.write_errors += 1
                log.warning("state_db_retry", error=str(exc), retry_in=delay)
                delay = min(30.0, delay * 2)
                continue
            break
        assert self.alerting is not None
        await self.alerting.start()
        self.db.hold_writes(False)
        log.info("state_db_available", path=str(self.db.path), pending=self.db.pending)
        self._flush_state()

    def _flush_state(self) -> None:
        if self.db is None or not self.db.pending:
            return
        try:
            self.db.flush()
        except FabricwatchError as exc:
            log.error("state_flush_failed", error=str(exc))

    def _state_dir_explicit(self) -> bool:
        return self.config.daemon.state_dir != DaemonSettings().state_dir

    def request_stop(self) -> None:
        """Begin a graceful shutdown."""
        log.info("stopping")
        self._stop.set()

    def _ready(self) -> bool:
        return self.supervisor.ready()

    async def _wait_first_attempts(self) -> None:
        # READY=1 waits for each collector's first sample, bounded by its timeout.
        limit = max(
            (c.collection_timeout() for c in self.config.collectors.values() if c.enabled),
            default=0.0,
        )
        deadline = self._monotonic() + limit + 1.0
        while not self.supervisor.ready() and self._monotonic() < deadline:
            if self._stop.is_set():
                return
            await asyncio.sleep(0.02)

    async def _shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        timeout = self.config.daemon.shutdown_timeout
        try:
            await asyncio.wait_for(self.supervisor.stop(), timeout=timeout)
        except TimeoutError:
            log.error("shutdown_timeout", component="collectors", timeout=timeout)
        if self.alerting is not None:
            # Pending deliveries stay in the outbox for the next start.
            try:
                await asyncio.wait_for(self.alerting.close(), timeout=timeout)
            except TimeoutError:
                log.error("shutdown_timeout", component="alerting", timeout=timeout)
        if self._web is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._web.stop(), timeout=timeout)
        if self.db is not None:
            self.db.close()
        self._notifier.close()

    # -- periodic work --------------------------------------------------------

    async def _tick_loop(self) -> None:
        tick = self.config.daemon.tick
        # On the collectors' grid: their wake-ups serve the tick too.
        next_at = grid_time(self._monotonic(), tick)
        while True:
            # After the collections of this grid instant, not beside them.
            await self.supervisor.settled(next_at, next_at + tick / 2)
            now = self._monotonic()
            self.store.expire(now)
            self._flush_state()
            if self.engine is not None:
                self._engine_tick(self.engine, now)
            self._jobwork_tick()
            if self.db is not None:
                self.store.ingest("state", self.db.readings(), now)
            if self.alerting is not None:
                self.store.ingest("alerting", await self.alerting.collect(), now)
            self._heartbeat = now
            next_at += tick
            await self._sleep(max(0.0, next_at - self._monotonic()))

    def _engine_tick(self, engine: Engine, now: float) -> None:
        try:
            transitions = engine.tick(now, self._wall())
        except FabricwatchError as exc:
            # The database refused the write (disk full, file removed): the
            # engine keeps its state and retries the record on the next change.
            log.error("engine_tick_failed", error=str(exc))
            return
        self.store.ingest("engine", engine.readings(), now)
        for tr in transitions:
            self._on_transition(tr)

    def _jobwork_tick(self) -> None:
        """Buffer this tick's job readings; queue the report of a window that ended
        (never waits on the broker: the sender publishes in the background)."""
        sender = self.alerting.jobwork if self.alerting is not None else None
        if sender is None or self.jobwork is None:
            return
        sender.submit(self.jobwork.take(self.store, self._monotonic(), self._wall()))

    def _on_transition(self, tr: IncidentTransition) -> None:
        """Log one transition the engine persisted.

        The outputs do not hang off here: the database's transition hook
        (:meth:`_attach_outputs`) already enqueued its deliveries in the
        transaction that recorded it.
        """
        doc = to_json(tr.incident)
        with structlog.contextvars.bound_contextvars(incident=doc["key"]):
            log.info(
                f"incident_{tr.kind}",
                cause=doc["cause"],
                culprit=doc["culprit"]["key"],
                gpus=doc["gpus"],
                confidence=doc["confidence"],
                summary=doc["summary"],
            )

    def _summary(self) -> dict[str, object]:
        """The periodic MQTT metrics summary (QoS 0): small and cheap."""
        stalled = [s.labels[0] for s in self.store.family("fabricwatch_gpu_stalled") if s.value]
        return {
            "collectors_up": {s.name: s.up for s in self.supervisor.states},
            "open_incidents": len(self.engine.open_incidents()) if self.engine else 0,
            "stalled_gpus": stalled,
        }

    async def _api_incidents(self, request: web.Request) -> web.Response:
        """``GET /api/v1/incidents?since=24h&state=open&limit=100``."""
        q = request.query
        try:
            since = self._wall() - parse_duration(q["since"]) if "since" in q else None
            limit = int(q.get("limit", "1000"))
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        state = q.get("state")
        if state not in (None, "open", "resolved"):
            return web.json_response({"error": "state must be open or resolved"}, status=400)
        if self.db is None:
            return web.json_response({"error": "not started"}, status=503)
        try:
            docs = self.db.incidents(since=since, state=state, limit=max(1, min(limit, 10_000)))
        except StoreError as exc:
            return web.json_response({"error": str(exc)}, status=503)
        return web.json_response({"schema": "fabricwatch.incidents/v1", "incidents": docs})

    def pipeline_alive(self) -> bool:
        """The tick loop ran recently and no collector loop has died."""
        usec = self._notifier.watchdog_usec or 0
        window = max(usec / 1e6, 2 * self.config.daemon.tick)
        return self._monotonic() - self._heartbeat < window and self.supervisor.loops_alive()

    async def _watchdog_loop(self) -> None:
        usec = self._notifier.watchdog_usec or 0
        period = usec / 2e6
        while True:
            if self.pipeline_alive():
                self._notifier.watchdog()
            else:
                log.error("pipeline_stalled", hint="watchdog pings withheld; systemd will restart")
            await asyncio.sleep(period)  # real time: systemd's watchdog is not scaled

    # -- reload -----------------------------------------------------------------

    async def reload(self) -> bool:
        """SIGHUP: validate the file, then swap; a bad file keeps the old config."""
        self._notifier.reloading()
        log.info("reloading", config=str(self._config_path or "(defaults)"))
        try:
            new = load_config(self._config_path, self._registry)
            web_config = self._web_config(new)
        except FabricwatchError as exc:
            self.reload_status.successful = False
            log.error("reload_failed", error=str(exc), hint="the previous config stays in force")
            self._notifier.ready()
            return False
        old = self.config
        configure_logging(new.log.level, new.log.format)
        if self._web is not None:
            self._web.set_web_config(web_config)
        for what in ("web.listen", "store", "daemon"):
            section = what.split(".")[0]
            if getattr(new, section) != getattr(old, section):
                log.warning("reload_needs_restart", section=what)
        if new.collectors != old.collectors and self.env is not None:
            await self.supervisor.stop()
            self.supervisor = self._collectors(new, self.env)
            await self._start_after_reload()
        await self._reload_alerting(old, new)
        self.config = replace(new, web=old.web, store=old.store, daemon=old.daemon)
        self.reload_status.successful = True
        self.reload_status.success_timestamp = self._wall()
        log.info("reloaded")
        self._notifier.ready()
        return True

    async def _reload_alerting(self, old: Config, new: Config) -> None:
        """Rebuild the sinks and the MQTT publisher when ``[alerting]``, ``[mqtt]`` or
        a secret file they name changed; the outbox (and what is pending in it) stays."""
        current = self.alerting
        if current is None or self.db is None or self.env is None:
            return  # not wired yet (state store unavailable): built from the new config later
        secrets = secrets_fingerprint(new.alerting, new.mqtt)
        if (
            new.alerting == old.alerting
            and new.mqtt == old.mqtt
            and secrets == self._secrets_fingerprint
        ):
            return
        try:
            rebuilt = AlertingService(
                new.alerting,
                new.mqtt,
                self.db,
                node=self.env.node,
                cluster=old.daemon.cluster,
                summary=self._summary,
                clock=self._wall,
                monotonic=self._monotonic,
            )
        except FabricwatchError as exc:
            self.reload_status.successful = False
            log.error(
                "reload_alerting_failed", error=str(exc), hint="the previous sinks stay in force"
            )
            return
        # No await between these two: every transition is routed by exactly one.
        self.db.remove_transition_hook(current.router)
        self._attach_outputs(rebuilt)
        self.alerting = rebuilt
        self._secrets_fingerprint = secrets
        await current.close()
        await rebuilt.start()
        log.info(
            "alerting_reloaded",
            sinks=rebuilt.sender.sinks,
            pending=sum(q.depth for q in rebuilt.outbox.queue_stats().values()),
        )

    async def _start_after_reload(self) -> None:
        try:
            await self.supervisor.start()
        except StartupFailedError as exc:
            # At reload time refusing to run would take monitoring down: keep
            # the other collectors and say loudly what failed.
            log.error("startup_failed_on_reload", error=str(exc))
