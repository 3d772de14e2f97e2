"""The GPU collector: NVML (or the simulator) -> readings, every cycle, never blocking the loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from fabricwatch.collector import CollectorEnv
from fabricwatch.errors import SourceAbsentError
from fabricwatch.readings import Batch, Columns, ColumnsBuilder, MetricKind, MetricSpec, Reading
from fabricwatch.signals import (
    GPU_HEALTHY,
    GPU_INFO,
    GPU_JOB,
    GPU_MEM,
    GPU_POWER,
    GPU_POWER_LIMIT,
    GPU_PROCS,
    GPU_SM,
    GPU_UTIL,
    GPU_XID,
    NVLINK_ERRORS,
    NVLINK_RX,
    NVLINK_TX,
    NVLINK_UP,
)

from ._facade import CallBusy, CallTimeout, NvmlFacade
from ._jobs import JobResolver
from ._metrics import (
    CLOCK_EVENT,
    CRITICAL_EVENTS,
    DRAM_ACTIVE,
    ECC_ERRORS,
    ENERGY,
    FABRIC_INFO,
    MEMORY_CLOCK,
    MEMORY_TEMPERATURE,
    MEMORY_TOTAL,
    MEMORY_UTILIZATION,
    METRICS,
    NAME,
    PCIE_REPLAYS,
    PCIE_RX,
    PCIE_TX,
    RECOVERY_ACTION,
    REMAP_FAILURE,
    REMAP_PENDING,
    REMAPPED_ROWS,
    SM_CLOCK,
    SM_OCCUPANCY,
    STALE,
    STUCK,
    TEMPERATURE,
    TENSOR_ACTIVE,
)
from ._settings import GpuSettings
from ._types import (
    EventKind,
    FabricInfo,
    GpuBackend,
    GpuEvent,
    GpuIdentity,
    GpuLost,
    GpuSample,
    NvmlUnavailable,
)

# nvmlClocksEventReason* bits -> label.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# Simple gauges: (spec, GpuSample attribute).
_GAUGES: tuple[tuple[MetricSpec, str], ...] = (
    (GPU_UTIL, "utilization"),
    (MEMORY_UTILIZATION, "memory_utilization"),
    (GPU_SM, "sm_active"),
    (SM_OCCUPANCY, "sm_occupancy"),
    (TENSOR_ACTIVE, "tensor_active"),
    (DRAM_ACTIVE, "dram_active"),
    (GPU_POWER, "power_watts"),
    (GPU_POWER_LIMIT, "power_limit_watts"),
    (SM_CLOCK, "sm_clock_hz"),
    (MEMORY_CLOCK, "memory_clock_hz"),
    (GPU_MEM, "memory_used_bytes"),
    (MEMORY_TOTAL, "memory_total_bytes"),
    (TEMPERATURE, "temperature_celsius"),
    (MEMORY_TEMPERATURE, "memory_temperature_celsius"),
    (REMAP_PENDING, "remap_pending"),
    (REMAP_FAILURE, "remap_failure"),
    (RECOVERY_ACTION, "recovery_action"),
)
_COUNTERS: tuple[tuple[MetricSpec, str], ...] = (
    (ENERGY, "energy_joules"),
    (PCIE_TX, "pcie_tx_bytes"),
    (PCIE_RX, "pcie_rx_bytes"),
    (PCIE_REPLAYS, "pcie_replays"),
)
_GAUGE_NAMES = tuple((spec.name, attr) for spec, attr in _GAUGES)
_COUNTER_NAMES = tuple((spec.name, attr) for spec, attr in _COUNTERS)
_GAUGE_GET = operator.attrgetter(*(attr for _, attr in _GAUGES))
_COUNTER_GET = operator.attrgetter(*(attr for _, attr in _COUNTERS))
"""Every simple gauge (counter) of a sample as one tuple, in ``_GAUGES`` (``_COUNTERS``) order."""
_PER_GPU = (
    GPU_INFO, GPU_HEALTHY, STALE, GPU_PROCS, CLOCK_EVENT, ECC_ERRORS, REMAPPED_ROWS,
    *(spec for spec, _ in _GAUGES), *(spec for spec, _ in _COUNTERS),
)  # fmt: skip
"""The families with a series per GPU (or per GPU and type): handed to the store as
columns, one per family and cycle, GPU by GPU in index order."""
_COUNTER_FAMILIES = frozenset(spec.name for spec in _PER_GPU if spec.kind is MetricKind.COUNTER)


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """What the collector currently knows about one GPU (for the engine and incidents).

    Attributes:
        identity: index, UUID, model, PCI bus ID.
        healthy: False once NVML reported the GPU lost.
        stale: True while its reads hang; ``sample`` is then the last good one.
        sample: the last good sample, if any.
        jobs: jobs of its compute processes (``slurm:123``...).
        fabric: last fabric registration read.
        age: seconds since the last good sample (None before the first).
    """

    identity: GpuIdentity
    healthy: bool
    stale: bool
    sample: GpuSample | None
    jobs: tuple[str, ...]
    fabric: FabricInfo | None
    age: float | None


@dataclass(slots=True)
class _Labels:
    """One GPU's label tuples, made once: the same tuple objects every cycle (no
    per-reading allocation, and the store's dict lookups match them by identity)."""

    gpu: tuple[str]
    clock_events: tuple[tuple[str, str], ...]  # in CLOCK_EVENT_REASONS order
    ecc: tuple[tuple[str, str], tuple[str, str]]
    remapped: tuple[tuple[str, str], tuple[str, str]]
    links: dict[int, tuple[tuple[str, str], dict[str, tuple[str, str, str]]]]
    # link -> (its error kinds in sample order, their labels in that order): the
    # error columns of a link extended in one call while its kinds stay the same.
    link_errors: dict[int, tuple[tuple[str, ...], list[tuple[str, str, str]]]]

    @classmethod
    def of(cls, gl: str) -> _Labels:
        return cls(
            (gl,),
            tuple((gl, reason) for _, reason in CLOCK_EVENT_REASONS),
            ((gl, "corrected"), (gl, "uncorrected")),
            ((gl, "correctable"), (gl, "uncorrectable")),
            {},
            {},
        )

    def link(self, gl: str, link: int) -> tuple[tuple[str, str], dict[str, tuple[str, str, str]]]:
        """(gpu, link) labels and the per-error-kind labels of one link."""
        got = self.links.get(link)
        if got is None:
            got = self.links[link] = ((gl, str(link)), {})
        return got


