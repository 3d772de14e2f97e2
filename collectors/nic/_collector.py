"""The NIC collection cycle: sysfs counters and ethtool statistics into readings."""

from __future__ import annotations

import asyncio
import fnmatch
import resource
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from fabricwatch.collector import CollectorEnv
from fabricwatch.counters import CounterTracker
from fabricwatch.errors import CollectorError
from fabricwatch.readings import MetricSpec, Reading

from . import _ethtool as et
from ._ethtool import Classifier, DirEthtoolSource, EthtoolSource, IoctlEthtool
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
from ._sysfs import FdBudget, PortGoneError, PortReader, PortSample, discover_ports
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


@dataclass(slots=True)
class _Port:
    reader: PortReader
    place: PortPlace
    labels: tuple[str, str]
    epoch: int
    member_bps: dict[str, float]


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

    @property
    def name(self) -> str:
        """Registry name."""
        return "nic"

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
            for p in self._ports.values():
                p.reader.close()
            self._ports.clear()
            if self._ethtool is not None:
                self._ethtool.close()
        finally:
            self._lock.release()

    # -- the cycle -------------------------------------------------------------

    def collect_sync(self) -> list[Reading]:
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
        base = self._env.sys_root / "class" / "infiniband"
        try:
            now = frozenset(p.name for p in base.iterdir())
        except OSError:
            now = frozenset()
        changed = now != self._devices_seen
        self._devices_seen = now
        return changed

    def _rescan(self, now: float) -> None:
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
                port = _Port(PortReader(ref, self._budget), place, key, epoch, speeds)
                self._ports[key] = port
                self._vanished.discard(key)
            else:
                port.place = place
                port.member_bps = speeds
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
        port = self._ports.pop(key, None)
        if port is not None:
            port.reader.close()
            self._vanished.add(key)
        self._next_rescan = float("-inf")

    def _cycle(self) -> list[Reading]:
        now = self._env.monotonic()
        if self._devices_changed() or now >= self._next_rescan:
            self._rescan(now)
        out: list[Reading] = []
        for key, port in list(self._ports.items()):
            try:
                sample = port.reader.read()
            except PortGoneError:
                self._drop(key)
                continue
            ts = self._env.monotonic()
            self._port_readings(port, sample, ts, out)
            if self._ethtool is not None and port.place.members:
                self._ethtool_readings(port, sample, ts, out)
        # A port that vanished (hot-unplug, driver reload) is a link that is down,
        # not a series that quietly goes stale while still saying "up".
        out.extend(Reading(LINK_UP.name, key, 0.0) for key in sorted(self._vanished))
        for bus_id, place, where in self._gpus:
            if (place.device, place.port) in self._ports:
                out.append(
                    Reading(GPU_LOCALITY.name, (place.device, place.port, bus_id, where), 1.0)
                )
        self._signals.sweep()
        return out

    def _port_readings(self, port: _Port, s: PortSample, ts: float, out: list[Reading]) -> None:
        lab = port.labels
        ep = port.epoch
        place = port.place
        out.append(
            Reading(
                INFO.name,
                (*lab, place.netdev, place.pci_address, str(place.numa_node), s.link_layer),
                1.0,
            )
        )
        if s.state is not None:
            out.append(Reading(PORT_STATE.name, lab, float(s.state[0])))
            out.append(Reading(LINK_UP.name, lab, 1.0 if s.state[0] in _ACTIVE_STATES else 0.0))
        if s.phys_state is not None:
            out.append(Reading(PHYS_STATE.name, lab, float(s.phys_state[0])))
        if s.rate_bps is not None:
            out.append(Reading(LINK_RATE.name, lab, s.rate_bps / 8.0))
        c = s.counters
        pinned = {n for n, w in _PMA_WIDTH.items() if c.get(n) == (1 << w) - 1}
        if pinned:
            self._flag_saturated(lab, pinned, out)
            c = {n: v for n, v in c.items() if n not in pinned}
        if (v := c.get("port_xmit_data")) is not None:
            out.append(Reading(TX_BYTES.name, lab, float(v * 4), epoch=ep))
        if (v := c.get("port_rcv_data")) is not None:
            out.append(Reading(RX_BYTES.name, lab, float(v * 4), epoch=ep))
        for name, spec in _SIMPLE_COUNTERS:
            if (v := c.get(name)) is not None:
                out.append(Reading(spec.name, lab, float(v), epoch=ep))
        if (v := c.get("port_xmit_discards")) is not None:
            out.append(Reading(DROPS.name, (*lab, "port_xmit_discards"), float(v), epoch=ep))
        for name in _PMA_ERRORS:
            if (v := c.get(name)) is not None:
                out.append(Reading(PORT_ERRORS.name, (*lab, name), float(v), epoch=ep))
        wait = c.get("port_xmit_wait")
        if wait is not None and s.rate_bps:
            rate = self._signals.rate((lab, "xmit_wait"), wait, ts, bits=32, epoch=ep)
            if rate is not None:
                ratio = xmit_wait_ratio(rate, s.rate_bps, self._settings.xmit_wait_tick_bytes)
                out.append(Reading(XMIT_WAIT_RATIO.name, lab, ratio))
        hw = s.hw_counters
        present = 0.0
        done: set[str] = set()
        for name, spec in _CONGESTION:
            if spec.name not in done and (v := hw.get(name)) is not None:
                present = 1.0
                done.add(spec.name)  # one driver's name per signal
                out.append(Reading(spec.name, lab, float(v), epoch=ep))
        out.append(Reading(CC_PRESENT.name, lab, present))
        for name in _Q_COUNTERS:
            if (v := hw.get(name)) is not None:
                out.append(Reading(TRANSPORT.name, (*lab, name), float(v), epoch=ep))
        for name in _HW_DROPS:
            if (v := hw.get(name)) is not None:
                out.append(Reading(DROPS.name, (*lab, name), float(v), epoch=ep))
        if s.errors:
            total = self._read_errors.get(lab, 0) + len(s.errors)
            self._read_errors[lab] = total
        if lab in self._read_errors or s.errors:
            out.append(Reading(READ_ERRORS.name, lab, float(self._read_errors.get(lab, 0))))

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

    def _ethtool_readings(self, port: _Port, s: PortSample, ts: float, out: list[Reading]) -> None:
        assert self._ethtool is not None
        lab = port.labels
        ep = port.epoch
        sums: dict[et.StatKey, int] = {}
        ratios: dict[tuple[str, str, bool], float] = {}  # (priority, direction, link-level) -> max
        has_duration: set[tuple[str, str, bool]] = set()
        ok = True
        pinned: set[str] = set()
        skip: set[et.StatKey] = set()
        for member in port.place.members:
            try:
                stats = self._ethtool.stats(member)
            except CollectorError:
                ok = False
                break
            selected = []
            for key, value, name in self._classifier.select_named(stats):
                if et.saturated(key, value):
                    pinned.add(name)
                    skip.add(key)
                else:
                    selected.append((key, value))
            link_bps = port.member_bps.get(member) or s.rate_bps or 0.0
            if len(port.place.members) > 1 and member not in port.member_bps and s.rate_bps:
                link_bps = s.rate_bps / len(port.place.members)
            for key, value in selected:
                sums[key] = sums.get(key, 0) + value
                dur = key.kind in (et.PAUSE_DURATION_US, et.LINK_PAUSE_DURATION_US)
                frames = key.kind in (et.PAUSE_FRAMES, et.LINK_PAUSE_FRAMES)
                if not (dur or frames):
                    continue
                slot = (key.priority, key.qualifier, key.kind.startswith("link"))
                rate = self._signals.rate((lab, member, key), value, ts, epoch=ep)
                if rate is None:
                    continue
                if dur:
                    ratio = pause_ratio_from_duration(rate)
                    if slot not in has_duration:
                        has_duration.add(slot)
                        ratios.pop(slot, None)
                elif slot in has_duration or not link_bps:
                    continue
                else:
                    ratio = pause_ratio_from_frames(rate, link_bps)
                ratios[slot] = max(ratios.get(slot, 0.0), ratio)
        out.append(Reading(ETHTOOL_UP.name, lab, 1.0 if ok else 0.0))
        if not ok:
            return  # a partial sum across bond members would look like a counter reset
        if pinned:
            self._flag_saturated(lab, pinned, out)
            for key in skip:
                sums.pop(key, None)  # a bond sum missing one member would look like a reset
        for key, value in sums.items():
            kind = key.kind
            v = float(value)
            if kind == et.PAUSE_FRAMES:
                out.append(
                    Reading(PAUSE_FRAMES.name, (*lab, key.priority, key.qualifier), v, epoch=ep)
                )
            elif kind == et.PAUSE_DURATION_US:
                out.append(
                    Reading(
                        PAUSE_DURATION.name, (*lab, key.priority, key.qualifier), v / 1e6, epoch=ep
                    )
                )
            elif kind == et.LINK_PAUSE_FRAMES:
                out.append(Reading(LINK_PAUSE_FRAMES.name, (*lab, key.qualifier), v, epoch=ep))
            elif kind == et.STORM:
                out.append(Reading(STORM_EVENTS.name, (*lab, key.qualifier), v, epoch=ep))
            elif kind == et.DROPS:
                out.append(Reading(DROPS.name, (*lab, key.qualifier), v, epoch=ep))
            elif kind == et.PRIORITY_DISCARDS:
                out.append(
                    Reading(
                        PRIORITY_DISCARDS.name, (*lab, key.priority, key.qualifier), v, epoch=ep
                    )
                )
            elif kind == et.PRIORITY_MARKED:
                out.append(Reading(PRIORITY_MARKED.name, (*lab, key.priority), v, epoch=ep))
            elif kind == et.LINK_DOWN:
                out.append(Reading(LINK_DOWN_EVENTS.name, lab, v, epoch=ep))
        for (prio, direction, link_level), ratio in ratios.items():
            if link_level:
                out.append(Reading(LINK_PAUSE_RATIO.name, (*lab, direction), ratio))
            else:
                out.append(Reading(PAUSE_RATIO.name, (*lab, prio, direction), ratio))
