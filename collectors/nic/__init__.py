"""Host RDMA NIC collector: congestion, pause and link signals of ConnectX-class ports.

Sources, all under injectable roots:

* ``/sys/class/infiniband/<dev>/ports/<p>/{counters,hw_counters}`` — traffic
  (4-byte words, exported as bytes), ``port_xmit_wait``, link state and flaps,
  ECN marks and CNPs (``np_*``/``rp_*``, present only when the firmware allows
  congestion queries), RDMA transport errors (32-bit Q-counters).
* the ethtool ioctl on the port's netdev (each member of a RoCE LAG bond) —
  per-priority PFC pause frames and durations, pause storms, discards.
* sysfs PCI links — netdev, PCI address, NUMA node and the GPUs near the NIC.

Counters are exported raw (the pipeline makes rates); the pause-time and
transmit-wait fractions are derived here with the collector's own
:class:`~fabricwatch.counters.CounterTracker`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import resource
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from fabricwatch.collector import CollectorEnv, CollectorFactory, CollectorSettings
from fabricwatch.counters import CounterTracker
from fabricwatch.errors import CollectorError
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.settings import option

from . import _ethtool as et
from ._ethtool import Classifier, DirEthtoolSource, EthtoolSource, IoctlEthtool
from ._ratios import (
    RateSignals,
    pause_ratio_from_duration,
    pause_ratio_from_frames,
    xmit_wait_ratio,
)
from ._sysfs import FdBudget, PortGoneError, PortReader, PortSample, discover_ports
from ._topology import PortPlace, find_gpus, locality, netdev_speed_bps, nvml_bus_id, place_port

__all__ = ["FACTORY", "METRICS", "NicCollector", "NicSettings"]

log = structlog.get_logger("fabricwatch.collectors.nic")

_DP = ("device", "port")
G, C = MetricKind.GAUGE, MetricKind.COUNTER


def _spec(
    name: str, kind: MetricKind, help: str, labels: tuple[str, ...] = _DP, bits: int = 64
) -> MetricSpec:
    return MetricSpec(f"fabricwatch_nic_{name}", kind, help, labels, bits)


PAUSE_RATIO = _spec(
    "pfc_pause_ratio",
    G,
    "Host NIC PFC pause-time fraction 0-1 per priority; rx = we were paused, tx = we paused "
    "the peer (from pause duration, else estimated from frames at the link rate).",
    (*_DP, "priority", "direction"),
)
PAUSE_FRAMES = _spec(
    "pfc_pause_frames", C, "Host NIC PFC pause frames.", (*_DP, "priority", "direction")
)
PAUSE_DURATION = _spec(
    "pfc_pause_duration_seconds",
    C,
    "Host NIC PFC pause duration in seconds (summed over bond members).",
    (*_DP, "priority", "direction"),
)
ECN_MARKED = _spec(
    "ecn_marked_packets", C, "RoCEv2 packets received with ECN CE (np_ecn_marked_roce_packets)."
)
CNP_SENT = _spec("cnp_sent_packets", C, "Congestion notification packets sent (np_cnp_sent).")
CNP_HANDLED = _spec("cnp_handled_packets", C, "CNPs that cut our send rate (rp_cnp_handled).")
CNP_IGNORED = _spec(
    "cnp_ignored_packets", C, "CNPs ignored by the reaction point (rp_cnp_ignored)."
)
CC_PRESENT = _spec(
    "congestion_counters_present",
    G,
    "1 when the port exposes np_*/rp_* congestion counters, 0 when firmware hides them.",
)
XMIT_WAIT_RATIO = _spec(
    "xmit_wait_ratio", G, "Share of time the port waited to transmit, 0-1 (port_xmit_wait)."
)
XMIT_WAIT_TICKS = _spec("xmit_wait_ticks", C, "Raw port_xmit_wait ticks.", bits=32)
LINK_UP = _spec("link_up", G, "1 when the RDMA port is ACTIVE, 0 otherwise.")
LINK_DOWNED = _spec(
    "link_downed", C, "Failed link recoveries that took the link down (link_downed)."
)
TX_BYTES = _spec("transmit_bytes", C, "RDMA port data transmitted in bytes (port_xmit_data x 4).")
RX_BYTES = _spec("receive_bytes", C, "RDMA port data received in bytes (port_rcv_data x 4).")
TX_PACKETS = _spec("transmit_packets", C, "RDMA port packets transmitted (port_xmit_packets).")
RX_PACKETS = _spec("receive_packets", C, "RDMA port packets received (port_rcv_packets).")
INFO = _spec(
    "info",
    G,
    "RDMA port identity (=1): netdev, PCI address, NUMA node and link layer.",
    (*_DP, "netdev", "pci_address", "numa_node", "link_layer"),
)
GPU_LOCALITY = _spec(
    "gpu_locality_info",
    G,
    "(=1) a GPU near this port; pci_bus_id in NVML spelling, locality = pcie_switch, "
    "host_bridge, numa_node or system.",
    (*_DP, "pci_bus_id", "locality"),
)
LINK_RATE = _spec("link_rate_bytes_per_second", G, "RDMA port link rate in bytes per second.")
PORT_STATE = _spec(
    "port_state", G, "Logical port state id (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)."
)
PHYS_STATE = _spec("port_physical_state", G, "Physical port state id (5 LinkUp).")
LINK_PAUSE_FRAMES = _spec(
    "link_pause_frames", C, "802.3x link-level pause frames.", (*_DP, "direction")
)
LINK_PAUSE_RATIO = _spec(
    "link_pause_ratio", G, "802.3x link-level pause-time fraction 0-1.", (*_DP, "direction")
)
STORM_EVENTS = _spec(
    "pause_storm_events", C, "Pause storm events (level = warning, error).", (*_DP, "level")
)
DROPS = _spec(
    "drops",
    C,
    "Packets dropped by the NIC (reason = driver counter: rx_discards_phy, port_xmit_discards...).",
    (*_DP, "reason"),
)
PRIORITY_DISCARDS = _spec(
    "priority_discards",
    C,
    "Per-priority receive discards (reason = buffer, congestion, other).",
    (*_DP, "priority", "reason"),
)
PRIORITY_MARKED = _spec(
    "priority_ecn_marked_packets",
    C,
    "Per-priority packets ECN-marked by the device.",
    (*_DP, "priority"),
)
LINK_DOWN_EVENTS = _spec(
    "link_down_events", C, "Physical link down events of the netdev (link_down_events_phy)."
)
TRANSPORT = _spec(
    "rdma_transport_events",
    C,
    "RDMA transport events from 32-bit hw Q-counters (type = out_of_buffer, out_of_sequence, "
    "local_ack_timeout_err, ...).",
    (*_DP, "type"),
    bits=32,
)
PORT_ERRORS = _spec(
    "port_errors",
    C,
    "InfiniBand PMA error counters (type = symbol_error, port_rcv_errors, ...).",
    (*_DP, "type"),
)
ETHTOOL_UP = _spec(
    "ethtool_up", G, "1 when every netdev of the port answered the ethtool statistics query."
)
READ_ERRORS = _spec("read_errors", C, "Counter values that could not be read or parsed.")
SATURATED = _spec(
    "counter_saturated",
    G,
    "1 while a counter is pinned at its maximum, so its rate is unknown (not zero) and it is "
    "not exported: counter = sysfs or driver statistic name.",
    (*_DP, "counter"),
)

METRICS: tuple[MetricSpec, ...] = (
    PAUSE_RATIO, PAUSE_FRAMES, PAUSE_DURATION, ECN_MARKED, CNP_SENT, CNP_HANDLED, CNP_IGNORED,
    CC_PRESENT, XMIT_WAIT_RATIO, XMIT_WAIT_TICKS, LINK_UP, LINK_DOWNED, TX_BYTES, RX_BYTES,
    TX_PACKETS, RX_PACKETS, INFO, GPU_LOCALITY, LINK_RATE, PORT_STATE, PHYS_STATE,
    LINK_PAUSE_FRAMES, LINK_PAUSE_RATIO, STORM_EVENTS, DROPS, PRIORITY_DISCARDS, PRIORITY_MARKED,
    LINK_DOWN_EVENTS, TRANSPORT, PORT_ERRORS, ETHTOOL_UP, READ_ERRORS, SATURATED,
)  # fmt: skip

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


@dataclass(kw_only=True)
class NicSettings(CollectorSettings):
    """``[collectors.nic]``: host RDMA NIC counters.

    Attributes:
        devices: glob patterns of RDMA devices to read; empty reads all.
        exclude: glob patterns of RDMA devices to skip.
        ethtool: read per-priority PFC and discard statistics through the ethtool ioctl.
        ethtool_stats_dir: read ``ethtool -S`` text dumps named after each netdev
            from this directory instead of the ioctl (replay, demo).
        gpu_locality: export which GPUs sit near each port.
        rescan_interval: how often to re-discover ports and topology.
        xmit_wait_tick_bytes: line time of one ``port_xmit_wait`` tick, in bytes.
        max_open_files: counter files kept open for cheap re-reads.
    """

    devices: list[str] = option([], "RDMA devices to read (glob patterns); empty = all.")
    exclude: list[str] = option([], "RDMA devices to skip (glob patterns).")
    ethtool: bool = option(
        True, "Read per-priority PFC/discard statistics through the ethtool ioctl."
    )
    ethtool_stats_dir: Path | None = option(
        None, "Read 'ethtool -S' dumps named <netdev> from this directory instead of the ioctl."
    )
    gpu_locality: bool = option(
        True, "Export which GPUs share a PCIe switch or NUMA node with each port."
    )
    rescan_interval: float = option(
        30.0,
        "Seconds between re-discovery of ports, netdevs and PCI topology.",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    xmit_wait_tick_bytes: float = option(
        8.0, "Bytes of line time one port_xmit_wait tick stands for.", min=0.001, max=4096.0
    )
    max_open_files: int = option(
        1024,
        "Counter files kept open between reads (capped at half the soft RLIMIT_NOFILE).",
        min=0,
        max=65536,
    )


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


def _create(settings: NicSettings, env: CollectorEnv) -> NicCollector:
    return NicCollector(settings, env)


FACTORY: CollectorFactory[NicSettings] = CollectorFactory(
    name="nic",
    settings=NicSettings,
    create=_create,
    description="Host RDMA NIC: ECN marks, CNPs, per-priority PFC pause, xmit_wait, link flaps.",
)
