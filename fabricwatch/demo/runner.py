"""Runs the demo: simulated node, the real daemon on it, the scenario driver, the view.

Everything lives in one temporary directory and one event loop (no child
processes); the directory, the SNMP agent's UDP port, the webhook receiver's
and the daemon's TCP ports are released whatever happens (Ctrl-C included).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from fabricwatch.clock import Clock, scaled_clock
from fabricwatch.config import Config, parse_config
from fabricwatch.daemon import Daemon
from fabricwatch.demo.node import SimulatedNode
from fabricwatch.demo.receiver import Page, WebhookReceiver, new_secret
from fabricwatch.demo.scenarios import (
    CKPT,
    GPUS,
    HEALTHY,
    NIC,
    NIC_PORT,
    PRIORITY,
    SWITCH,
    UPLINK,
    Scenario,
    Timing,
    Work,
)
from fabricwatch.demo.summary import Injected, judge, report
from fabricwatch.demo.view import GpuRow, Reporter, Status, incident_line
from fabricwatch.engine import signals as sig
from fabricwatch.errors import ExitCode, FabricwatchError
from fabricwatch.readings import MetricKind
from fabricwatch.store import SnapshotStore

STORAGE_BACKEND = "simulated"
STORAGE_NOTE = (
    "storage: simulated storage backend (diskstats written by the demo; a real slow "
    "write path needs root: throttled device, dm-delay or FUSE)"
)
STEP = 0.5
"""Simulated seconds between driver steps (condition updates, ground-truth accounting)."""
READY_TIMEOUT = 30.0
"""Real seconds the daemon may take to start and read every collector once."""


def alerting_wired() -> bool:
    """True once the daemon's config has an ``[alerting]`` section (webhook pages)."""
    return any(f.name == "alerting" for f in dataclasses.fields(Config))


def free_tcp_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """How to run the demo."""

    scenarios: Sequence[Scenario]
    speed: float = 10.0
    timing: Timing = field(default_factory=Timing)
    keep_running: bool = False
    summary_json: Path | None = None
    on_summary: Callable[[dict[str, Any]], None] | None = None
    """Called with the summary as soon as it exists (before ``keep_running`` holds the node)."""


@dataclass(slots=True)
class DemoResult:
    """The run's outcome: exit code and the summary document (None when it never ran)."""

    code: int
    summary: dict[str, Any] | None = None
    message: str = ""


