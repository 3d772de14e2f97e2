"""The NIC collection cycle: sysfs counters and ethtool statistics into readings.

Two ways through a cycle, with the same result. The full cycle reads port by
port and handles every case where it arises (a vanished port, a file that
went away, garbage, ``N/A``, a pinned counter, a bond, a failed ethtool
query). After a full cycle in which none of that happened, the collector keeps
a :class:`_Layout` of it; while nothing differs, the next cycles read every
port's held files in one pass and pick each family's values by position (the
steady state of a node: about half the cycle's CPU in ``bench/nic_cycle.py``).
Anything that differs - checked before any state moves - hands that cycle to
the full one.
"""

from __future__ import annotations

import asyncio
import fnmatch
import operator
import os
import resource
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import structlog

from fabricwatch.collector import CollectorEnv
from fabricwatch.counters import CounterState, CounterTracker
from fabricwatch.errors import CollectorError
from fabricwatch.readings import Batch, Columns, ColumnsBuilder, MetricSpec, Reading

from . import _ethtool as et
from ._ethtool import (
    SATURATED_VALUES,
    Classifier,
    DirEthtoolSource,
    EthtoolSource,
    IoctlEthtool,
)
from ._metrics import (
    CC_PRESENT,
    CNP_HANDLED,
    CNP_IGNORED,
    CNP_SENT,
    DROPS,
    ECN_MARKED,
    ETHTOOL_UP,
    GPU_LOCALITY,
    INFO,
    LINK_DOWN_EVENTS,
    LINK_DOWNED,
    LINK_PAUSE_FRAMES,
    LINK_PAUSE_RATIO,
    LINK_RATE,
    LINK_UP,
    METRICS,
    NAME,
    PAUSE_DURATION,
    PAUSE_FRAMES,
    PAUSE_RATIO,
    PHYS_STATE,
    PORT_ERRORS,
    PORT_STATE,
    PRIORITY_DISCARDS,
    PRIORITY_MARKED,
    READ_ERRORS,
    RX_BYTES,
    RX_PACKETS,
    SATURATED,
    STORM_EVENTS,
    TRANSPORT,
    TX_BYTES,
    TX_PACKETS,
    XMIT_WAIT_RATIO,
    XMIT_WAIT_TICKS,
)
from ._ratios import (
    RateSignals,
    pause_ratio_from_duration,
    pause_ratio_from_frames,
    xmit_wait_ratio,
)
from ._settings import NicSettings
from ._sysfs import (
    INFINIBAND,
    NOT_DIGITS,
    READ_SIZE,
    FdBudget,
    HeldPort,
    PortGoneError,
    PortReader,
    PortSample,
    discover_ports,
)
from ._topology import PortPlace, find_gpus, locality, netdev_speed_bps, nvml_bus_id, place_port

log = structlog.get_logger("fabricwatch.collectors.nic")