@dataclass(slots=True)
class _Gpu:
    identity: GpuIdentity
    label: str
    info: tuple[str, ...]
    labels: _Labels
    healthy: bool = True
    stale: bool = False
    sample: GpuSample | None = None
    last_ok: float | None = None
    retry_at: float = 0.0
    fabric: FabricInfo | None = None
    fabric_next: float = 0.0
    jobs: tuple[str, ...] = ()
    warned: bool = False


@dataclass(slots=True)
class _LinkColumns:
    """One cycle's NVLink samples of every GPU, family by family (labels, values)."""

    up_labels: list[tuple[str, ...]]
    up: list[float]
    tx_labels: list[tuple[str, ...]]
    tx: list[float]
    rx_labels: list[tuple[str, ...]]
    rx: list[float]
    err_labels: list[tuple[str, ...]]
    err: list[float]

    @classmethod
    def empty(cls) -> _LinkColumns:
        return cls([], [], [], [], [], [], [], [])


_CLOCK_MASKS = tuple(mask for mask, _ in CLOCK_EVENT_REASONS)


class _FamilyColumns:
    """One cycle's per-GPU families as columns (see ``_PER_GPU``).

    The simple gauges and counters of a good sample are read in one
    ``attrgetter`` call each and kept as a row per GPU; :meth:`take` turns the
    rows into one column per family (``zip``, in C), so no Python runs per value
    unless a GPU does not report one. The other families are added series by
    series.
    """

    __slots__ = ("_builders", "_labels", "_rows", "_values")

    def __init__(self) -> None:
        self._builders = {spec.name: ColumnsBuilder(spec.name) for spec in _PER_GPU}
        self._labels: dict[str, list[tuple[str, ...]]] = {spec.name: [] for spec in _PER_GPU}
        self._values: dict[str, list[float]] = {spec.name: [] for spec in _PER_GPU}
        self._rows: list[tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]] = []

    def add(self, name: str, labels: tuple[str, ...], value: float) -> None:
        """One series' sample."""
        self._labels[name].append(labels)
        self._values[name].append(value)

    def add_sample(self, labels: _Labels, s: GpuSample) -> None:
        """A good sample's per-GPU gauges and counters (a value None: no series this cycle)."""
        self._rows.append((labels.gpu, _GAUGE_GET(s), _COUNTER_GET(s)))
        ls, vs = self._labels, self._values
        if s.clock_event_reasons is not None:
            bits = s.clock_event_reasons
            ls[CLOCK_EVENT.name].extend(labels.clock_events)
            vs[CLOCK_EVENT.name].extend([1.0 if bits & mask else 0.0 for mask in _CLOCK_MASKS])
        remapped = (s.remapped_correctable, s.remapped_uncorrectable)
        pairs = (
            (ECC_ERRORS.name, labels.ecc, (s.ecc_corrected, s.ecc_uncorrected)),
            (REMAPPED_ROWS.name, labels.remapped, remapped),
        )
        for name, by_type, values in pairs:
            for type_labels, value in zip(by_type, values, strict=True):
                if value is not None:
                    ls[name].append(type_labels)
                    vs[name].append(value)

    def take(self, epoch: int) -> list[Columns]:
        """This cycle's columns (counters with ``epoch``); empty again for the next."""
        out: list[Columns] = []
        for name, values in self._values.items():
            if not values:
                continue
            labels = self._labels[name]
            family_epoch = epoch if name in _COUNTER_FAMILIES else None
            out.append(self._builders[name].columns(labels, values, family_epoch))
            labels.clear()
            self._values[name] = []
        rows, self._rows = self._rows, []
        if not rows:
            return out
        gpus = [row[0] for row in rows]
        for k, names, family_epoch in ((1, _GAUGE_NAMES, None), (2, _COUNTER_NAMES, epoch)):
            columns = zip(*[row[k] for row in rows], strict=True)  # every row: one value each
            for (name, _), column in zip(names, columns, strict=True):
                if None in column:
                    keep = [i for i, v in enumerate(column) if v is not None]
                    if not keep:
                        continue
                    labels = [gpus[i] for i in keep]
                    values = [float(column[i]) for i in keep]
                else:
                    labels, values = gpus, list(map(float, column))
                out.append(self._builders[name].columns(labels, values, family_epoch))
        return out