class Demo:
    """One demo run. ``reporter`` gets events and status; see :mod:`fabricwatch.demo.view`."""

    def __init__(self, opts: DemoOptions, reporter: Reporter) -> None:
        self.opts = opts
        self.reporter = reporter
        self.clock: Clock = scaled_clock(opts.speed)
        self._t0 = self.clock.monotonic()
        self.injected: list[Injected] = []
        self.alerting = alerting_wired()
        self._known: dict[str, tuple[str, str, str, int]] = {}
        self._status = Status(speed=opts.speed, total=len(opts.scenarios))
        self.receiver: WebhookReceiver | None = None
        self.daemon: Daemon | None = None
        self.node: SimulatedNode | None = None
        self.root: Path | None = None

    # -- helpers ------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the demo started."""
        return self.clock.monotonic() - self._t0

    def _event(self, text: str) -> None:
        self.reporter.event(self.now(), text)

    def _on_page(self, page: Page) -> None:
        self._event(
            f"page     {page.transition:<8} [{page.severity}] {page.cause} on "
            f"{page.culprit or '-'} (webhook, signature verified)"
        )

    # -- the run ------------------------------------------------------------------

    async def run(self) -> DemoResult:
        """Set up, drive every scenario, judge, tear everything down."""
        root = Path(tempfile.mkdtemp(prefix="fabricwatch-demo-"))
        self.root = root
        daemon_task: asyncio.Task[int] | None = None
        try:
            node = self.node = SimulatedNode(root, self.clock)
            await node.start()
            key = new_secret(root / "webhook-secret")
            self.receiver = WebhookReceiver(key, self._on_page)
            await self.receiver.start()
            registry = node.registry()
            port = free_tcp_port()
            alerting = None
            if self.alerting:
                alerting = {
                    "sinks": [
                        {
                            "name": "demo-oncall",
                            "type": "webhook",
                            "url": self.receiver.url,
                            "secret_file": str(root / "webhook-secret"),
                            "min_severity": "info",
                        }
                    ]
                }
            doc = node.config_table(listen=f"127.0.0.1:{port}", alerting=alerting)
            for name in registry:
                doc["collectors"].setdefault(name, {"enabled": False})
            config = parse_config(doc, registry, source="fabricwatch demo")
            self.daemon = Daemon(config, registry, config_path=None, clock=self.clock)
            self._status.metrics_url = f"http://127.0.0.1:{port}/metrics"
            hook = self.receiver.url if self.alerting else "(alerting not wired)"
            self._status.webhook_url = hook
            self._event(f"simulated switch {SWITCH}: SNMP agent on udp 127.0.0.1:{node.snmp_port}")
            self._event(f"simulated GPUs: {GPUS} x H100 behind the NVML facade")
            self._event(f"simulated NIC {NIC}: sysfs tree under {node.sys_root}")
            self._event(STORAGE_NOTE)
            self._event(f"daemon: /metrics on {self._status.metrics_url}")
            if self.alerting:
                self._event(f"on-call webhook receiver on {self.receiver.url}")
            else:
                self._event("alerting is not wired into the daemon yet: no pages will be sent")
            daemon_task = asyncio.create_task(self.daemon.run(), name="daemon")
            if not await self._wait_ready(daemon_task):
                return DemoResult(ExitCode.CANNOT_START, message="the daemon did not start")
            self._event("daemon ready: collectors running, engine ticking every 1 s")
            watcher = asyncio.create_task(self._watch(), name="demo-watch")
            try:
                finished = await self._drive(daemon_task)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if not finished:
                return DemoResult(ExitCode.INTERRUPTED, message="interrupted")
            self._poll_incidents()
            api = f"http://127.0.0.1:{port}/api/v1/incidents?limit=1000"
            try:
                incidents = await fetch_incidents(api)
            except FabricwatchError as exc:
                self._event(f"the incident API failed ({exc}); reading the incident database")
                incidents = self.daemon.db.incidents() if self.daemon.db is not None else []
            pages = list(self.receiver.pages)
            verdicts, stray = judge(self.injected, incidents, pages, alerting=self.alerting)
            summary = report(
                verdicts,
                stray,
                incidents,
                pages,
                speed=self.opts.speed,
                tick=config.daemon.tick,
                storage_backend=STORAGE_BACKEND,
                alerting=self.alerting,
            )
            if self.opts.summary_json is not None:
                self.opts.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
            if self.opts.on_summary is not None:
                self.reporter.close()
                self.opts.on_summary(summary)
            if self.opts.keep_running and not daemon_task.done():
                self._event(
                    f"keep running: the node trains on; /metrics on {self._status.metrics_url}"
                    " (Ctrl-C to stop)"
                )
                await self._keep_running(daemon_task)
            return DemoResult(ExitCode.OK if summary["ok"] else ExitCode.FAILURE, summary)
        finally:
            await self._teardown(daemon_task)
            shutil.rmtree(root, ignore_errors=True)

    async def _wait_ready(self, daemon_task: asyncio.Task[int]) -> bool:
        d = self.daemon
        assert d is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if daemon_task.done():
                return False
            if d.engine is not None and d.supervisor.ready():
                return True
            await asyncio.sleep(0.05)
        return False

    async def _drive(self, daemon_task: asyncio.Task[int]) -> bool:
        """Run the timeline; False when the daemon stopped early (Ctrl-C)."""
        node = self.node
        assert node is not None
        t = self.opts.timing
        node.apply(HEALTHY)
        self._status.phase = "warm-up: the training job starts"
        self._event(f"training job slurm:4242 starts on GPUs 0-{GPUS - 1} (warm-up {t.warmup:g} s)")
        if not await self._hold(t.warmup, daemon_task):
            return False
        for i, sc in enumerate(self.opts.scenarios, 1):
            self._status.index = i
            self._status.scenario = sc.name
            self._status.title = sc.title
            inj = Injected(sc, start=self.clock.wall())
            self.injected.append(inj)
            self._event(f"scenario {sc.name}: {sc.title}. {sc.story}")
            if sc.fault is None:
                self._status.phase = "healthy"
                ok = await self._hold(t.healthy, daemon_task)
            else:
                ok = await self._fault(sc, inj, daemon_task)
                if ok:
                    self._status.phase = "recovery"
                    ok = await self._hold(t.settle, daemon_task)
            inj.end = self.clock.wall()
            if not ok:
                return False
        return await self._drain(daemon_task)

    async def _fault(self, sc: Scenario, inj: Injected, daemon_task: asyncio.Task[int]) -> bool:
        node = self.node
        assert node is not None
        duration = self.opts.timing.fault
        self._status.phase = f"fault: {sc.title}"
        start = self.clock.monotonic()
        inj.fault_start = self.clock.wall()
        self._event(f"inject   {sc.title} for {duration:.0f} s")
        for gpu, xid in sc.xids:
            node.inject_xid(gpu, xid)
        last = start
        while True:
            now = self.clock.monotonic()
            since = now - start
            if since >= duration:
                break
            cond = sc.condition(since)
            node.apply(cond)
            if daemon_task.done():
                return False
            await self.clock.sleep(min(STEP, duration - since))
            after = self.clock.monotonic()
            inj.gpu_seconds += (after - last) * GPUS * _lost_share(cond.work, cond.load)
            last = after
        node.apply(HEALTHY)
        inj.fault_end = self.clock.wall()
        self._event(f"clear    {sc.title}: the node is healthy again")
        return True

    async def _hold(self, seconds: float, daemon_task: asyncio.Task[int]) -> bool:
        """Let ``seconds`` of simulated time pass; False if the daemon stopped."""
        end = self.clock.monotonic() + seconds
        while (left := end - self.clock.monotonic()) > 0:
            if daemon_task.done():
                return False
            await self.clock.sleep(min(STEP, left))
        return not daemon_task.done()

    async def _drain(self, daemon_task: asyncio.Task[int]) -> bool:
        """Wait (bounded) until every incident resolved and its pages arrived."""
        d = self.daemon
        assert d is not None
        self._status.phase = "waiting for incidents to resolve"
        for _ in range(120):
            self._poll_incidents()
            open_now = d.engine.open_incidents() if d.engine is not None else []
            if not open_now and self._pages_settled():
                return True
            if not await self._hold(1.0, daemon_task):
                return False
        return True

    def _pages_settled(self) -> bool:
        if not self.alerting or self.receiver is None:
            return True
        paged = {(p.incident, p.transition) for p in self.receiver.pages}
        return all(
            (key, "opened") in paged and (state != "resolved" or (key, "resolved") in paged)
            for key, (state, _c, _k, _r) in self._known.items()
        )

    async def _keep_running(self, daemon_task: asyncio.Task[int]) -> None:
        self._status.phase = "healthy (keep running)"
        while not daemon_task.done():
            await self._hold(STEP, daemon_task)

    async def _watch(self) -> None:
        """Refresh the status and report incident transitions, a few times per second."""
        for n in itertools.count():
            self._poll_incidents()
            if n % 3 == 0:
                self._refresh_status()
                self.reporter.update(self._status)
            # Incidents every 0.1 s real (1 simulated second at x10), so their
            # lines appear when they open, not a poll later.
            await asyncio.sleep(0.1)

    def _poll_incidents(self) -> None:
        d = self.daemon
        if d is None or d.db is None:
            return
        try:
            docs = d.db.incidents(limit=200)
        except FabricwatchError:
            return
        for doc in reversed(docs):
            key = str(doc["key"])
            cur = (
                str(doc.get("state")),
                str(doc.get("cause")),
                str(doc.get("culprit", {}).get("key", "")),
                int(doc.get("revision", 0)),
            )
            old = self._known.get(key)
            self._known[key] = cur
            if old is None:
                self._event(incident_line("opened", doc))
                if cur[0] == "resolved":
                    self._event(incident_line("resolved", doc))
            elif old[0] != cur[0] and cur[0] == "resolved":
                self._event(incident_line("resolved", doc))
            elif old[1:3] != cur[1:3]:
                self._event(incident_line("updated", doc))
        self._status.open_incidents = [d for d in docs if d.get("state") == "open"]

    def _refresh_status(self) -> None:
        d = self.daemon
        st = self._status
        st.t = self.now()
        if self.receiver is not None:
            st.pages = len(self.receiver.pages)
        if d is None:
            return
        st.gpus = gpu_rows(d.store)
        st.uplink_pause = value(d.store, sig.SW_PFC_RATIO, (SWITCH, UPLINK, str(PRIORITY), "rx"))
        st.nic_pause = value(d.store, sig.NIC_PFC_RATIO, (NIC, NIC_PORT, str(PRIORITY), "rx"))
        st.ecn_rate = value(d.store, sig.NIC_ECN, (NIC, NIC_PORT))
        st.xmit_wait = value(d.store, sig.NIC_XMIT_WAIT, (NIC, NIC_PORT))
        st.nic_link_up = value(d.store, sig.NIC_LINK_UP, (NIC, NIC_PORT))
        st.uplink_up = value(d.store, sig.SW_PORT_UP, (SWITCH, UPLINK))
        st.nvlinks_down = sum(1 for s in d.store.family(sig.NVLINK_UP) if s.value < 0.5)
        st.write_latency = value(d.store, sig.ST_WRITE_LAT, (CKPT,))
        st.write_rate = value(d.store, sig.ST_WRITE_BYTES, (CKPT,))

    async def _teardown(self, daemon_task: asyncio.Task[int] | None) -> None:
        if daemon_task is not None:
            if self.daemon is not None and not daemon_task.done():
                self.daemon.request_stop()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(daemon_task), timeout=15)
            if not daemon_task.done():
                daemon_task.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await daemon_task
        if self.receiver is not None:
            await self.receiver.close()
        if self.node is not None:
            self.node.close()
        self.reporter.close()