_SIMPLE_COUNTERS = (
    ("port_xmit_packets", TX_PACKETS),
    ("port_rcv_packets", RX_PACKETS),
    ("link_downed", LINK_DOWNED),
    ("port_xmit_wait", XMIT_WAIT_TICKS),
)
_PMA_ERRORS = (
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_rcv_constraint_errors",
    "port_xmit_constraint_errors",
    "VL15_dropped",
)
_CONGESTION = (
    # mlx5
    ("np_ecn_marked_roce_packets", ECN_MARKED),
    ("np_cnp_sent", CNP_SENT),
    ("rp_cnp_handled", CNP_HANDLED),
    ("rp_cnp_ignored", CNP_IGNORED),
    # irdma (Intel E810 RoCEv2)
    ("RxECNMrkd", ECN_MARKED),
    ("cnpSent", CNP_SENT),
    ("cnpHandled", CNP_HANDLED),
    ("cnpIgnored", CNP_IGNORED),
    # bnxt_re
    ("rx_ecn_marked_pkts", ECN_MARKED),
)
# Widths of the InfiniBand PMA PortCounters behind counters/* (drivers/infiniband/
# core/sysfs.c): they saturate at their maximum instead of wrapping.
_PMA_WIDTH = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}
_Q_COUNTERS = (
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "duplicate_request",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rx_icrc_encapsulated",
    "req_cqe_error",
    "resp_cqe_error",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "req_remote_invalid_request",
    "resp_local_length_error",
    # efa (AWS): no PFC or ECN; retransmissions and unresponsive peers
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
_HW_DROPS = ("rx_drops",)  # efa
_ACTIVE_STATES = (4, 5)


_PMA_MAX = tuple((name, (1 << width) - 1) for name, width in _PMA_WIDTH.items())
COUNTER_FILES = frozenset(
    (
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_discards",
        *(n for n, _ in _SIMPLE_COUNTERS),
        *_PMA_ERRORS,
        *_PMA_WIDTH,
        *(n for n, _ in _CONGESTION),
        *_Q_COUNTERS,
        *_HW_DROPS,
    )
)
"""The ``counters/`` and ``hw_counters/`` files the readings come from (see
:func:`_counter_plan`); the port readers open and read only these."""
_new_reading = tuple.__new__
"""``Reading(...)`` without NamedTuple's Python-level ``__new__`` (same object, all six fields)."""
_CAN_SATURATE = next(iter(SATURATED_VALUES))


@dataclass(frozen=True, slots=True)
class _CounterPlan:
    """Which readings one port's counter files give, for one set of file names.

    The files a port has change only on a rescan or a failed read, so the
    per-name decisions (family, labels, the one driver name per congestion
    signal) are made once per set of names instead of once per cycle.
    Groups are (family, labels, file names, multiplier): a family's
    consecutive entries, in emission order, extended into its columns at once.
    """

    names: tuple[tuple[str, ...], tuple[str, ...]]
    counters: tuple[_Group, ...]
    congestion: tuple[_Group, ...]
    hw: tuple[_Group, ...]
    cc_present: float


@dataclass(frozen=True, slots=True)
class _Stat:
    """One driver statistic of one bond member that the collector uses (see :class:`_StatPlan`)."""

    name: str
    key: et.StatKey
    kt: tuple[str, str, str]  # the key as a plain tuple: hashed in C
    can_saturate: bool
    ratio: int  # 0: none, 1: from a pause duration, 2: from pause frames
    slot: tuple[str, str, bool]  # (priority, direction, link-level)
    rate_key: str  # the RateSignals key: a str hashes once
    emit: tuple[str, tuple[str, ...], float] | None  # see _emission


@dataclass(frozen=True, slots=True)
class _StatPlan:
    """The statistics :meth:`Classifier.select_named` picks from one member's names.

    For a port of one member (no bond) its samples go to the columns as read:
    ``groups`` are the emitted statistics by family, in plan order within each
    family (family, labels, names, divisor), ``saturable`` the names whose value
    may mean "pinned", ``ratios`` the statistics that give a pause ratio.
    """

    names: tuple[str, ...]
    stats: tuple[_Stat, ...]
    groups: tuple[tuple[str, tuple[tuple[str, ...], ...], tuple[str, ...], float], ...] = ()
    saturable: tuple[str, ...] = ()
    ratios: tuple[_Stat, ...] = ()


@dataclass(slots=True)
class _Acc:
    """One counter family's samples of the cycle so far, across ports: handed to the
    store as :class:`Columns` (each port's series with its port's epoch)."""

    builder: ColumnsBuilder
    labels: list[tuple[str, ...]] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    epochs: list[int | None] = field(default_factory=list)

    def take(self) -> Columns:
        """This cycle's columns; the accumulator is empty again."""
        cols = self.builder.columns(self.labels, list(self.values), epochs=list(self.epochs))
        self.clear()
        return cols

    def clear(self) -> None:
        self.labels.clear()
        self.values.clear()
        self.epochs.clear()


@dataclass(slots=True)
class _Port:
    reader: PortReader
    place: PortPlace
    labels: tuple[str, str]
    epoch: int
    member_bps: dict[str, float]
    plan: _CounterPlan | None = None
    stat_plans: dict[str, _StatPlan] = field(default_factory=dict)
    emit: dict[tuple[str, str, str], tuple[str, tuple[str, ...], float] | None] = field(
        default_factory=dict
    )
    # What the latest full read of the port gave (see _steady): its sample, and the
    # statistics of its one netdev when they all went to the columns as read.
    sample: PortSample | None = None
    stats: dict[str, int] | None = None
    stat_names: tuple[str, ...] = ()  # the source's names tuple of ``stats``


class NicCollector:
    """Reads every RDMA port's sysfs counters and its netdevs' driver statistics.

    Args:
        settings: validated settings.
        env: roots and clocks.
        ethtool: statistics source override (tests pass a namespaced ioctl reader).
    """

    def __init__(
        self, settings: NicSettings, env: CollectorEnv, ethtool: EthtoolSource | None = None
    ) -> None:
        self._settings = settings
        self._env = env
        self._ib_dir = env.sys_root.joinpath(*INFINIBAND)
        self._ethtool_override = ethtool
        self._ethtool: EthtoolSource | None = None
        self._ports: dict[tuple[str, str], _Port] = {}
        self._epochs: dict[tuple[str, str], int] = {}
        self._gpus: list[tuple[str, PortPlace, str]] = []
        self._budget = FdBudget(0)
        self._signals = RateSignals(CounterTracker())
        self._classifier = Classifier()
        self._read_errors: dict[tuple[str, str], int] = {}
        self._next_rescan = float("-inf")
        self._lock = threading.Lock()
        self._devices_seen: frozenset[str] = frozenset()
        self._vanished: set[tuple[str, str]] = set()
        self._saturated_said: set[tuple[str, str, str]] = set()
        # Counter families by name: the cycle's samples across ports (see _Acc).
        self._accs: dict[str, _Acc] = {}
        # The steady layout of every port's files and readings, built after a cycle
        # read in full (see _steady); None until then and after anything changed.
        self._layout: _Layout | None = None
        self._one_pass = True  # False: every cycle reads port by port (tests compare)

    @property
    def name(self) -> str:
        """Registry name."""
        return NAME

    def metrics(self) -> Sequence[MetricSpec]:
        """Every family this collector may produce."""
        return METRICS

    async def start(self) -> None:
        """Pick the statistics source and size the descriptor budget. Never needs root."""
        s = self._settings
        if self._ethtool_override is not None:
            self._ethtool = self._ethtool_override
        elif s.ethtool_stats_dir is not None:
            if not s.ethtool_stats_dir.is_dir():
                msg = f"ethtool_stats_dir {s.ethtool_stats_dir} is not a directory"
                raise CollectorError(msg)
            self._ethtool = DirEthtoolSource(s.ethtool_stats_dir)
        elif s.ethtool:
            self._ethtool = IoctlEthtool()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        cap = (
            s.max_open_files if soft == resource.RLIM_INFINITY else min(s.max_open_files, soft // 2)
        )
        self._budget = FdBudget(cap)

    async def collect(self) -> Sequence[Reading]:
        """One cycle; the blocking reads run in a worker thread."""
        return await asyncio.to_thread(self.collect_sync)

    async def close(self) -> None:
        """Close every held file and the ethtool socket."""
        await asyncio.to_thread(self._close_sync)

    def _close_sync(self) -> None:
        # A read stuck in the kernel still owns the descriptors: closing them
        # under it could hand their numbers to someone else. Leak instead.
        if not self._lock.acquire(timeout=2.0):
            return
        try:
            self._layout = None
            for p in self._ports.values():
                p.reader.close()
            self._ports.clear()
            if self._ethtool is not None:
                self._ethtool.close()
        finally:
            self._lock.release()

    # -- the cycle -------------------------------------------------------------

    def collect_sync(self) -> Batch:
        """One collection cycle, synchronously (what :meth:`collect` runs in a thread)."""
        if not self._lock.acquire(blocking=False):
            msg = "previous NIC collection still running"
            raise CollectorError(msg)
        try:
            return self._cycle()
        finally:
            self._lock.release()

    def _wanted(self, device: str) -> bool:
        s = self._settings
        if s.devices and not any(fnmatch.fnmatchcase(device, p) for p in s.devices):
            return False
        return not any(fnmatch.fnmatchcase(device, p) for p in s.exclude)

    def _devices_changed(self) -> bool:
        try:
            now = frozenset(os.listdir(self._ib_dir))  # noqa: PTH208 - per cycle, names only
        except OSError:
            now = frozenset()
        changed = now != self._devices_seen
        self._devices_seen = now
        return changed

    def _rescan(self, now: float) -> None:
        self._layout = None
        root = self._env.sys_root
        refs = {(r.device, r.port): r for r in discover_ports(root) if self._wanted(r.device)}
        for key in list(self._ports):
            if key not in refs:
                self._drop(key)
        for key, ref in refs.items():
            place = place_port(root, ref.device, ref.port, ref.path)
            speeds = {m: bps for m in place.members if (bps := netdev_speed_bps(root, m))}
            port = self._ports.get(key)
            if port is None:
                epoch = self._epochs.get(key, -1) + 1
                self._epochs[key] = epoch
                port = _Port(
                    PortReader(ref, self._budget, COUNTER_FILES), place, key, epoch, speeds
                )
                self._ports[key] = port
                self._vanished.discard(key)
            else:
                port.place = place
                port.member_bps = speeds
                # A bond member that left must not keep its plan (or grow them forever).
                port.stat_plans = {m: sp for m, sp in port.stat_plans.items() if m in place.members}
        self._gpus = []
        if self._settings.gpu_locality:
            gpus = find_gpus(root)
            for port in self._ports.values():
                if port.place.pci is None:
                    continue
                for gpu in gpus:
                    self._gpus.append(
                        (nvml_bus_id(gpu.address), port.place, locality(port.place.pci, gpu))
                    )
        self._next_rescan = now + self._settings.rescan_interval

    def _drop(self, key: tuple[str, str]) -> None:
        self._layout = None
        port = self._ports.pop(key, None)
        if port is not None:
            port.reader.close()
            self._vanished.add(key)
        self._next_rescan = float("-inf")

    def _acc(self, family: str) -> _Acc:
        acc = self._accs.get(family)
        if acc is None:
            acc = self._accs[family] = _Acc(ColumnsBuilder(family))
        return acc

    def _cycle(self) -> Batch:
        now = self._env.monotonic()
        if self._devices_changed() or now >= self._next_rescan:
            self._rescan(now)
        layout = self._layout
        if layout is not None:
            batch = self._one_pass_cycle(layout)
            if batch is not None:
                return batch
            # Something moved (a file, a state, a value that is not a plain number):
            # this cycle reads port by port, which handles every such case.
            self._layout = None
        batch = self._full_cycle()
        if self._one_pass:
            self._layout = _steady(self, batch)
        return batch

    def _full_cycle(self) -> Batch:
        """The cycle port by port, each case handled where it arises."""
        for acc in self._accs.values():
            acc.clear()  # a cycle that raised half-way leaves nothing behind
        out: list[Reading] = []
        for key, port in list(self._ports.items()):
            try:
                sample = port.reader.read()
            except PortGoneError:
                self._drop(key)
                continue
            port.sample = sample
            port.stats = None
            ts = self._env.monotonic()
            self._port_readings(port, sample, ts, out)
            if self._ethtool is not None and port.place.members:
                self._ethtool_readings(port, sample, ts, out)
        out.extend(self._tail())
        self._signals.sweep()
        return Batch(out, [acc.take() for acc in self._accs.values() if acc.values])

    def _tail(self) -> list[Reading]:
        """The readings after the ports': vanished ports and GPU locality."""
        # A port that vanished (hot-unplug, driver reload) is a link that is down,
        # not a series that quietly goes stale while still saying "up".
        out = [Reading(LINK_UP.name, key, 0.0) for key in sorted(self._vanished)]
        for bus_id, place, where in self._gpus:
            if (place.device, place.port) in self._ports:
                out.append(
                    Reading(GPU_LOCALITY.name, (place.device, place.port, bus_id, where), 1.0)
                )
        return out

    def _one_pass_cycle(self, layout: _Layout) -> Batch | None:
        """The steady cycle: every file of every port in one pass, the values into their
        families' columns by position. None, with nothing changed, as soon as anything
        differs from ``layout`` (the caller then runs :meth:`_full_cycle`)."""
        unchanged = PortReader.unchanged
        for pl in layout.ports:
            if not unchanged(pl.held):
                return None
        pread = os.pread
        try:
            raws = [pread(fd, READ_SIZE, 0) for fd in layout.counter_fds]
            attrs = [pread(fd, READ_SIZE, 0) for fd in layout.attr_fds]
        except OSError:
            return None  # ENODEV (unplug), EIO...: the full cycle tells which
        if attrs != layout.attr_raws or NOT_DIGITS.search(b"".join(raws)) is not None:
            return None
        try:
            values = list(map(int, raws))  # int() strips what bytes.strip() strips
        except ValueError:
            return None  # empty, whitespace only, or two numbers in one file
        if layout.pma_tops and any(map(operator.eq, layout.pma(values), layout.pma_tops)):
            return None  # pinned at its maximum: flagged by the full cycle
        monotonic = self._env.monotonic
        stamps: list[float] = []
        ethtool = self._ethtool
        for pl in layout.ports:
            stamps.append(monotonic())
            if pl.member is None:
                continue
            assert ethtool is not None and pl.pick is not None
            try:
                names, stats = ethtool.vector(pl.member)
            except CollectorError:
                return None
            if names is not pl.names and names != pl.names:
                return None
            if pl.saturable is not None and not SATURATED_VALUES.isdisjoint(pl.saturable(stats)):
                return None
            values.extend(pl.pick(stats))
        # Nothing differs: from here on the cycle's state moves (rates).
        new, reading = _new_reading, Reading
        # The rate states of the layout's signals, updated in place: what
        # RateSignals.rate does for a series that has a state and a valid sample.
        settings = self._signals.settings
        tick_bytes = self._settings.xmit_wait_tick_bytes
        out: list[Reading] = []
        push = out.append
        for pl, ts in zip(layout.ports, stamps, strict=True):
            out.extend(pl.head)
            lab, ep = pl.labels, pl.epoch
            if pl.wait_state is not None:
                rate = pl.wait_state.update(values[pl.wait], ts, settings, 32, ep)
                if rate is not None:
                    ratio = xmit_wait_ratio(rate[0], pl.rate_bps, tick_bytes)
                    push(new(reading, (XMIT_WAIT_RATIO.name, lab, ratio, None, None, None)))
            out.extend(pl.middle)
            if pl.member is None:
                continue
            ratios: dict[tuple[str, str, bool], float] = {}
            has_duration: set[tuple[str, str, bool]] = set()
            for st, at, state in pl.ratios:
                rate = state.update(values[at], ts, settings, 64, ep)
                if rate is not None:
                    _add_ratio(st, rate[0], pl.link_bps, ratios, has_duration)
            _push_ratios(lab, ratios, push)
        out.extend(layout.tail)
        self._signals.fed(layout.signals)
        self._signals.sweep()
        mul, div = operator.mul, operator.truediv
        columns = []
        for name, labels, pick, mult, divisor, epochs in layout.columns:
            col = list(map(float, pick(values)))
            if mult != 1:
                col = list(map(mul, col, repeat(float(mult), len(col))))
            if divisor:
                col = list(map(div, col, repeat(divisor, len(col))))
            columns.append(Columns(name, labels, col, None, list(epochs)))
        return Batch(out, columns)

    def _port_readings(self, port: _Port, s: PortSample, ts: float, out: list[Reading]) -> None:
        lab = port.labels
        ep = port.epoch
        new, reading = _new_reading, Reading
        push = out.append
        out.extend(_head(port, s))
        c = s.counters
        pinned = {n for n, top in _PMA_MAX if c.get(n) == top}
        if pinned:
            self._flag_saturated(lab, pinned, out)
            c = {n: v for n, v in c.items() if n not in pinned}
        hw = s.hw_counters
        names = (tuple(c), tuple(hw))
        plan = port.plan
        if plan is None or plan.names != names:
            plan = port.plan = _counter_plan(lab, names)
        self._extend(plan.counters, c, ep)
        wait = c.get("port_xmit_wait")
        if wait is not None and s.rate_bps:
            rate = self._signals.rate((lab, "xmit_wait"), wait, ts, bits=32, epoch=ep)
            if rate is not None:
                ratio = xmit_wait_ratio(rate, s.rate_bps, self._settings.xmit_wait_tick_bytes)
                push(new(reading, (XMIT_WAIT_RATIO.name, lab, ratio, None, None, None)))
        self._extend(plan.congestion, hw, ep)
        push(new(reading, (CC_PRESENT.name, lab, plan.cc_present, None, None, None)))
        self._extend(plan.hw, hw, ep)
        if s.errors:
            total = self._read_errors.get(lab, 0) + len(s.errors)
            self._read_errors[lab] = total
        if lab in self._read_errors or s.errors:
            errors = float(self._read_errors.get(lab, 0))
            push(new(reading, (READ_ERRORS.name, lab, errors, None, None, None)))

    def _extend(self, groups: tuple[_Group, ...], values: dict[str, int], ep: int) -> None:
        """One port's counter files into their families' columns, group by group."""
        accs, acc = self._accs, self._acc
        for family, labels, names, mult in groups:
            a = accs.get(family) or acc(family)
            if len(names) == 1:
                a.labels.append(labels[0])
                a.values.append(float(values[names[0]] * mult))
                a.epochs.append(ep)
            else:
                a.labels.extend(labels)
                a.values.extend([float(values[n] * mult) for n in names])
                a.epochs.extend([ep] * len(names))

    def _flag_saturated(self, lab: tuple[str, str], names: set[str], out: list[Reading]) -> None:
        """Export and log (once per counter) counters pinned at their maximum."""
        for name in sorted(names):
            out.append(Reading(SATURATED.name, (*lab, name), 1.0))
            key = (*lab, name)
            if key not in self._saturated_said:
                self._saturated_said.add(key)
                log.warning(
                    "nic_counter_saturated",
                    device=lab[0],
                    port=lab[1],
                    counter=name,
                    effect="pinned at its maximum: its rate is unknown and it is not exported; "
                    "clear the port counters (perfquery -x -R) to re-arm it",
                )

    def _stat_plan(
        self, lab: tuple[str, str], member: str, stats: dict[str, int], names: tuple[str, ...]
    ) -> _StatPlan:
        chosen = []
        for key, _, name in self._classifier.select_named(stats):
            kind = key.kind
            if kind in (et.PAUSE_DURATION_US, et.LINK_PAUSE_DURATION_US):
                ratio = 1
            elif kind in (et.PAUSE_FRAMES, et.LINK_PAUSE_FRAMES):
                ratio = 2
            else:
                ratio = 0
            kt = (kind, key.priority, key.qualifier)
            chosen.append(
                _Stat(
                    name,
                    key,
                    kt,
                    et.saturated(key, _CAN_SATURATE),
                    ratio,
                    (key.priority, key.qualifier, kind.startswith("link")),
                    "\0".join((*lab, member, *kt)),
                    _emission(lab, kt),
                )
            )
        by_family: dict[tuple[str, float], tuple[list[tuple[str, ...]], list[str]]] = {}
        for st in chosen:
            if st.emit is not None:
                family, labels, divisor = st.emit
                ls, ns = by_family.setdefault((family, divisor), ([], []))
                ls.append(labels)
                ns.append(st.name)
        return _StatPlan(
            names,
            tuple(chosen),
            tuple((f, tuple(ls), tuple(ns), d) for (f, d), (ls, ns) in by_family.items()),
            tuple(st.name for st in chosen if st.can_saturate),
            tuple(st for st in chosen if st.ratio),
        )

    def _sum_readings(self, port: _Port, sums: dict[tuple[str, str, str], int]) -> None:
        """The bond-summed driver statistics as counter samples."""
        emit, lab, ep = port.emit, port.labels, port.epoch
        accs, acc = self._accs, self._acc
        for kt, value in sums.items():
            try:
                how = emit[kt]
            except KeyError:
                how = emit[kt] = _emission(lab, kt)
            if how is None:
                continue
            family, labels, divisor = how
            v = float(value)
            if divisor:
                v = v / divisor
            a = accs.get(family) or acc(family)
            a.labels.append(labels)
            a.values.append(v)
            a.epochs.append(ep)

    def _emit_groups(self, plan: _StatPlan, stats: dict[str, int], ep: int) -> None:
        """One member's statistics into their families' columns (none pinned), as the
        per-statistic loop of :meth:`_ethtool_readings` would add them."""
        accs, acc = self._accs, self._acc
        for family, labels, names, divisor in plan.groups:
            a = accs.get(family) or acc(family)
            a.labels.extend(labels)
            if divisor:
                a.values.extend([float(stats[n]) / divisor for n in names])
            else:
                a.values.extend([float(stats[n]) for n in names])
            a.epochs.extend([ep] * len(names))

    def _ethtool_readings(self, port: _Port, s: PortSample, ts: float, out: list[Reading]) -> None:
        assert self._ethtool is not None
        lab = port.labels
        ep = port.epoch
        members = port.place.members
        sums: dict[tuple[str, str, str], int] = {}
        ratios: dict[tuple[str, str, bool], float] = {}  # (priority, direction, link-level) -> max
        has_duration: set[tuple[str, str, bool]] = set()
        ok = True
        pinned: set[str] = set()
        skip: set[tuple[str, str, str]] = set()
        signal_rate = self._signals.rate
        # One member (no bond): its statistics are the sums, one per key (the plan
        # has one name per meaning), so they go to the columns as they are read.
        single = len(members) == 1
        accs, acc = self._accs, self._acc
        for member in members:
            try:
                vnames, vvalues = self._ethtool.vector(member)
            except CollectorError:
                ok = False
                break
            stats = dict(zip(vnames, vvalues, strict=True))
            names = tuple(stats)
            plan = port.stat_plans.get(member)
            if plan is None or plan.names != names:
                plan = port.stat_plans[member] = self._stat_plan(lab, member, stats, names)
            link_bps = port.member_bps.get(member) or s.rate_bps or 0.0
            if len(members) > 1 and member not in port.member_bps and s.rate_bps:
                link_bps = s.rate_bps / len(members)
            # The common case, one member and nothing pinned: every statistic goes to
            # its family's columns a family at a time; only the ratio ones need a loop.
            grouped = single and SATURATED_VALUES.isdisjoint([stats[n] for n in plan.saturable])
            if grouped:
                self._emit_groups(plan, stats, ep)
            for st in plan.ratios if grouped else plan.stats:
                value = stats[st.name]
                if not grouped:
                    if st.can_saturate and value in SATURATED_VALUES:
                        pinned.add(st.name)
                        skip.add(st.kt)
                        continue
                    if not single:
                        kt = st.kt
                        sums[kt] = sums.get(kt, 0) + value
                    elif (how := st.emit) is not None:
                        family, labels, divisor = how
                        a = accs.get(family) or acc(family)
                        a.labels.append(labels)
                        a.values.append(float(value) / divisor if divisor else float(value))
                        a.epochs.append(ep)
                    if not st.ratio:
                        continue
                rate = signal_rate(st.rate_key, value, ts, epoch=ep)
                if rate is not None:
                    _add_ratio(st, rate, link_bps, ratios, has_duration)
        new, reading = _new_reading, Reading
        push = out.append
        push(new(reading, (ETHTOOL_UP.name, lab, 1.0 if ok else 0.0, None, None, None)))
        if not ok:
            return  # a partial sum across bond members would look like a counter reset
        if pinned:
            self._flag_saturated(lab, pinned, out)
            for kt in skip:
                sums.pop(kt, None)  # a bond sum missing one member would look like a reset
        self._sum_readings(port, sums)
        _push_ratios(lab, ratios, push)
        if single and grouped and vnames == names:  # no name twice
            port.stats = stats  # every statistic went to the columns as read
            port.stat_names = vnames


def _push_ratios(
    lab: tuple[str, str],
    ratios: dict[tuple[str, str, bool], float],
    push: Callable[[Reading], None],
) -> None:
    """One port's pause ratios as readings, in slot order."""
    new, reading = _new_reading, Reading
    for (prio, direction, link_level), ratio in ratios.items():
        labels: tuple[str, ...]
        if link_level:
            family, labels = LINK_PAUSE_RATIO.name, (*lab, direction)
        else:
            family, labels = PAUSE_RATIO.name, (*lab, prio, direction)
        push(new(reading, (family, labels, ratio, None, None, None)))


def _head(port: _Port, s: PortSample) -> list[Reading]:
    """A port's first readings: identity, state and rate."""
    lab = port.labels
    place = port.place
    new, reading = _new_reading, Reading
    info = (*lab, place.netdev, place.pci_address, str(place.numa_node), s.link_layer)
    out = [new(reading, (INFO.name, info, 1.0, None, None, None))]
    if s.state is not None:
        state = s.state[0]
        out.append(new(reading, (PORT_STATE.name, lab, float(state), None, None, None)))
        up = 1.0 if state in _ACTIVE_STATES else 0.0
        out.append(new(reading, (LINK_UP.name, lab, up, None, None, None)))
    if s.phys_state is not None:
        out.append(new(reading, (PHYS_STATE.name, lab, float(s.phys_state[0]), None, None, None)))
    if s.rate_bps is not None:
        out.append(new(reading, (LINK_RATE.name, lab, s.rate_bps / 8.0, None, None, None)))
    return out


_Pick = Callable[[Any], tuple[int, ...]]
"""Items of a list or dict by position or name (see :func:`_picker`)."""


def _picker(keys: Sequence[int] | Sequence[str]) -> _Pick:
    """``keys``' items of a list or dict as a tuple, in C (``itemgetter`` gives a
    bare item for one key)."""
    if len(keys) == 1:
        one = operator.itemgetter(keys[0])
        return lambda x: (one(x),)
    if not keys:
        return lambda x: ()
    return operator.itemgetter(*keys)


@dataclass(frozen=True, slots=True)
class _PortLayout:
    """One port in a :class:`_Layout`: where its values sit in the cycle's value list
    and the readings that stay the same while nothing changes.

    ``head`` and ``middle`` are the readings before and after the transmit-wait
    ratio; ``wait`` is the position of ``port_xmit_wait`` (-1: no ratio);
    ``member`` the netdev whose statistics (``names``, the source's tuple) ``pick``
    extends the values with, by position,
    ``ratios`` the pause statistics with their positions; ``wait_state`` and the
    states in ``ratios`` are the signals' live rate states (see :class:`RateSignals`).
    """

    held: HeldPort
    labels: tuple[str, str]
    epoch: int
    head: tuple[Reading, ...]
    wait: int
    wait_state: CounterState | None
    rate_bps: float
    middle: tuple[Reading, ...]
    member: str | None
    names: tuple[str, ...]
    saturable: _Pick | None
    pick: _Pick | None
    ratios: tuple[tuple[_Stat, int, CounterState], ...]
    link_bps: float


@dataclass(frozen=True, slots=True)
class _Layout:
    """Every port's files and readings as one cycle read them in full, for
    :meth:`NicCollector._one_pass_cycle`.

    The cycle's values are every port's counter files (in ``counter_fds`` order),
    then each port's picked driver statistics. ``columns`` are (family, labels,
    pick, multiplier, divisor, epochs): each family's values picked by position.
    ``pma``/``pma_tops``: the saturating counters and their maxima.
    """

    ports: tuple[_PortLayout, ...]
    counter_fds: tuple[int, ...]
    attr_fds: tuple[int, ...]
    attr_raws: list[bytes]
    pma: _Pick
    pma_tops: tuple[int, ...]
    columns: tuple[
        tuple[
            str,
            tuple[tuple[str, ...], ...],
            _Pick,
            int,
            float,
            tuple[int | None, ...],
        ],
        ...,
    ]
    tail: tuple[Reading, ...]
    signals: tuple[Hashable, ...]  # the keys of the states the ports' layouts update


def _steady(c: NicCollector, batch: Batch) -> _Layout | None:
    """The layout of the cycle that just gave ``batch`` port by port, or None when that
    cycle was not a steady one: an error, a pinned counter, a file not held open, a
    value that is not a plain number, a bond, driver statistics that failed.

    The layout gives the same readings and columns from the same files; it is
    checked against ``batch`` before it is used.
    """
    counter_fds: list[int] = []
    attr_fds: list[int] = []
    attr_raws: list[bytes] = []
    values: list[int] = []  # this cycle's, in layout order: for the check against batch
    pma: list[int] = []
    tops: list[int] = []
    picked: list[tuple[_Port, dict[str, int], list[str]]] = []
    where: list[tuple[_Port, dict[str, int]]] = []  # each port's counter name -> position
    for port in c._ports.values():
        s = port.sample
        held = port.reader.held()
        plan = port.plan
        if s is None or s.errors or held is None or plan is None:
            return None
        if plan.names != held.counter_names or (tuple(s.counters), tuple(s.hw_counters)) != (
            held.counter_names
        ):
            return None  # a file without a value (N/A, pinned)
        base = len(values)
        pos = {n: base + i for i, n in enumerate((*held.counter_names[0], *held.counter_names[1]))}
        values.extend(s.counters.values())
        values.extend(s.hw_counters.values())
        for n, top in _PMA_MAX:
            if n in s.counters:
                pma.append(pos[n])
                tops.append(top)
        counter_fds.extend(held.counter_fds)
        attr_fds.extend(held.attr_fds)
        attr_raws.extend(held.attr_raws)
        where.append((port, pos))
    for port, _ in where:
        members = port.place.members
        if c._ethtool is not None and members and (len(members) != 1 or port.stats is None):
            return None
    for port, _ in where:
        if c._ethtool is None or not port.place.members:
            continue
        assert port.stats is not None
        sp = port.stat_plans[port.place.members[0]]
        need = list(
            dict.fromkeys([*(n for g in sp.groups for n in g[2]), *(st.name for st in sp.ratios)])
        )
        picked.append((port, port.stats, need))
    epos: dict[int, dict[str, int]] = {}
    for port, stats, need in picked:
        base = len(values)
        epos[id(port)] = {n: base + i for i, n in enumerate(need)}
        values.extend(stats[n] for n in need)
    # The families' columns, appended in the order the full cycle appends them.
    fam: dict[
        str, tuple[list[tuple[str, ...]], list[int], list[int | None], tuple[int, float]]
    ] = {}

    def add(
        family: str,
        labels: tuple[tuple[str, ...], ...],
        at: list[int],
        ep: int,
        how: tuple[int, float],
    ) -> bool:
        ls, ps, es, h = fam.setdefault(family, ([], [], [], how))
        if h != how:
            return False
        ls.extend(labels)
        ps.extend(at)
        es.extend([ep] * len(at))
        return True

    for port, pos in where:
        plan = port.plan
        assert plan is not None
        ep = port.epoch
        for groups in (plan.counters, plan.congestion, plan.hw):
            for family, labels, names, mult in groups:
                if not add(family, labels, [pos[n] for n in names], ep, (mult, 0.0)):
                    return None
        if id(port) in epos:
            sp = port.stat_plans[port.place.members[0]]
            ep_at = epos[id(port)]
            for family, labels, names, divisor in sp.groups:
                if not add(family, labels, [ep_at[n] for n in names], ep, (1, divisor)):
                    return None
    columns = []
    for col in batch.columns:
        got = fam.pop(col.name, None)
        if got is None or col.epoch is not None or col.ts is not None or col.source:
            return None
        ls, ps, es, (mult, divisor) = got
        pick = _picker(ps)
        vals = [float(v) for v in pick(values)]
        if mult != 1:
            vals = [v * float(mult) for v in vals]
        if divisor:
            vals = [v / divisor for v in vals]
        if tuple(ls) != col.labels or vals != list(col.values) or es != list(col.epochs or ()):
            return None  # not what the full cycle made: keep reading port by port
        columns.append((col.name, col.labels, pick, mult, divisor, tuple(es)))
    if fam:
        return None
    new, reading = _new_reading, Reading
    out_ports = []
    keys: list[Hashable] = []
    for port, pos in where:
        s = port.sample
        assert s is not None and port.plan is not None
        lab = port.labels
        held = port.reader.held()
        assert held is not None
        wait = pos.get("port_xmit_wait", -1) if s.rate_bps else -1
        wait_state = None
        if wait >= 0:
            wait_state = c._signals.state((lab, "xmit_wait"))
            if wait_state is None:
                return None
            keys.append((lab, "xmit_wait"))
        middle = [new(reading, (CC_PRESENT.name, lab, port.plan.cc_present, None, None, None))]
        if lab in c._read_errors:
            errors = float(c._read_errors[lab])
            middle.append(new(reading, (READ_ERRORS.name, lab, errors, None, None, None)))
        member = None
        stat_names: tuple[str, ...] = ()
        at: dict[str, int] = {}
        plan_of: _StatPlan | None = None
        ratios: tuple[tuple[_Stat, int, CounterState], ...] = ()
        link_bps = 0.0
        if id(port) in epos:
            member = port.place.members[0]
            plan_of = port.stat_plans[member]
            stat_names = port.stat_names
            at = {n: i for i, n in enumerate(stat_names)}
            middle.append(new(reading, (ETHTOOL_UP.name, lab, 1.0, None, None, None)))
            states = [c._signals.state(st.rate_key) for st in plan_of.ratios]
            if None in states:
                return None
            ratios = tuple(
                (st, epos[id(port)][st.name], state)
                for st, state in zip(plan_of.ratios, states, strict=True)
                if state is not None
            )
            keys.extend(st.rate_key for st in plan_of.ratios)
            link_bps = port.member_bps.get(member) or s.rate_bps or 0.0
        out_ports.append(
            _PortLayout(
                held,
                lab,
                port.epoch,
                tuple(_head(port, s)),
                wait,
                wait_state,
                s.rate_bps or 0.0,
                tuple(middle),
                member,
                stat_names,
                None
                if plan_of is None or not plan_of.saturable
                else _picker([at[n] for n in plan_of.saturable]),
                None if plan_of is None else _picker([at[n] for n in epos[id(port)]]),
                ratios,
                link_bps,
            )
        )
    return _Layout(
        tuple(out_ports),
        tuple(counter_fds),
        tuple(attr_fds),
        attr_raws,
        _picker(pma),
        tuple(tops),
        tuple(columns),
        tuple(c._tail()),
        tuple(keys),
    )


def _add_ratio(
    st: _Stat,
    rate: float,
    link_bps: float,
    ratios: dict[tuple[str, str, bool], float],
    has_duration: set[tuple[str, str, bool]],
) -> None:
    """Fold one pause statistic's rate into its slot's ratio: the largest from a pause
    duration where the slot has one, else the largest estimate from pause frames."""
    slot = st.slot
    if st.ratio == 1:
        ratio = pause_ratio_from_duration(rate)
        if slot not in has_duration:
            has_duration.add(slot)
            ratios.pop(slot, None)
    elif slot in has_duration or not link_bps:
        return
    else:
        ratio = pause_ratio_from_frames(rate, link_bps)
    ratios[slot] = max(ratios.get(slot, 0.0), ratio)


_Entry = tuple[str, str, tuple[str, ...], int]
_Group = tuple[str, tuple[tuple[str, ...], ...], tuple[str, ...], int]


def _groups(entries: Sequence[_Entry]) -> tuple[_Group, ...]:
    """Entries as runs of one family (and multiplier), in their order."""
    out: list[_Group] = []
    for name, family, labels, mult in entries:
        if out and out[-1][0] == family and out[-1][3] == mult:
            f, ls, ns, m = out[-1]
            out[-1] = (f, (*ls, labels), (*ns, name), m)
        else:
            out.append((family, (labels,), (name,), mult))
    return tuple(out)


def _counter_plan(
    lab: tuple[str, str], names: tuple[tuple[str, ...], tuple[str, ...]]
) -> _CounterPlan:
    """The readings a port with these counter and hw_counter files gives (emission order)."""
    cset, hset = set(names[0]), set(names[1])
    counters: list[_Entry] = []
    if "port_xmit_data" in cset:
        counters.append(("port_xmit_data", TX_BYTES.name, lab, 4))  # 4-byte words
    if "port_rcv_data" in cset:
        counters.append(("port_rcv_data", RX_BYTES.name, lab, 4))
    counters += [(n, spec.name, lab, 1) for n, spec in _SIMPLE_COUNTERS if n in cset]
    if "port_xmit_discards" in cset:
        counters.append(("port_xmit_discards", DROPS.name, (*lab, "port_xmit_discards"), 1))
    counters += [(n, PORT_ERRORS.name, (*lab, n), 1) for n in _PMA_ERRORS if n in cset]
    congestion: list[_Entry] = []
    done: set[str] = set()
    for n, spec in _CONGESTION:
        if spec.name not in done and n in hset:
            done.add(spec.name)  # one driver's name per signal
            congestion.append((n, spec.name, lab, 1))
    hw = [(n, TRANSPORT.name, (*lab, n), 1) for n in _Q_COUNTERS if n in hset]
    hw += [(n, DROPS.name, (*lab, n), 1) for n in _HW_DROPS if n in hset]
    return _CounterPlan(
        names, _groups(counters), _groups(congestion), _groups(hw), 1.0 if congestion else 0.0
    )


def _emission(
    lab: tuple[str, str], kt: tuple[str, str, str]
) -> tuple[str, tuple[str, ...], float] | None:
    """(family, labels, divisor) of the reading one summed driver statistic gives, or None."""
    kind, prio, qual = kt
    if kind == et.PAUSE_FRAMES:
        return PAUSE_FRAMES.name, (*lab, prio, qual), 0.0
    if kind == et.PAUSE_DURATION_US:
        return PAUSE_DURATION.name, (*lab, prio, qual), 1e6  # exported in seconds
    if kind == et.LINK_PAUSE_FRAMES:
        return LINK_PAUSE_FRAMES.name, (*lab, qual), 0.0
    if kind == et.STORM:
        return STORM_EVENTS.name, (*lab, qual), 0.0
    if kind == et.DROPS:
        return DROPS.name, (*lab, qual), 0.0
    if kind == et.PRIORITY_DISCARDS:
        return PRIORITY_DISCARDS.name, (*lab, prio, qual), 0.0
    if kind == et.PRIORITY_MARKED:
        return PRIORITY_MARKED.name, (*lab, prio), 0.0
    if kind == et.LINK_DOWN:
        return LINK_DOWN_EVENTS.name, lab, 0.0
    return None