def _kind_labels(
    by_kind: dict[str, tuple[str, str, str]], ll: tuple[str, str], kind: str
) -> tuple[str, str, str]:
    """The (gpu, link, kind) labels of one link's error counter, made once."""
    kl = by_kind.get(kind)
    if kl is None:
        kl = by_kind[kind] = (*ll, kind)
    return kl


class _EventCounts:
    """Per-series event counters that first appear at 0, so the first event has a rate.

    A counter series born at 1 gives the rate tracker nothing to diff against;
    a new series is exported at 0 for one cycle and its events follow next cycle.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], float] = {}
        self.pending: dict[tuple[str, str], float] = {}

    def add(self, key: tuple[str, str]) -> None:
        if key in self.counts:
            self.counts[key] += 1
        else:
            self.pending[key] = self.pending.get(key, 0.0) + 1

    def readings(self, name: str, epoch: int) -> list[Reading]:
        out: list[Reading] = []
        for key in list(self.pending):
            if key in self.counts:
                self.counts[key] += self.pending.pop(key)
            else:
                self.counts[key] = 0.0
        for key, value in self.counts.items():
            out.append(Reading(name, key, value, epoch=epoch))
        return out


class GpuCollector:
    """Per-GPU activity, power, clocks, memory, PCIe, ECC, NVLink per link, XIDs, fabric, jobs.

    With no driver the collector still starts: it logs the reason once, raises
    :class:`SourceAbsentError` from :meth:`collect` (so ``fabricwatch_collector_up``
    reads 0) and retries initialisation every ``retry_interval`` seconds.
    """

    def __init__(self, settings: GpuSettings, env: CollectorEnv, backend: GpuBackend) -> None:
        self._settings = settings
        self._env = env
        self._backend = backend
        self._facade = NvmlFacade(backend, workers=settings.workers, timeout=settings.call_timeout)
        self._log = structlog.get_logger("fabricwatch.collectors.gpu").bind(collector=NAME)
        self._jobs = JobResolver(env.proc_root)
        self._gpus: list[_Gpu] = []
        self._present = False
        self._absent_reason = "not started"
        self._absent_logged = False
        self._next_init = 0.0
        self._epoch = 0
        self._xids = _EventCounts()
        self._critical = _EventCounts()
        self._recent: deque[GpuEvent] = deque(maxlen=256)
        self._event_errors: deque[str] = deque(maxlen=16)
        # The per-link families, the node's most numerous series, go to the store
        # as columns (one labels tuple and one value list per family and cycle).
        self._link_columns = tuple(
            ColumnsBuilder(spec.name) for spec in (NVLINK_UP, NVLINK_TX, NVLINK_RX, NVLINK_ERRORS)
        )
        self._families = _FamilyColumns()

    @property
    def name(self) -> str:
        """``gpu``."""
        return NAME

    @property
    def present(self) -> bool:
        """Whether NVML is initialised and GPUs were found."""
        return self._present

    @property
    def absent_reason(self) -> str:
        """Why NVML is not available ("" when present)."""
        return "" if self._present else self._absent_reason

    @property
    def facade(self) -> NvmlFacade:
        """The facade (thread and stuck-call counts, for checks and benchmarks)."""
        return self._facade

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return METRICS

    def state(self) -> tuple[GpuStatus, ...]:
        """Current knowledge per GPU (PIDs are in ``sample.pids``, never in labels)."""
        now = self._env.monotonic()
        return tuple(
            GpuStatus(
                g.identity,
                g.healthy,
                g.stale,
                g.sample,
                g.jobs,
                g.fabric,
                None if g.last_ok is None else now - g.last_ok,
            )
            for g in self._gpus
        )

    def recent_events(self) -> tuple[GpuEvent, ...]:
        """The last critical events (XIDs...) received, oldest first (bounded)."""
        return tuple(self._recent)

    def clique(self) -> str:
        """The node's ``nvidia.com/gpu.clique`` value: set only when every GPU agrees."""
        cliques = {g.fabric.clique if g.fabric else "" for g in self._gpus}
        if len(cliques) == 1:
            return cliques.pop()
        return ""

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Initialise NVML; absence is a state (logged once), not an error."""
        await self._try_init()

    async def close(self) -> None:
        """Stop the event thread, free NVML unless a thread is still stuck inside it."""
        await self._teardown()
        # Joins block: keep them off the event loop so shutdown stays responsive.
        if not await asyncio.to_thread(self._facade.close, 1.0):
            self._log.warning(
                "nvml_calls_still_running_at_close",
                stuck=self._facade.stuck,
                detail="skipping nvmlShutdown while a thread is inside NVML",
            )

    async def _teardown(self) -> None:
        was_present = self._present
        self._present = False
        if not await asyncio.to_thread(self._facade.stop_events, 2.0):
            self._log.warning("nvml_event_thread_still_running")
        if not was_present:
            return
        try:
            await self._facade.call("events", self._backend.close_events)
            await self._facade.call("init", self._backend.shutdown)
        except (CallBusy, CallTimeout):
            self._log.warning("nvml_shutdown_hung")
        except Exception as exc:  # noqa: BLE001 - shutdown is best effort
            self._log.warning("nvml_shutdown_failed", error=str(exc))

    def _set_absent(self, reason: str) -> None:
        self._present = False
        self._absent_reason = reason
        self._next_init = self._env.monotonic() + self._settings.retry_interval
        if not self._absent_logged:
            self._absent_logged = True
            self._log.warning(
                "nvml_absent",
                reason=reason,
                retry_seconds=self._settings.retry_interval,
                detail="GPU collector reports absent (collector_up 0) and retries",
            )
        else:
            self._log.debug("nvml_still_absent", reason=reason)

    async def _try_init(self) -> None:
        self._next_init = self._env.monotonic() + self._settings.retry_interval
        initialised = False
        try:
            await self._facade.call("init", self._backend.init)
            initialised = True
            identities = await self._facade.call("init", self._backend.devices)
        except NvmlUnavailable as exc:
            if initialised:
                await self._quiet_shutdown()
            self._set_absent(str(exc))
            return
        except CallTimeout:
            self._set_absent(
                f"NVML did not answer within {self._settings.call_timeout:g}s (driver hang?)"
            )
            return
        except CallBusy:
            self._set_absent("an earlier NVML initialisation is still hanging")
            return
        except Exception as exc:  # noqa: BLE001 - a broken library must not crash the daemon
            if initialised:
                await self._quiet_shutdown()
            self._set_absent(f"NVML initialisation failed: {exc!r}")
            return
        self._gpus = [
            _Gpu(
                ident,
                str(ident.index),
                (str(ident.index), ident.uuid, ident.model, ident.pci_bus_id),
                _Labels.of(str(ident.index)),
            )
            for ident in identities
        ]
        self._present = True
        self._epoch += 1
        self._absent_logged = False
        self._log.info(
            "nvml_ready",
            gpus=len(identities),
            models=sorted({i.model for i in identities}),
        )
        no_persistence = [i.index for i in identities if i.persistence_mode is False]
        if no_persistence:
            self._log.warning(
                "nvml_persistence_mode_off",
                gpus=no_persistence,
                detail="every NVML call may re-initialise the GPU; run nvidia-smi -pm 1",
            )
        if self._settings.events:
            await self._open_events()

    async def _quiet_shutdown(self) -> None:
        with contextlib.suppress(Exception):  # best effort after a failed init
            await self._facade.call("init", self._backend.shutdown)

    async def _open_events(self) -> None:
        try:
            ok = await self._facade.call("events", self._backend.open_events)
        except Exception as exc:  # noqa: BLE001 - events are optional
            self._log.warning("nvml_events_unavailable", error=str(exc))
            return
        if ok:
            self._facade.start_events(self._event_errors.append)
        else:
            self._log.warning("nvml_events_unavailable", error="no event type supported")

    # -- collection -----------------------------------------------------------------------

    async def collect(self) -> Sequence[Reading]:
        """One cycle: sample every GPU concurrently (bounded), drain events, build readings."""
        if not self._present:
            if self._env.monotonic() >= self._next_init and not self._facade.busy("init"):
                await self._try_init()
            if not self._present:
                raise SourceAbsentError(f"NVML not available: {self._absent_reason}")
        while self._event_errors:
            self._log.warning("nvml_event_watch_error", error=self._event_errors.popleft())
        now = self._env.monotonic()
        todo = [g for g in self._gpus if g.healthy or now >= g.retry_at]
        sample = self._backend.sample
        outcomes = await self._facade.call_each(
            [
                (
                    g.identity.index,
                    functools.partial(sample, g.identity.index, fabric=now >= g.fabric_next),
                )
                for g in todo
            ]
        )
        unavailable: NvmlUnavailable | None = None
        for g, (s, exc) in zip(todo, outcomes, strict=True):
            if exc is None:
                assert s is not None
                self._sampled(g, s, now)
            elif isinstance(exc, NvmlUnavailable):
                unavailable = unavailable or exc
            elif isinstance(exc, Exception):
                self._sample_failed(g, exc, now)
            else:
                raise exc
        if unavailable is not None:
            await self._teardown()
            self._set_absent(str(unavailable))
            raise SourceAbsentError(f"NVML not available: {unavailable}") from None
        for ev in self._facade.drain_events():
            self._on_event(ev)
        return self._readings()

    def _sample_failed(self, g: _Gpu, exc: Exception, now: float) -> None:
        """A GPU whose sample hung, was lost, or failed: keep its last values."""
        if isinstance(exc, (CallBusy, CallTimeout)):
            g.stale = True
            if not g.warned:
                g.warned = True
                self._log.warning(
                    "nvml_call_hung",
                    gpu=g.label,
                    timeout=self._settings.call_timeout,
                    detail="keeping last values and marking the GPU stale",
                )
        elif isinstance(exc, GpuLost):
            if g.healthy:
                self._log.error("gpu_lost", gpu=g.label, uuid=g.identity.uuid, error=str(exc))
            g.healthy = False
            g.stale = False
            g.retry_at = now + self._settings.lost_retry_interval
        else:  # garbage from the driver must not crash us
            g.stale = True
            self._log.warning("nvml_sample_failed", gpu=g.label, error=repr(exc))

    def _sampled(self, g: _Gpu, s: GpuSample, now: float) -> None:
        """A GPU's good sample: it is healthy and current again."""
        if not g.healthy:
            self._log.info("gpu_recovered", gpu=g.label, uuid=g.identity.uuid)
        if g.stale:
            self._log.info("nvml_call_recovered", gpu=g.label)
        g.healthy = True
        g.stale = False
        g.warned = False
        g.sample = s
        g.last_ok = now
        if s.fabric is not None:
            g.fabric = s.fabric
            g.fabric_next = now + self._settings.fabric_interval
        if self._settings.jobs and s.pids is not None:
            g.jobs = tuple(self._jobs.jobs(s.pids))

    def _on_event(self, ev: GpuEvent) -> None:
        self._recent.append(ev)
        gpu = str(ev.gpu) if ev.gpu >= 0 else "unknown"
        if ev.kind is EventKind.XID:
            self._xids.add((gpu, str(ev.code)))
        else:
            self._critical.add((gpu, ev.kind.value))
        self._log.warning("gpu_critical_event", gpu=gpu, kind=ev.kind.value, code=ev.code)

    def _readings(self) -> Batch:
        out: list[Reading] = []
        links = _LinkColumns.empty()
        fams = self._families
        epoch = self._epoch
        all_pids: list[int] = []
        info_name, healthy_name, stale_name = GPU_INFO.name, GPU_HEALTHY.name, STALE.name
        for g in self._gpus:
            gl = g.label
            lab = g.labels.gpu
            fams.add(info_name, g.info, 1.0)
            fams.add(healthy_name, lab, 1.0 if g.healthy else 0.0)
            fams.add(stale_name, lab, 1.0 if g.stale else 0.0)
            s = g.sample
            if g.fabric is not None:
                out.append(
                    Reading(FABRIC_INFO.name, (gl, g.fabric.clique, g.fabric.state.label), 1.0)
                )
            if not g.healthy or g.stale or s is None:
                # Last good values stay in the store; counters are not repeated, so a
                # hung read never looks like traffic dropping to zero.
                if s is not None and s.pids:
                    all_pids.extend(s.pids)
                continue
            fams.add_sample(g.labels, s)
            self._link_samples(links, g, s)
            if s.pids is not None:
                all_pids.extend(s.pids)
                fams.add(GPU_PROCS.name, lab, float(len(s.pids)))
            for job in g.jobs:
                out.append(Reading(GPU_JOB.name, (gl, job), 1.0))
        if self._settings.jobs:
            self._jobs.retain(all_pids)
        out.extend(self._xids.readings(GPU_XID.name, epoch))
        out.extend(self._critical.readings(CRITICAL_EVENTS.name, epoch))
        out.append(Reading(STUCK.name, (), float(self._facade.stuck)))
        up, tx, rx, err = self._link_columns
        columns = fams.take(epoch)
        columns += [
            up.columns(links.up_labels, links.up),
            tx.columns(links.tx_labels, links.tx, epoch),
            rx.columns(links.rx_labels, links.rx, epoch),
            err.columns(links.err_labels, links.err, epoch),
        ]
        return Batch(out, [c for c in columns if c.values])

    @staticmethod
    def _link_samples(links: _LinkColumns, g: _Gpu, s: GpuSample) -> None:
        # The per-link samples (18 links x 4+ per GPU) go into the link columns,
        # with the GPU's cached label tuples.
        labels = g.labels
        gl = g.label
        link_labels = labels.links
        up_l, up_v = links.up_labels.append, links.up.append
        tx_l, tx_v = links.tx_labels.append, links.tx.append
        rx_l, rx_v = links.rx_labels.append, links.rx.append
        err_ls, err_vs = links.err_labels.extend, links.err.extend
        link_errors = labels.link_errors
        for ln in s.links:
            got = link_labels.get(ln.link)
            ll, by_kind = got if got is not None else labels.link(gl, ln.link)
            if ln.up is not None:
                up_l(ll)
                up_v(1.0 if ln.up else 0.0)
            if ln.tx_bytes is not None:
                tx_l(ll)
                tx_v(ln.tx_bytes)
            if ln.rx_bytes is not None:
                rx_l(ll)
                rx_v(ln.rx_bytes)
            errors = ln.errors
            if not errors:
                continue
            kinds = tuple(errors)
            known = link_errors.get(ln.link)
            if known is None or known[0] != kinds:
                known = link_errors[ln.link] = (
                    kinds,
                    [_kind_labels(by_kind, ll, k) for k in kinds],
                )
            err_ls(known[1])
            err_vs(errors.values())