async def fetch_incidents(url: str, wait: float = 10.0) -> list[dict[str, Any]]:
    """Every incident from a daemon's ``/api/v1/incidents``; FabricwatchError on any failure."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=wait)) as s,
            s.get(url) as resp,
        ):
            if resp.status != 200:
                msg = f"HTTP {resp.status} from {url}"
                raise FabricwatchError(msg)
            body = await resp.read()
    except TimeoutError:
        msg = f"no answer from {url} within {wait:g} s"
        raise FabricwatchError(msg) from None
    except aiohttp.ClientError as exc:
        msg = f"{url}: {type(exc).__name__}: {exc}"
        raise FabricwatchError(msg) from None
    try:
        doc = json.loads(body)
    except ValueError:
        msg = f"{url} answered something that is not JSON ({len(body)} bytes)"
        raise FabricwatchError(msg) from None
    if not isinstance(doc, dict) or doc.get("schema") != "fabricwatch.incidents/v1":
        msg = f"{url} answered JSON that is not a fabricwatch.incidents/v1 document"
        raise FabricwatchError(msg)
    incidents = doc.get("incidents")
    if not isinstance(incidents, list):
        msg = f"{url} answered JSON that is not a fabricwatch.incidents/v1 document"
        raise FabricwatchError(msg)
    if not all(isinstance(d, dict) and "key" in d for d in incidents):
        msg = f"{url}: an incident without a key"
        raise FabricwatchError(msg)
    return incidents


def _lost_share(work: Work, load: float) -> float:
    if work in (Work.HUNG, Work.WAIT):
        return 1.0
    if work is Work.SLOW:
        return 1.0 - load
    return 0.0


def value(store: SnapshotStore, name: str, labels: tuple[str, ...]) -> float | None:
    """A series' current value (a counter's per-second rate), None when absent."""
    s = store.get(name, labels)
    if s is None:
        return None
    if s.spec.kind is MetricKind.COUNTER:
        return None if s.rate is None else s.rate.per_second
    return s.value


def gpu_rows(store: SnapshotStore) -> list[GpuRow]:
    """Per GPU: SM activity, utilization, power and the cause it is stalled by."""
    stalled: dict[str, str] = {}
    for s in store.family("fabricwatch_gpu_stalled"):
        if s.value >= 0.5:
            stalled[s.labels[0]] = s.labels[1]
    rows = []
    for i in range(GPUS):
        g = str(i)
        rows.append(
            GpuRow(
                g,
                value(store, sig.GPU_SM, (g,)),
                value(store, sig.GPU_UTIL, (g,)),
                value(store, sig.GPU_POWER, (g,)),
                stalled.get(g, ""),
            )
        )
    return rows


def run_demo(opts: DemoOptions, reporter: Reporter) -> DemoResult:
    """Run the demo in a fresh event loop (Ctrl-C stops it cleanly)."""
    demo = Demo(opts, reporter)
    try:
        return asyncio.run(demo.run())
    except KeyboardInterrupt:
        return DemoResult(ExitCode.INTERRUPTED, message="interrupted")
