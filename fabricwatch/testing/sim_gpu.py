"""Simulated GPUs behind the same backend protocol as NVML, for tests and ``fabricwatch demo``.

A scenario drives it through a small API and a clock it owns::

    clock = ScenarioClock()
    gpus = SimulatedGPUs("H100", 8, clock)
    gpus.set_activity(None, Activity.BUSY)   # all GPUs training
    clock.advance(30)
    gpus.set_activity(None, Activity.HUNG)   # a collective hangs: util stays ~100 %
    gpus.drop_nvlink(3, 7)                   # link 7 of GPU 3 goes down
    gpus.inject_xid(3, 74)                   # NVLink XID

Counters integrate over the scenario clock, so rates come out exactly as
configured. Values are deterministic (a small periodic ripple, no randomness).
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fabricwatch.collectors.gpu._types import (
    EventKind,
    FabricInfo,
    FabricState,
    GpuEvent,
    GpuIdentity,
    GpuLost,
    GpuSample,
    LinkSample,
    NvmlUnavailable,
)

GIB = 1024**3
MIB = 1024**2


class Activity(enum.Enum):
    """What a simulated GPU is doing."""

    IDLE = "idle"
    """No job: nothing runs, power at idle, no traffic."""
    BUSY = "busy"
    """Training: high SM activity, power near the limit, NVLink and PCIe traffic."""
    HUNG = "hung"
    """A hung collective: a kernel spins, so ``utilization.gpu`` stays ~100 %,
    but SMs, power and NVLink traffic collapse (``stalls-and-anchors.md`` §5)."""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """Per-generation constants of a simulated GPU model.

    Attributes:
        name: the NVML product name.
        links: NVLinks per GPU.
        link_bytes_per_second: data bandwidth of one link, one direction.
        gpm: GPM (SM activity) supported (Hopper and newer).
        idle_watts / busy_watts / limit_watts: power figures.
        memory_bytes: framebuffer size.
        error_types: NVLink error counter types this generation reports.
        fabric: fabric registration the GPUs report.
    """

    name: str
    links: int
    link_bytes_per_second: float
    gpm: bool
    idle_watts: float
    busy_watts: float
    limit_watts: float
    memory_bytes: float
    error_types: tuple[str, ...]
    fabric: FabricInfo


PROFILES: dict[str, ModelProfile] = {
    # 12 x 25 GB/s (gpud_a100_nvidia-smi_nvlink_status.txt); no GPM; no fabric info.
    "A100": ModelProfile(
        "NVIDIA A100-SXM4-80GB",
        12,
        25e9,
        False,
        55.0,
        380.0,
        400.0,
        81920 * MIB,
        ("crc", "replay", "recovery"),
        FabricInfo(FabricState.NOT_SUPPORTED),
    ),
    # 18 x 26.562 GB/s; idle 71.97 W of 700 W and 81559 MiB from the 8x H100 capture.
    "H100": ModelProfile(
        "NVIDIA H100 80GB HBM3",
        18,
        26.562e9,
        True,
        72.0,
        650.0,
        700.0,
        81559 * MIB,
        ("crc", "replay", "recovery"),
        FabricInfo(FabricState.COMPLETED, "00000000-0000-0000-0000-000000000000", 0, True, 0),
    ),
    "H200": ModelProfile(
        "NVIDIA H200",
        18,
        26.562e9,
        True,
        80.0,
        650.0,
        700.0,
        143771 * MIB,
        ("crc", "replay", "recovery"),
        FabricInfo(FabricState.COMPLETED, "00000000-0000-0000-0000-000000000000", 0, True, 0),
    ),
    # NVLink5: 18 x 50 GB/s per direction; 161-163 unsupported, recovery events 213-215.
    "B200": ModelProfile(
        "NVIDIA B200",
        18,
        50e9,
        True,
        140.0,
        950.0,
        1000.0,
        183359 * MIB,
        ("crc", "recovery", "recovery_failed"),
        FabricInfo(FabricState.COMPLETED, "9c6f5af3-53bf-49b5-a436-b66766c413c3", 4026, True, 1),
    ),
}


class ScenarioClock:
    """A manual monotonic clock for scenarios and tests (seconds)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward; returns the new time."""
        if seconds < 0:
            msg = "time only moves forward"
            raise ValueError(msg)
        with self._lock:
            self._now += seconds
            return self._now


@dataclass(slots=True)
class _Gpu:
    activity: Activity = Activity.IDLE
    link_up: list[bool] = field(default_factory=list)
    tx: list[float] = field(default_factory=list)
    rx: list[float] = field(default_factory=list)
    errors: list[dict[str, float]] = field(default_factory=list)
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    pcie_replays: float = 120.0  # an idle real H100 shows 120 (nvidia-smi -q capture)
    energy_j: float = 0.0
    last: float | None = None
    lost: bool = False
    pids: tuple[int, ...] = ()
    memory_used: float = 0.0
    blocked: threading.Event | None = None


# Fractions of peak per activity: (util, sm_active, power share, link load, pcie B/s)
_ACTIVITY: dict[Activity, tuple[float, float, float, float, float]] = {
    Activity.IDLE: (0.0, 0.0, 0.0, 0.0, 0.6e6),
    Activity.BUSY: (0.98, 0.82, 1.0, 0.55, 2.0e9),
    Activity.HUNG: (1.0, 0.01, 0.08, 0.0, 0.6e6),
}


class SimulatedGPUs:
    """``count`` GPUs of one ``model`` (``A100``, ``H100``, ``H200``, ``B200``) on a scenario clock.

    Implements the backend protocol used by the GPU collector; the scenario
    methods are thread-safe and take effect at the next sample.
    """

    def __init__(
        self,
        model: str,
        count: int,
        clock: Callable[[], float],
        *,
        init_error: str | None = None,
    ) -> None:
        try:
            self.profile = PROFILES[model.upper()]
        except KeyError:
            msg = f"unknown GPU model {model!r} (known: {', '.join(PROFILES)})"
            raise ValueError(msg) from None
        if not 1 <= count <= 64:
            msg = "count must be 1..64"
            raise ValueError(msg)
        self.model = model.upper()
        self.count = count
        self._clock = clock
        self._init_error = init_error
        self._lock = threading.Lock()
        self._events: deque[GpuEvent] = deque(maxlen=1024)
        self._event_ready = threading.Condition(self._lock)
        self._events_open = False
        self._closed = threading.Event()
        n = self.profile.links
        self._gpus = [
            _Gpu(
                link_up=[True] * n,
                tx=[0.0] * n,
                rx=[0.0] * n,
                errors=[dict.fromkeys(self.profile.error_types, 0.0) for _ in range(n)],
            )
            for _ in range(count)
        ]

    # -- scenario API -----------------------------------------------------------------------

    def _targets(self, gpu: int | None) -> list[_Gpu]:
        if gpu is None:
            return list(self._gpus)
        if not 0 <= gpu < self.count:
            msg = f"no GPU {gpu} (0..{self.count - 1})"
            raise IndexError(msg)
        return [self._gpus[gpu]]

    def set_activity(
        self, gpu: int | None, activity: Activity, *, pids: Sequence[int] = ()
    ) -> None:
        """Set what one GPU (or all, ``gpu=None``) does; ``pids`` = its compute processes.

        BUSY and HUNG without explicit PIDs get a synthetic PID per GPU
        (``100000 + index``) so the job gate sees a process.
        """
        with self._lock:
            for g in self._targets(gpu):
                self._advance(g)
                g.activity = activity
                idx = self._gpus.index(g)
                if pids:
                    g.pids = tuple(sorted(set(pids)))
                elif activity is Activity.IDLE:
                    g.pids = ()
                elif not g.pids:
                    g.pids = (100000 + idx,)
                g.memory_used = 0.0 if not g.pids else 0.85 * self.profile.memory_bytes

    def drop_nvlink(self, gpu: int, link: int) -> None:
        """Take a link down: traffic on it stops, its recovery counter and CRC burst move."""
        with self._lock:
            g = self._targets(gpu)[0]
            self._check_link(link)
            self._advance(g)
            g.link_up[link] = False
            self._bump(g, link, "recovery", 1)
            self._bump(g, link, "recovery_failed", 1)
            self._bump(g, link, "crc", 250)
            self._bump(g, link, "replay", 40)

    def restore_nvlink(self, gpu: int, link: int) -> None:
        """Bring a dropped link back up."""
        with self._lock:
            g = self._targets(gpu)[0]
            self._check_link(link)
            self._advance(g)
            g.link_up[link] = True

    def add_link_errors(self, gpu: int, link: int, kind: str, n: int) -> None:
        """Add ``n`` errors of ``kind`` (``crc``, ``replay``, ``recovery``...) to one link."""
        with self._lock:
            g = self._targets(gpu)[0]
            self._check_link(link)
            if kind not in self.profile.error_types:
                msg = f"{self.model} does not report {kind!r} (has {self.profile.error_types})"
                raise ValueError(msg)
            self._bump(g, link, kind, n)

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Raise an XID critical-error event on one GPU."""
        self._targets(gpu)
        with self._lock:
            self._events.append(GpuEvent(gpu, EventKind.XID, xid, time.time()))
            self._event_ready.notify_all()

    def lose_gpu(self, gpu: int) -> None:
        """The GPU falls off the bus: its reads fail with ``GPU_IS_LOST`` (XID 79 is raised)."""
        with self._lock:
            self._targets(gpu)[0].lost = True
        self.inject_xid(gpu, 79)

    def block_calls(self, gpu: int) -> None:
        """Make reads of one GPU hang (like a GSP RPC timeout) until :meth:`unblock_calls`."""
        with self._lock:
            self._targets(gpu)[0].blocked = threading.Event()

    def unblock_calls(self, gpu: int) -> None:
        """Release reads hung by :meth:`block_calls`."""
        with self._lock:
            g = self._targets(gpu)[0]
            ev, g.blocked = g.blocked, None
        if ev is not None:
            ev.set()

    # -- internals ------------------------------------------------------------------------

    def _check_link(self, link: int) -> None:
        if not 0 <= link < self.profile.links:
            msg = f"{self.model} has links 0..{self.profile.links - 1}, not {link}"
            raise IndexError(msg)

    @staticmethod
    def _bump(g: _Gpu, link: int, kind: str, n: float) -> None:
        errs = g.errors[link]
        if kind in errs:
            errs[kind] += n

    def _advance(self, g: _Gpu) -> None:
        """Integrate counters up to now at the current activity (lock held)."""
        now = self._clock()
        if g.last is None:
            g.last = now
            return
        dt = max(0.0, now - g.last)
        g.last = now
        if dt == 0.0 or g.lost:
            return
        p = self.profile
        _util, _sm, power_share, load, pcie = _ACTIVITY[g.activity]
        for link in range(p.links):
            if g.link_up[link] and load > 0:
                moved = load * p.link_bytes_per_second * dt
                g.tx[link] += moved
                g.rx[link] += moved
        g.pcie_tx += pcie * dt
        g.pcie_rx += pcie * 1.1 * dt
        g.energy_j += self._power(g, power_share, now) * dt

    def _power(self, g: _Gpu, share: float, now: float) -> float:
        p = self.profile
        base = p.idle_watts + share * (p.busy_watts - p.idle_watts)
        return base * (1.0 + 0.02 * math.sin(now * 1.3 + self._gpus.index(g)))

    # -- backend protocol --------------------------------------------------------------------

    def init(self) -> None:
        """Succeeds unless constructed with ``init_error`` (simulating an absent driver)."""
        if self._init_error is not None:
            raise NvmlUnavailable(self._init_error)
        self._closed.clear()

    def shutdown(self) -> None:
        """Release hung readers and waiters."""
        self._closed.set()
        with self._lock:
            blocked = [g.blocked for g in self._gpus if g.blocked is not None]
            self._event_ready.notify_all()
        for ev in blocked:
            ev.set()

    def devices(self) -> Sequence[GpuIdentity]:
        """Identities with stable, model-specific UUIDs and PCI bus IDs."""
        out: list[GpuIdentity] = []
        for i in range(self.count):
            tag = f"{sum(map(ord, self.model)):04x}"
            uuid = f"GPU-{tag}{i:04x}-5157-4d00-8000-{i:012x}"
            bus = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
            out.append(GpuIdentity(i, uuid, self.profile.name, bus, True))
        return out

    def sample(self, index: int, *, fabric: bool) -> GpuSample:
        """Current values of one GPU at the scenario clock's time."""
        with self._lock:
            g = self._targets(index)[0]
            blocked = g.blocked
        if blocked is not None:
            # Bounded even if nobody unblocks: the thread must end eventually.
            blocked.wait(60.0)
        with self._lock:
            if g.lost:
                msg = f"GPU {index}: GPU is lost"
                raise GpuLost(msg)
            self._advance(g)
            now = g.last if g.last is not None else self._clock()
            p = self.profile
            util, sm, power_share, _load, _pcie = _ACTIVITY[g.activity]
            ripple = 1.0 + 0.01 * math.sin(now * 0.7 + index)
            links = tuple(
                LinkSample(
                    link,
                    g.link_up[link],
                    g.tx[link],
                    g.rx[link],
                    dict(g.errors[link]),
                )
                for link in range(p.links)
            )
            idle = g.activity is Activity.IDLE
            reasons = 0x1 if idle else 0x0  # GpuIdle
            return GpuSample(
                utilization=min(1.0, util * ripple),
                memory_utilization=min(1.0, util * 0.6 * ripple),
                sm_active=min(1.0, sm * ripple) if p.gpm else None,
                sm_occupancy=min(1.0, sm * 0.5 * ripple) if p.gpm else None,
                tensor_active=min(1.0, sm * 0.7 * ripple) if p.gpm else None,
                dram_active=min(1.0, sm * 0.4 * ripple) if p.gpm else None,
                power_watts=self._power(g, power_share, now),
                power_limit_watts=p.limit_watts,
                energy_joules=g.energy_j,
                sm_clock_hz=(345e6 if idle else 1980e6),
                memory_clock_hz=2619e6,
                clock_event_reasons=reasons,
                memory_used_bytes=g.memory_used,
                memory_total_bytes=p.memory_bytes,
                temperature_celsius=36.0 if idle else 68.0,
                memory_temperature_celsius=44.0 if idle else 71.0,
                pids=g.pids,
                pcie_tx_bytes=g.pcie_tx,
                pcie_rx_bytes=g.pcie_rx,
                pcie_replays=g.pcie_replays,
                ecc_corrected=0.0,
                ecc_uncorrected=0.0,
                remapped_correctable=0.0,
                remapped_uncorrectable=0.0,
                remap_pending=0.0,
                remap_failure=0.0,
                recovery_action=0.0,
                links=links,
                fabric=p.fabric if fabric else None,
            )

    def open_events(self) -> bool:
        """Always supported."""
        self._events_open = True
        return True

    def wait_events(self, timeout_ms: int) -> Sequence[GpuEvent]:
        """Block (real time) up to ``timeout_ms`` for injected events."""
        with self._event_ready:
            if not self._events and not self._closed.is_set():
                self._event_ready.wait(timeout_ms / 1000.0)
            out = list(self._events)
            self._events.clear()
        return out

    def close_events(self) -> None:
        """Stop delivering events."""
        self._events_open = False
        with self._lock:
            self._event_ready.notify_all()
