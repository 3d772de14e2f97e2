"""Replay: run the engine offline over recorded telemetry.

Sources:

* OpenMetrics text with timestamps (what ``promtool tsdb create-blocks-from
  openmetrics`` reads), parsed strictly: garbage gets a :class:`ParseError`
  naming the file and line.
* The Prometheus HTTP API: raw samples fetched with range-vector instant
  queries (``/api/v1/query`` with ``{...}[window]``), chunk by chunk, so
  replay sees the samples exactly as scraped (a ``query_range`` would resample
  them onto a step and fill gaps from the 5-minute lookback).

Metric names may be fabricwatch's own or those of dcgm-exporter,
node_exporter (infiniband, ethtool, diskstats) and an snmp_exporter
CISCO-PFC-EXT module; :data:`MAPPING_TABLE` documents the mapping (also in
``docs/replay-mapping.md``). Readings are fed into a fresh
:class:`~fabricwatch.store.SnapshotStore` and the engine ticks on a fixed grid
(half-tick marks), exactly as :func:`~fabricwatch.testing.sim_scenarios.run_live`
does live.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import itemgetter
from typing import IO, Any

from fabricwatch import nicnames
from fabricwatch.counters import CounterTracker
from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import Incident, IncidentTransition
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.errors import FabricwatchError, ParseError
from fabricwatch.nicnames import classify_exported
from fabricwatch.readings import MetricKind, Reading
from fabricwatch.store import SnapshotStore

Sample = tuple[float, str, tuple[str, ...], float]
"""(timestamp seconds, fabricwatch family, label values, value)."""


class ReplayError(FabricwatchError):
    """A replay source could not be read (Prometheus unreachable, bad answer)."""


# ---------------------------------------------------------------------------
# Name mapping


@dataclass(frozen=True, slots=True)
class Target:
    """Where one source series goes: family, labels and how values convert.

    ``dcgm`` marks dcgm-exporter values (their blank sentinels are dropped);
    ``instance`` is the MIG GPU instance (``GPU_I_ID``) of a series that is
    aggregated per GPU, ``inner`` the transform applied after aggregation.
    """

    family: str
    labels: tuple[str, ...]
    transform: str = "copy"
    scale: float = 1.0
    dcgm: bool = False
    instance: str = ""
    inner: str = ""


MAPPING_TABLE: tuple[tuple[str, str, str], ...] = (
    (
        "fabricwatch_* (counters with _total)",
        "same family",
        "labels picked by name, extra labels ignored",
    ),
    ("DCGM_FI_DEV_GPU_UTIL{gpu}", sig.GPU_UTIL, "percent / 100 (unused for a GPU that has GR)"),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu}",
        sig.GPU_UTIL,
        "ratio as is; preferred over DEV_GPU_UTIL (on by default in dcgm-exporter)",
    ),
    ("DCGM_FI_PROF_SM_ACTIVE{gpu}", sig.GPU_SM, "ratio as is"),
    ("DCGM_FI_DEV_POWER_USAGE{gpu}", sig.GPU_POWER, "watts"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu}", sig.GPU_POWER_LIMIT, "watts"),
    ("DCGM_FI_DEV_FB_USED{gpu}", sig.GPU_MEM, "MiB x 1048576"),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu}",
        f"{sig.NVLINK_TX}{{link=total}}",
        "MB/s rate integrated into a byte counter",
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES{gpu}",
        f"{sig.NVLINK_TX}{{link=total}}",
        "bytes/s rate integrated into a byte counter",
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES{gpu}",
        f"{sig.NVLINK_RX}{{link=total}}",
        "bytes/s rate integrated into a byte counter",
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS{gpu[,err_code,err_msg]}",
        f"{sig.GPU_XID}{{xid=<value>}}",
        "gauge of the last XID: each change to a non-zero value counts one event",
    ),
    (
        "DCGM_FI_*{gpu,GPU_I_ID} (MIG instances)",
        "the GPU's family",
        "aggregated per GPU: FB_USED summed, others the largest instance value",
    ),
    (
        "DCGM_FI_* = DCGM_FT_*_BLANK / NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED",
        "-",
        "a missing sample (dropped and counted)",
    ),
    (
        "DCGM_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL{gpu}",
        f"{sig.NVLINK_ERRORS}{{link=total,type=crc_flit|crc_data|replay|recovery}}",
        "count (per GPU, all links)",
    ),
    ("node_infiniband_port_data_transmitted_bytes_total{device,port}", sig.NIC_TX_BYTES, "bytes"),
    ("node_infiniband_port_data_received_bytes_total{device,port}", sig.NIC_RX_BYTES, "bytes"),
    ("node_infiniband_link_downed_total{device,port}", sig.NIC_LINK_DOWNED, "count"),
    (
        "node_infiniband_np_ecn_marked_roce_packets_received_total{device,port}",
        sig.NIC_ECN,
        "count",
    ),
    ("node_infiniband_np_cnp_packets_sent_total{device,port}", sig.NIC_CNP_SENT, "count"),
    ("node_infiniband_rp_cnp_packets_handled_total{device,port}", sig.NIC_CNP_HANDLED, "count"),
    ("node_infiniband_state_id{device,port}", sig.NIC_LINK_UP, "4 (ACTIVE) -> 1, else 0"),
    ("node_infiniband_rate_bytes_per_second{device,port}", sig.NIC_RATE, "bytes/s"),
    (
        "node_infiniband_port_transmit_wait_total{device,port}",
        sig.NIC_XMIT_WAIT,
        "ticks/s x 8 bytes / link rate (needs node_infiniband_rate_bytes_per_second)",
    ),
    (
        "node_ethtool_<driver PFC frame counter>{device}",
        sig.NIC_PFC_FRAMES,
        "mlx5 received_prio<p>_pause, bnxt received_pfc_ena_frames_pri<p>, ice "
        "received_priority_<p>_xoff_nic, i40e port_received_priority_<p>_xoff[_received]; "
        "port=1 (or the RDMA port via --nic-map / fabricwatch_nic_info)",
    ),
    (
        "node_ethtool_<driver PFC duration counter>{device}",
        sig.NIC_PFC_RATIO,
        "mlx5 received_prio<p>_pause_duration, bnxt pfc_pri<p>_received_duration_us: "
        "microsecond counter -> pause-time fraction (rate / 1e6)",
    ),
    (
        "fabricwatch_nic_info{device,port,netdev}",
        "netdev -> RDMA device",
        "node_ethtool series of that netdev take the RDMA device and port (as live)",
    ),
    (
        "node_disk_written_bytes_total{device}",
        sig.ST_WRITE_BYTES,
        "path=device; partitions, dm-*, loop*, sr*, ram*, zram*, fd* dropped",
    ),
    (
        "node_disk_write_time_seconds_total / node_disk_writes_completed_total{device}",
        sig.ST_WRITE_LAT,
        "delta time / delta writes = average write latency, path=device (same filter)",
    ),
    (
        "cpfcIfPriorityIndications{ifName|ifIndex,cpfcIfPriorityValue}",
        sig.SW_PFC_FRAMES,
        "snmp_exporter CISCO-PFC-EXT, direction=rx; switch = switch or instance label",
    ),
    ("cpfcIfPriorityRequests{...}", sig.SW_PFC_FRAMES, "direction=tx"),
    (
        "cpfcIfPriorityWaitRx / WaitTx{ifName|ifIndex,cpfcIfPriorityWaitCoS}",
        sig.SW_PFC_RATIO,
        "microseconds in continuous pause -> fraction",
    ),
    ("ifOperStatus{ifName|ifIndex}", sig.SW_PORT_UP, "1 (up) -> 1, else 0"),
    (
        "ifHCInOctets / ifHCOutOctets{ifName|ifIndex}",
        f"{sig.SW_RX_BYTES} / {sig.SW_TX_BYTES}",
        "bytes",
    ),
    (
        "ifHighSpeed (Mb/s), else ifSpeed below 4294967295 (bit/s){ifName|ifIndex}",
        sig.SW_SPEED,
        "bytes/s",
    ),
)
"""The documented mapping: (source series, fabricwatch family, conversion)."""

SOURCE_NAME_REGEX = (
    "fabricwatch_.+|DCGM_FI_.+|node_infiniband_.+|node_ethtool_.*(pause|xoff|pfc).*"
    "|node_disk_write.+"
    "|node_disk_written_bytes_total|cpfcIfPriority.+|ifOperStatus|ifHC(In|Out)Octets"
    "|ifHighSpeed|ifSpeed"
)
"""``__name__`` regex of every source the mapping understands (for Prometheus)."""

_COUNTER_FAMILIES = {n: s for n, s in sig.SIGNAL_SPECS.items() if s.kind is MetricKind.COUNTER}
_GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
_DCGM: dict[str, tuple[str, str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": (sig.GPU_UTIL, "copy", 0.01),
    _GR: (sig.GPU_UTIL, "gr", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": (sig.GPU_SM, "copy", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": (sig.GPU_POWER, "copy", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": (sig.GPU_POWER_LIMIT, "copy", 1.0),
    "DCGM_FI_DEV_FB_USED": (sig.GPU_MEM, "copy", 1048576.0),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (sig.NVLINK_TX, "integrate", 1e6),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (sig.NVLINK_TX, "integrate", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": (sig.NVLINK_RX, "integrate", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": (sig.GPU_XID, "last_xid", 1.0),
}
_DCGM_NVLINK_ERRORS = {
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "crc_flit",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "crc_data",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "replay",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "recovery",
}
_DCGM_FAMILIES = frozenset(f for f, _, _ in _DCGM.values()) | {sig.NVLINK_ERRORS}
_IB: dict[str, tuple[str, str]] = {
    "node_infiniband_port_data_transmitted_bytes_total": (sig.NIC_TX_BYTES, "copy"),
    "node_infiniband_port_data_received_bytes_total": (sig.NIC_RX_BYTES, "copy"),
    "node_infiniband_link_downed_total": (sig.NIC_LINK_DOWNED, "copy"),
    "node_infiniband_np_ecn_marked_roce_packets_received_total": (sig.NIC_ECN, "copy"),
    "node_infiniband_np_cnp_packets_sent_total": (sig.NIC_CNP_SENT, "copy"),
    "node_infiniband_rp_cnp_packets_handled_total": (sig.NIC_CNP_HANDLED, "copy"),
    "node_infiniband_state_id": (sig.NIC_LINK_UP, "eq4"),
    "node_infiniband_rate_bytes_per_second": (sig.NIC_RATE, "link_rate"),
    "node_infiniband_port_transmit_wait_total": (sig.NIC_XMIT_WAIT, "xmit_wait"),
}
_ETHTOOL_PREFIX = "node_ethtool_"
_SNMP_PFC = {
    "cpfcIfPriorityIndications": ("rx", "cpfcIfPriorityValue", False),
    "cpfcIfPriorityRequests": ("tx", "cpfcIfPriorityValue", False),
    "cpfcIfPriorityWaitRx": ("rx", "cpfcIfPriorityWaitCoS", True),
    "cpfcIfPriorityWaitTx": ("tx", "cpfcIfPriorityWaitCoS", True),
}
XMIT_WAIT_TICK_BYTES = 8.0
"""Line time of one port_xmit_wait tick in bytes (the NIC collector's default)."""
_XMIT_WAIT_PINNED = 2.0**32 - 1  # a saturated PMA counter: its rate is unknown
_IF_SPEED_MAX = 2.0**32 - 1

# Block devices that never back a checkpoint path by themselves: the live
# storage collector's default device_exclude (z?ram, fd, sr), loop devices
# and device-mapper volumes (their disks carry the same I/O), and partitions
# (the live collector reads sysfs to tell; replay has only the name).
BLOCK_DEVICE_EXCLUDE = re.compile(
    r"^(?:(?:z?ram|fd|sr|loop)\d+|dm-\d+"
    r"|(?:[sv]d|xvd|hd)[a-z]+\d+|(?:nvme\d+n\d+|mmcblk\d+|md\d+|nbd\d+)p\d+)$"
)


def dcgm_blank(value: float) -> bool:
    """A DCGM "no value" sentinel (DCGM_FT_{INT32,INT64,FP64}_{BLANK,NOT_FOUND,
    NOT_SUPPORTED,NOT_PERMISSIONED}), e.g. 9223372036854775794, not a reading."""
    # Half-unit margins: values may come back through a x0.01 or x1048576 scale.
    if value < 2147483631.5:
        return False
    return (
        value <= 2147483635.5
        or 140737488355327.5 <= value <= 140737488355331.5
        or value >= 9.2233720368547e18
    )


def _ethtool(name: str, labels: dict[str, str]) -> Target | None:
    device = labels.get("device")
    hit = classify_exported(name[len(_ETHTOOL_PREFIX) :])
    if device is None or hit is None:
        return None
    key, _ = hit
    values = (device, "1", key.priority, key.qualifier)
    if key.kind == nicnames.PAUSE_DURATION_US:
        return Target(sig.NIC_PFC_RATIO, values, "us_ratio")
    if key.kind == nicnames.PAUSE_FRAMES:
        return Target(sig.NIC_PFC_FRAMES, values)
    return None


def _dcgm(name: str, labels: dict[str, str]) -> Target | None:
    gpu = labels.get("gpu")
    if gpu is None:
        return None
    nvlink_error = _DCGM_NVLINK_ERRORS.get(name)
    dcgm = _DCGM.get(name)
    if nvlink_error is not None:
        # Per GPU over all links, like dcgm-exporter's *_TOTAL fields.
        family, transform, scale = sig.NVLINK_ERRORS, "copy", 1.0
        values: tuple[str, ...] = (gpu, "total", nvlink_error)
    elif dcgm is not None:
        family, transform, scale = dcgm
        values = (gpu, "total") if family in (sig.NVLINK_TX, sig.NVLINK_RX) else (gpu,)
    else:
        return None
    instance = labels.get("GPU_I_ID", "")
    if instance:
        return Target(family, values, "mig", scale, True, instance, transform)
    return Target(family, values, transform, scale, True)


def map_series(name: str, labels: dict[str, str]) -> Target | None:
    """Where a source series goes, or None when the engine does not use it."""
    if name.startswith("fabricwatch_"):
        if name == "fabricwatch_nic_info":
            try:
                return Target("", (labels["device"], labels["port"], labels["netdev"]), "nic_id")
            except KeyError:
                return None
        spec = sig.SIGNAL_SPECS.get(name)
        if spec is None and name.endswith("_total"):
            spec = _COUNTER_FAMILIES.get(name[:-6])
        if spec is None or spec.kind is MetricKind.HISTOGRAM:
            return None
        try:
            values = tuple(labels[k] for k in spec.labels)
        except KeyError:
            return None
        return Target(spec.name, values)
    if name.startswith("DCGM_FI_"):
        return _dcgm(name, labels)
    ib = _IB.get(name)
    if ib is not None:
        if "device" not in labels or "port" not in labels:
            return None
        return Target(ib[0], (labels["device"], labels["port"]), ib[1])
    if name.startswith(_ETHTOOL_PREFIX):
        return _ethtool(name, labels)
    if name in (
        "node_disk_written_bytes_total",
        "node_disk_write_time_seconds_total",
        "node_disk_writes_completed_total",
    ):
        device = labels.get("device")
        if device is None:
            return None
        if BLOCK_DEVICE_EXCLUDE.match(device):
            return Target(sig.ST_WRITE_BYTES, (device,), "filtered")
        if name == "node_disk_written_bytes_total":
            return Target(sig.ST_WRITE_BYTES, (device,))
        part = "time" if "time" in name else "ops"
        return Target(sig.ST_WRITE_LAT, (device,), f"disk_{part}")
    switch = labels.get("switch") or labels.get("instance") or "switch"
    port = labels.get("ifName") or labels.get("ifDescr") or labels.get("ifIndex")
    pfc = _SNMP_PFC.get(name)
    if pfc is not None:
        direction, prio_label, duration = pfc
        prio = labels.get(prio_label)
        if port is None or prio is None:
            return None
        values = (switch, port, prio, direction)
        if duration:
            return Target(sig.SW_PFC_RATIO, values, "us_ratio")
        return Target(sig.SW_PFC_FRAMES, values)
    if port is not None:
        if name == "ifOperStatus":
            return Target(sig.SW_PORT_UP, (switch, port), "eq1")
        if name == "ifHCInOctets":
            return Target(sig.SW_RX_BYTES, (switch, port))
        if name == "ifHCOutOctets":
            return Target(sig.SW_TX_BYTES, (switch, port))
        if name == "ifHighSpeed":
            return Target(sig.SW_SPEED, (switch, port), "speed_high", 1e6 / 8)
        if name == "ifSpeed":
            return Target(sig.SW_SPEED, (switch, port), "speed_low", 1 / 8)
    return None


def parse_nic_map(entries: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``["ens1f0np0=mlx5_0", "ens2=mlx5_1:2"]`` -> netdev -> (RDMA device, port).

    Raises:
        ReplayError: an entry that is not ``NETDEV=DEVICE[:PORT]``.
    """
    out: dict[str, tuple[str, str]] = {}
    for e in entries:
        netdev, sep, dev = e.partition("=")
        device, _, port = dev.partition(":")
        if not sep or not netdev.strip() or not device.strip() or (port and not port.isdigit()):
            msg = f"--nic-map expects NETDEV=RDMA_DEVICE[:PORT] (ens1f0np0=mlx5_0), got {e!r}"
            raise ReplayError(msg)
        out[netdev.strip()] = (device.strip(), port or "1")
    return out


MAX_SPACING = 60.0
"""Coarsest sample spacing (seconds) the engine's rules are scaled and evaluated for."""


@dataclass(frozen=True, slots=True)
class Spacing:
    """Sample spacing seen in replayed data (median over series of their median step)."""

    median: float
    series: int

    def warning(self, settings: EngineSettings) -> str:
        """What this spacing hides from the engine, or ''.

        The engine scales its time rules to the spacing it observes
        (:meth:`EngineSettings.at_spacing`), so coarse data needs no special
        config; what it cannot do is see a stall shorter than two samples, or
        anything at all between samples much coarser than a minute."""
        m = self.median
        if m > MAX_SPACING:
            return (
                f"samples are {m:g} s apart: the engine scales its rules to the sample "
                f"spacing up to {MAX_SPACING:g} s; beyond that most stalls and their "
                "evidence fall between samples"
            )
        if 2.0 * m > settings.min_duration:
            return (
                f"samples are {m:g} s apart: the engine scales its rules to that spacing, "
                f"and stalls shorter than two samples ({2.0 * m:g} s) cannot be seen"
            )
        return ""


def sample_spacing(samples: Sequence[Sample], limit: int = 200_000) -> Spacing | None:
    """The typical spacing of the first ``limit`` time-sorted samples, or None."""
    last: dict[tuple[str, tuple[str, ...]], float] = {}
    steps: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for ts, family, labels, _ in samples[:limit]:
        key = (family, labels)
        prev = last.get(key)
        last[key] = ts
        if prev is not None and ts > prev:
            steps.setdefault(key, []).append(ts - prev)
    per_series = [sig.median(v) for v in steps.values()]
    if not per_series:
        return None
    return Spacing(round(sig.median(per_series), 3), len(per_series))


class Mapper:
    """Turns source samples into fabricwatch samples, one series at a time.

    Stateful conversions (rate integration, microsecond counters to
    fractions, last-XID gauges, disk latency, MIG aggregation) keep
    per-series state, so each series must arrive in time order (OpenMetrics
    and Prometheus both guarantee it).

    Attributes:
        ignored: samples per source name that no mapping reads.
        dropped: samples dropped on purpose, by reason (``dcgm_blank``,
            ``block_device``, ``saturated``, ``no_link_rate``, ``gpu_util_has_gr``).
        unused: after :meth:`finish`, samples per mapped family no engine part reads.
    """

    def __init__(self, nic_map: dict[str, tuple[str, str]] | None = None) -> None:
        self._tracker = CounterTracker()
        self._state: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._last_ts: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._disk: dict[tuple[str, str], dict[float, float]] = {}
        self._mig: dict[tuple[str, Target], dict[str, list[tuple[float, float]]]] = {}
        self._wait: dict[tuple[str, ...], list[tuple[float, float]]] = {}
        self._rates: dict[tuple[str, ...], list[tuple[float, float]]] = {}
        self._speed_high: set[tuple[str, ...]] = set()
        self._nic_map: dict[str, tuple[str, str]] = dict(nic_map or {})
        self._dcgm_seen = False
        self._ifspeed_seen = False
        self.out: list[Sample] = []
        self.ignored: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.unused: dict[str, int] = {}
        self.samples = 0

    def _drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def add(self, target: Target | None, source: str, ts: float, value: float) -> None:
        """One source sample (``target`` from :func:`map_series`)."""
        self.samples += 1
        if target is None:
            self.ignored[source] = self.ignored.get(source, 0) + 1
            return
        if not math.isfinite(value):
            return
        if target.dcgm:
            self._dcgm_seen = True
            if dcgm_blank(value):
                self._drop("dcgm_blank")
                return
        self._apply(target, source, ts, value)

    def _apply(self, target: Target, source: str, ts: float, value: float) -> None:
        tr = target.transform
        out = self.out
        if tr == "copy":
            out.append((ts, target.family, target.labels, value * target.scale))
        elif tr == "gr":
            out.append((ts, _GR, target.labels, value))  # renamed in finish()
        elif tr == "eq4":
            out.append((ts, target.family, target.labels, 1.0 if value == 4 else 0.0))
        elif tr == "eq1":
            out.append((ts, target.family, target.labels, 1.0 if value == 1 else 0.0))
        elif tr == "integrate":
            key = (target.family, target.labels, source)
            prev = self._last_ts.get(key)
            total = self._state.get(key, 0.0)
            if prev is not None and ts > prev:
                total += max(value, 0.0) * target.scale * (ts - prev)
            self._state[key] = total
            self._last_ts[key] = ts
            out.append((ts, target.family, target.labels, float(round(total))))
        elif tr == "us_ratio":
            rate = self._tracker.update((source, target.labels), value, ts)
            if rate is not None:
                out.append((ts, target.family, target.labels, min(1.0, rate.per_second / 1e6)))
        elif tr == "last_xid":
            self._xid(target, ts, value)
        elif tr in ("disk_time", "disk_ops"):
            # Raw totals: the latency needs both counters' deltas over the
            # very same interval (finish()), which smoothed rates are not.
            self._disk.setdefault((tr, target.labels[0]), {})[ts] = value
        else:
            self._apply_more(target, source, ts, value)

    def _apply_more(self, target: Target, source: str, ts: float, value: float) -> None:
        tr = target.transform
        if tr == "mig":
            key = (source, replace(target, instance=""))
            by_instance = self._mig.setdefault(key, {})
            by_instance.setdefault(target.instance, []).append((ts, value))
        elif tr == "filtered":
            self._drop("block_device")
        elif tr == "nic_id":
            device, port, netdev = target.labels
            if netdev:
                self._nic_map.setdefault(netdev, (device, port))
        elif tr == "link_rate":
            self._rates.setdefault(target.labels, []).append((ts, value))
            self.out.append((ts, target.family, target.labels, value))
        elif tr == "xmit_wait":
            if value == _XMIT_WAIT_PINNED:
                self._drop("saturated")
                return
            rate = self._tracker.update((source, target.labels), value, ts, bits=32)
            if rate is not None:
                self._wait.setdefault(target.labels, []).append((ts, rate.per_second))
        elif tr == "speed_high":
            if value > 0:
                self._speed_high.add(target.labels)
                self.out.append((ts, target.family, target.labels, value * target.scale))
        elif tr == "speed_low" and 0 < value < _IF_SPEED_MAX:
            # ifSpeed only where the switch gave no ifHighSpeed (filtered in finish()).
            self._ifspeed_seen = True
            self.out.append((ts, "_ifspeed", target.labels, value * target.scale))

    def _xid(self, target: Target, ts: float, value: float) -> None:
        gpu = target.labels[0]
        key = (target.family, (gpu,), "last")
        prev = self._state.get(key)
        prev_ts = self._last_ts.get(key)
        self._state[key] = value
        self._last_ts[key] = ts
        # The first sample's XID happened at some unknown earlier time.
        if prev is None or value == prev or value <= 0:
            return
        labels = (gpu, str(int(value)))
        ckey = (target.family, labels, "count")
        count = self._state.get(ckey)
        if count is None:
            count = 0.0
            # A counter needs a zero before its first event to show a rate.
            self.out.append(
                (prev_ts if prev_ts is not None else ts - 1.0, target.family, labels, 0.0)
            )
        self._state[ckey] = count + 1.0
        self.out.append((ts, target.family, labels, count + 1.0))

    def _finish_mig(self) -> None:
        """MIG instances of one GPU, aggregated on purpose: one series per GPU.

        dcgm-exporter reports per instance (GPU_I_ID) both instance values
        (FB_USED, GR_ENGINE_ACTIVE) and copies of GPU-wide ones (POWER_USAGE,
        NVLINK_BANDWIDTH_TOTAL). Memory is summed, everything else is the
        largest instance value (a GPU works while any instance works; copies
        are equal), each instance carrying its latest value forward, so the
        GPU series has one sample per scrape and no duplicate timestamps.
        """
        for (source, target), by_instance in sorted(
            self._mig.items(), key=lambda kv: (kv[0][0], kv[0][1].family, kv[0][1].labels)
        ):  # target without its instance: one entry per GPU
            events = sorted(
                (ts, inst, v) for inst, points in by_instance.items() for ts, v in points
            )
            inner = Target(target.family, target.labels, target.inner, target.scale, True)
            total = target.family == sig.GPU_MEM
            latest: dict[str, float] = {}
            i = 0
            while i < len(events):
                ts = events[i][0]
                while i < len(events) and events[i][0] == ts:
                    latest[events[i][1]] = events[i][2]
                    i += 1
                value = sum(latest.values()) if total else max(latest.values())
                self._apply(inner, f"{source}{{mig}}", ts, value)
        self._mig.clear()

    def _finish_xmit_wait(self) -> None:
        for labels, points in self._wait.items():
            rates = sorted(self._rates.get(labels, []))
            if not rates:
                self._drop("no_link_rate", len(points))
                continue
            times = [t for t, _ in rates]
            for ts, ticks in points:
                j = bisect_right(times, ts) - 1
                bps = rates[max(j, 0)][1]
                if bps <= 0:
                    continue
                ratio = min(1.0, max(0.0, ticks * XMIT_WAIT_TICK_BYTES / bps))
                self.out.append((ts, sig.NIC_XMIT_WAIT, labels, ratio))
        self._wait.clear()

    def _nic_identity(self, s: Sample) -> Sample:
        ts, family, labels, value = s
        hit = self._nic_map.get(labels[0]) if family in _NIC_FAMILIES else None
        if hit is None or labels[1] != "1":
            return s
        return (ts, family, (hit[0], hit[1], *labels[2:]), value)

    def finish(self) -> list[Sample]:
        """All mapped samples, sorted by time (stable)."""
        for (kind, device), times in self._disk.items():
            if kind != "disk_time":
                continue
            ops = self._disk.get(("disk_ops", device), {})
            # A latency is one interval's write time over the same interval's
            # writes, from the raw totals at timestamps both counters share.
            # Where the two refresh in different cycles one moves while the
            # other does not, and the next interval holds the other's late
            # delta: both intervals are skipped (a write-time delta over a
            # near-zero write count reads as a huge spike).
            prev: tuple[float, float] | None = None
            in_step = True
            for ts in sorted(t for t in times if t in ops):
                busy_total, n_total = times[ts], ops[ts]
                if prev is None or busy_total < prev[0] or n_total < prev[1]:
                    prev = (busy_total, n_total)  # first sample or a reset
                    in_step = True
                    continue
                busy, n = busy_total - prev[0], n_total - prev[1]
                prev = (busy_total, n_total)
                step = (busy > 0) == (n > 0)
                if step and in_step:
                    self.out.append((ts, sig.ST_WRITE_LAT, (device,), busy / n if n > 0 else 0.0))
                in_step = step
        self._disk.clear()
        self._finish_mig()
        self._finish_xmit_wait()
        out = self.out
        if self._dcgm_seen or self._ifspeed_seen:
            out = self._finish_dcgm_speed(out)
        if self._nic_map:
            out = self._merge_members([self._nic_identity(s) for s in out])
        out.sort(key=itemgetter(0))
        self.out = out
        counts = Counter(map(itemgetter(1), out))
        self.unused = {f: n for f, n in sorted(counts.items()) if f not in sig.ENGINE_FAMILIES}
        return out

    def _finish_dcgm_speed(self, out: list[Sample]) -> list[Sample]:
        """Blank sentinels that took the fast path, GR over GPU_UTIL, ifSpeed fallback."""
        gr_gpus = {s[2] for s in out if s[1] == _GR}
        kept: list[Sample] = []
        blanks = util_dropped = 0
        for s in out:
            family = s[1]
            if family in _DCGM_FAMILIES and dcgm_blank(s[3] / _SCALE.get(family, 1.0)):
                blanks += 1
            elif family == _GR:
                kept.append((s[0], sig.GPU_UTIL, s[2], s[3]))
            elif family == sig.GPU_UTIL and s[2] in gr_gpus:
                util_dropped += 1
            elif family == "_ifspeed":
                if s[2] not in self._speed_high:
                    kept.append((s[0], sig.SW_SPEED, s[2], s[3]))
            else:
                kept.append(s)
        if blanks:
            self._drop("dcgm_blank", blanks)
        if util_dropped:
            self._drop("gpu_util_has_gr", util_dropped)
        return kept

    @staticmethod
    def _merge_members(out: list[Sample]) -> list[Sample]:
        """Bond members mapped to one RDMA port: frames summed, ratios the worst member."""
        groups: dict[tuple[float, str, tuple[str, ...]], list[float]] = {}
        rest: list[Sample] = []
        for s in out:
            if s[1] in (sig.NIC_PFC_FRAMES, sig.NIC_PFC_RATIO):
                groups.setdefault((s[0], s[1], s[2]), []).append(s[3])
            else:
                rest.append(s)
        for (ts, family, labels), values in groups.items():
            v = sum(values) if family == sig.NIC_PFC_FRAMES else max(values)
            rest.append((ts, family, labels, v))
        return rest


_NIC_FAMILIES = frozenset({sig.NIC_PFC_FRAMES, sig.NIC_PFC_RATIO})
_SCALE = {sig.GPU_UTIL: 0.01, sig.GPU_MEM: 1048576.0}


# ---------------------------------------------------------------------------
# OpenMetrics text

_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)(?:[ \t]+(\S+))?'
    r"(?:[ \t]+#.*)?[ \t]*$"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPES = re.compile(r"\\(.)")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPES.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_labels(block: str) -> dict[str, str]:
    """``a="1",b="x\\"y"`` -> {"a": "1", "b": 'x"y'}; ValueError on garbage."""
    out: dict[str, str] = {}
    pos = 0
    block = block.strip()
    while pos < len(block):
        m = _LABEL.match(block, pos)
        if m is None or m.end() == pos:
            msg = f"bad label set near {block[pos : pos + 30]!r}"
            raise ValueError(msg)
        if m.group(1) in out:
            msg = f"duplicate label {m.group(1)!r}"
            raise ValueError(msg)
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _number(text: str) -> float:
    low = text.lower()
    if low in ("nan", "+inf", "inf", "-inf"):
        return float(low)
    return float(text)


MAX_LINE_CHARS = 1 << 20
"""Longest OpenMetrics line accepted (1 Mi characters; real ones are under 1 KiB)."""
MAX_SPAN_DAYS = 92.0
"""Widest time span one input may cover: the engine ticks every second of it."""


def read_lines(stream: IO[str]) -> Iterator[str]:
    """Lines of a text stream, none read past :data:`MAX_LINE_CHARS` (+1, so the
    parser can say so): one 50 MB line costs 1 MiB, not gigabytes. Open files
    with ``errors="surrogateescape"``: the parser then names the line of bad UTF-8."""
    return iter(partial(stream.readline, MAX_LINE_CHARS + 1), "")


def _check_line(line: str, source: str, lineno: int) -> None:
    """Raise for an over-long line or one that was not UTF-8 (surrogate escapes)."""
    if len(line) > MAX_LINE_CHARS:
        raise ParseError(
            f"line longer than {MAX_LINE_CHARS} characters: not OpenMetrics text",
            source=source,
            line=lineno,
        )
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ParseError(
            f"not UTF-8 text (character {exc.start + 1} of the line)", source=source, line=lineno
        ) from None


def check_span(lo: float, hi: float, source: str, line: int | None = None) -> None:
    """Refuse inputs whose samples span more than :data:`MAX_SPAN_DAYS`."""
    days = (hi - lo) / 86400.0
    if days > MAX_SPAN_DAYS:
        raise ParseError(
            f"samples span {days:.0f} days (timestamps {lo:.0f} to {hi:.0f}), more than "
            f"{MAX_SPAN_DAYS:.0f}: a timestamp is far from the others (the earliest is on "
            "the line given); fix or drop it, or split the input",
            source=source,
            line=line,
        )


def parse_openmetrics(
    lines: Iterable[str], mapper: Mapper, *, source: str = "<input>", fast: bool = True
) -> tuple[float, float] | None:
    """Parse OpenMetrics text with timestamps into ``mapper``.

    Most lines take a fast path: a series already validated by the strict
    parser is recognised by its exact text (``name{labels}``), and the value
    and timestamp are the last two space-separated fields. Anything else
    (comments, new series, exemplars, odd spacing, bad numbers, time going
    back) goes through the strict parser, so both accept exactly the same
    input and errors always come from the strict one.

    Args:
        fast: use the fast path (False: every line through the strict
            parser; same result, for tests and comparisons).

    Returns:
        The earliest and latest sample timestamp (None without samples).

    Raises:
        ParseError: with ``source`` and the 1-based line number, for a
            malformed line, a sample without timestamp, a series going back in
            time, content after ``# EOF``, a line over :data:`MAX_LINE_CHARS`,
            text that is not UTF-8, or samples spanning more than
            :data:`MAX_SPAN_DAYS`.
    """
    # series text -> [target, last timestamp]; shared by both paths.
    known: dict[str, list[Any]] = {}
    slow_only = not fast
    eof = False
    match = _LINE.match
    add = mapper.add
    out = mapper.out
    isfinite = math.isfinite
    n_fast = 0
    prev_series = ""
    entry: list[Any] | None = None
    lineno = 0
    lo, lo_line = math.inf, 0  # earliest sample: the first of some series (time never goes back)
    limit = MAX_LINE_CHARS
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > limit or not raw.isascii():
            _check_line(raw.rstrip("\r\n"), source, lineno)
        line = raw.rstrip("\r\n")
        if not eof and not slow_only:
            head, _, ts_text = line.rpartition(" ")
            series, _, value_text = head.rpartition(" ")
            if series != prev_series:
                entry = known.get(series)
                prev_series = series
            if entry is not None and value_text.isprintable() and ts_text.isprintable():
                try:
                    value = float(value_text)
                    ts = float(ts_text)
                except ValueError:
                    pass
                else:
                    if ts > 1e11:
                        ts /= 1000.0
                    if ts >= entry[1] and ts != math.inf:
                        entry[1] = ts
                        target = entry[0]
                        if target is not None and target.transform == "copy":
                            n_fast += 1
                            if isfinite(value):
                                out.append((ts, target.family, target.labels, value * target.scale))
                        else:
                            add(target, entry[2], ts, value)
                        continue
        # The strict path.
        if eof:
            if line.strip():
                raise ParseError("content after '# EOF'", source=source, line=lineno)
            continue
        if not line or line.isspace():
            continue
        if line[0] == "#":
            if line.strip() == "# EOF":
                eof = True
            elif line.split(None, 2)[1:2] in (["TYPE"], ["HELP"], ["UNIT"]):
                parts = line.split(None, 3)
                if len(parts) < 3 or not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", parts[2]):
                    raise ParseError(f"malformed {parts[1]} line", source=source, line=lineno)
            continue
        m = match(line)
        if m is None:
            raise ParseError(f"not a sample line: {line[:60]!r}", source=source, line=lineno)
        name, block, value_text, ts_text = m.groups()
        if ts_text is None:
            raise ParseError(
                f"sample of {name} has no timestamp (replay needs timestamps)",
                source=source,
                line=lineno,
            )
        try:
            value = _number(value_text)
            ts = float(ts_text)
        except ValueError:
            raise ParseError(f"bad number in {line[:60]!r}", source=source, line=lineno) from None
        if not math.isfinite(ts):
            raise ParseError("timestamp is not finite", source=source, line=lineno)
        if ts > 1e11:
            ts /= 1000.0  # Prometheus text format: milliseconds
        key = name + (block or "")
        st = known.get(key)
        if st is None:
            try:
                labels = parse_labels(block[1:-1]) if block else {}
            except ValueError as exc:
                raise ParseError(str(exc), source=source, line=lineno) from None
            st = known[key] = [map_series(name, labels), -math.inf, name]
            prev_series = ""  # the fast path's memo may hold a miss for this text
            if ts < lo:
                lo, lo_line = ts, lineno
        if ts < st[1]:
            raise ParseError(
                f"timestamp of {name} goes back in time ({ts} < {st[1]})",
                source=source,
                line=lineno,
            )
        st[1] = ts
        add(st[0], name, ts, value)
    mapper.samples += n_fast
    if lineno == 0:
        raise ParseError("empty input", source=source)
    if not known or lo == math.inf:
        return None
    hi = max(e[1] for e in known.values())
    check_span(lo, hi, source, lo_line)
    return lo, hi


def write_openmetrics(
    samples: Iterable[Reading],
    out: Callable[[str], Any],
    *,
    rename: Callable[[str, tuple[str, ...]], tuple[str, dict[str, str], float] | None]
    | None = None,
    extra_labels: dict[str, str] | None = None,
) -> int:
    """Write readings as OpenMetrics text with timestamps, grouped by family.

    ``rename`` may turn a reading into another exporter's name, labels and
    value (used by tests to produce dcgm-exporter / node_exporter names).
    Returns the number of samples written.
    """
    fams: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    kinds: dict[str, str] = {}
    extra = extra_labels or {}
    for r in samples:
        spec = sig.SIGNAL_SPECS[r.name]
        ts = r.ts if r.ts is not None else 0.0
        if rename is not None:
            renamed = rename(r.name, r.labels)
            if renamed is None:
                continue
            name, labels, factor = renamed
            value = r.value * factor
            kind = "unknown"
        else:
            labels = dict(zip(spec.labels, r.labels, strict=True))
            kind = spec.kind.value
            name = spec.name + ("_total" if spec.kind is MetricKind.COUNTER else "")
            value = r.value
        family = name[:-6] if kind == "counter" else name
        kinds[family] = kind
        key = tuple(sorted({**labels, **extra}.items()))
        fams.setdefault(family, {}).setdefault((("__name__", name), *key), []).append((ts, value))
    n = 0
    for family, series in fams.items():
        out(f"# TYPE {family} {kinds[family]}\n")
        for key, points in series.items():
            name = key[0][1]
            text = ",".join(
                f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                for k, v in key[1:]
            )
            prefix = f"{name}{{{text}}}" if text else name
            for ts, value in points:
                out(f"{prefix} {value!r} {ts!r}\n")
                n += 1
    out("# EOF\n")
    return n


# ---------------------------------------------------------------------------
# Prometheus HTTP API


def _prom_get(url: str, params: dict[str, str], timeout: float) -> Any:
    full = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(params)
    if not full.startswith(("http://", "https://")):
        msg = f"Prometheus URL must be http(s): {url!r}"
        raise ReplayError(msg)
    try:
        with urllib.request.urlopen(full, timeout=timeout) as resp:  # noqa: S310 - scheme checked
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        msg = f"Prometheus at {url} answered HTTP {exc.code}: {detail}"
        raise ReplayError(msg) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        msg = f"cannot query Prometheus at {url}: {reason}"
        raise ReplayError(msg) from None
    try:
        doc = json.loads(body)
    except ValueError:
        msg = f"Prometheus at {url} did not answer JSON: {body[:80]!r}"
        raise ReplayError(msg) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        msg = f"Prometheus query failed: {err or 'unexpected answer'}"
        raise ReplayError(msg)
    return doc.get("data")


def prom_query(url: str, params: dict[str, str], timeout: float) -> Any:
    """One instant query (``/api/v1/query``): its ``data``; :class:`ReplayError` on failure."""
    return _prom_get(url, params, timeout)


def selector(matchers: Sequence[str]) -> str:
    """``["node=a", "job=~dcgm.*"]`` -> ``{__name__=~"...",node="a",job=~"dcgm.*"}``."""
    parts = [f'__name__=~"{SOURCE_NAME_REGEX}"']
    for m in matchers:
        found = re.fullmatch(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*(.*?)\s*", m)
        if found is None:
            msg = f"--match expects label=value (or =~, !=, !~), got {m!r}"
            raise ReplayError(msg)
        label, op, value = found.groups()
        value = value.strip('"').replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{label}{op}"{value}"')
    return "{" + ",".join(parts) + "}"


def fetch_prometheus(
    url: str,
    start: float,
    end: float,
    matchers: Sequence[str],
    mapper: Mapper,
    *,
    chunk: float = 3600.0,
    timeout: float = 30.0,
    progress: Callable[[float], None] | None = None,
) -> None:
    """Fetch raw samples in ``[start, end]`` chunk by chunk into ``mapper``."""
    if end <= start:
        msg = f"--to ({end}) must be after --from ({start})"
        raise ReplayError(msg)
    sel = selector(matchers)
    cache: dict[tuple[str, tuple[tuple[str, str], ...]], Target | None] = {}
    lo = start - 0.001  # range vectors are left-open
    while lo < end:
        hi = min(end, lo + chunk)
        width_ms = max(1, round((hi - lo) * 1000))
        data = _prom_get(url, {"query": f"{sel}[{width_ms}ms]", "time": f"{hi:.3f}"}, timeout)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            msg = "Prometheus answered no matrix for a range-vector query"
            raise ReplayError(msg)
        for series in data.get("result", []):
            metric = dict(series.get("metric", {}))
            name = metric.pop("__name__", "")
            key = (name, tuple(sorted(metric.items())))
            if key not in cache:
                cache[key] = map_series(name, metric)
            target = cache[key]
            for ts, value in series.get("values", []):
                try:
                    mapper.add(target, name, float(ts), _number(value))
                except (TypeError, ValueError):
                    msg = f"Prometheus returned a malformed sample for {name}: {[ts, value]!r}"
                    raise ReplayError(msg) from None
        if progress is not None:
            progress(hi - lo)
        lo = hi


# ---------------------------------------------------------------------------
# Running the engine


@dataclass(slots=True)
class ReplayResult:
    """What a replay found."""

    transitions: list[IncidentTransition] = field(default_factory=list)
    ticks: int = 0
    samples: int = 0
    readings: int = 0
    rejected: int = 0
    skipped: int = 0  # samples of families the engine does not read
    start: float = 0.0
    end: float = 0.0
    ignored: dict[str, int] = field(default_factory=dict)
    # Incidents still open when the data ended, as the engine saw them then
    # (GPU-seconds and end of the stall so far): no transition carries that.
    open_at_end: list[Incident] = field(default_factory=list)
    spans: int = 1  # processes' spans the result was stitched from (replay --jobs)
    spacing: float = math.nan  # median sample spacing seen (seconds)

    def incidents(self) -> list[IncidentTransition]:
        """The latest transition of each incident, by onset."""
        latest: dict[str, IncidentTransition] = {}
        for tr in self.transitions:
            latest[tr.incident.key] = tr
        return sorted(latest.values(), key=lambda t: (t.incident.onset, t.incident.key))


def replay_store(history: int = 600) -> SnapshotStore:
    """A fresh store with every signal family registered (one 'replay' source)."""
    store = SnapshotStore(history=history)
    store.register("replay", sig.SIGNAL_SPECS.values())
    return store


@dataclass(frozen=True, slots=True)
class TickPlan:
    """The tick grid of one replay and the samples the engine reads, shared by every span.

    Tick times are accumulated exactly as a single pass accumulates them, and
    ``expire`` marks the ticks that expire stale series, so a span run from
    any tick sees bit-identical times and housekeeping.
    """

    samples: Sequence[Sample]
    times: Sequence[float]
    ticks: Sequence[float]
    expire: Sequence[bool]
    start: float
    end: float
    skipped: int


def plan_replay(samples: Sequence[Sample], settings: EngineSettings) -> TickPlan:
    """The tick grid over time-sorted ``samples`` (families the engine reads only)."""
    tick = settings.tick
    first = samples[0][0]
    last = samples[-1][0]
    # Families the engine never reads cannot change its results: skip them
    # (the tick grid still spans every sample, as live ticks regardless).
    used = sig.ENGINE_FAMILIES
    kept: Sequence[Sample] = samples
    if any(sm[1] not in used for sm in samples):
        kept = [sm for sm in samples if sm[1] in used]
    times = [sm[0] for sm in kept]
    n = len(kept)
    t = math.floor(first / tick) * tick + tick / 2
    if t < first:
        t += tick
    ticks: list[float] = []
    expire: list[bool] = []
    last_expire = -math.inf
    i = 0
    while i < n or t <= last + tick:
        i = bisect_right(times, t, i)
        ticks.append(t)
        due = t - last_expire >= 60
        expire.append(due)
        if due:
            last_expire = t
        t += tick
        if i >= n and t > last + tick / 2:
            break
    return TickPlan(kept, times, ticks, expire, first, last, len(samples) - n)


@dataclass(slots=True)
class SpanRun:
    """What one span of ticks produced (see :func:`run_span`)."""

    transitions: list[IncidentTransition] = field(default_factory=list)
    ticks: int = 0
    readings: int = 0
    rejected: int = 0
    open_at_own_start: list[Any] = field(default_factory=list)
    open_at_own_end: list[Any] = field(default_factory=list)
    gpus_at_own_start: list[Any] = field(default_factory=list)
    gpus_at_own_end: list[Any] = field(default_factory=list)
    head: list[IncidentTransition] = field(default_factory=list)
    tail: list[IncidentTransition] = field(default_factory=list)


def _gpu_state(engine: Engine) -> list[Any]:
    """The detector's discrete per-GPU state (what later decisions branch on)."""
    return [
        (g.gpu, g.in_job, g.job, g.armed, g.idle, g.slow, g.signal)
        for _, g in sorted(engine.detector.gpus.items())
    ]


def run_span(
    plan: TickPlan,
    settings: EngineSettings,
    node: str,
    *,
    begin: int,
    own_from: int,
    own_to: int,
    end: int,
    head: int = 0,
    db: IncidentDB | None = None,
    progress: Callable[[int], None] | None = None,
) -> SpanRun:
    """Run a fresh store and engine over ticks ``[begin, end)`` of ``plan``.

    Ticks ``[begin, own_from)`` only warm the engine up; the transitions,
    counts and progress of ticks ``[own_from, own_to)`` are the span's own;
    transitions of ``[own_to, end)`` are kept apart (``tail``) so a caller can
    check that the next span, started fresh, agrees with this one there: that
    span keeps its transitions of its first ``head`` own ticks in ``head``.
    """
    out = SpanRun()
    store = replay_store()
    engine = Engine(settings, store, node, db)
    samples, times, ticks, expire = plan.samples, plan.times, plan.ticks, plan.expire
    ingest = store.ingest
    new_reading = tuple.__new__  # Reading(...) without NamedTuple's Python-level __new__
    i = 0 if begin == 0 else bisect_right(times, ticks[begin - 1])
    for k in range(begin, end):
        t = ticks[k]
        own = own_from <= k < own_to
        if k == own_from:
            out.open_at_own_start = engine.open_incidents()
            out.gpus_at_own_start = _gpu_state(engine)
        j = bisect_right(times, t, i)
        if j > i:
            # One batch per tick, as the daemon ingests one collection at a time.
            batch = [
                new_reading(Reading, (name, labels, value, ts, None, None))
                for ts, name, labels, value in samples[i:j]
            ]
            res = ingest("replay", batch, now=t)
            if own:
                out.readings += res.accepted
                out.rejected += res.rejected
                if progress is not None:
                    progress(j - i)
            i = j
        if expire[k]:
            store.expire(t)
        transitions = engine.tick(t, t)
        if own:
            out.transitions.extend(transitions)
            out.ticks += 1
            if k < own_from + head:
                out.head.extend(transitions)
        elif k >= own_to:
            out.tail.extend(transitions)
        if k == own_to - 1:
            out.open_at_own_end = engine.open_incidents()
            out.gpus_at_own_end = _gpu_state(engine)
    return out


def run_replay(
    samples: Sequence[Sample],
    settings: EngineSettings | None = None,
    *,
    node: str = "replay",
    db: IncidentDB | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Feed time-sorted samples into a fresh store and tick the engine on the grid."""
    settings = settings or EngineSettings()
    result = ReplayResult()
    if not samples:
        return result
    plan = plan_replay(samples, settings)
    result.start, result.end = plan.start, plan.end
    result.skipped = plan.skipped
    if progress is not None and plan.skipped:
        progress(plan.skipped)
    n = len(plan.ticks)
    span = run_span(
        plan, settings, node, begin=0, own_from=0, own_to=n, end=n, db=db, progress=progress
    )
    result.transitions = span.transitions
    result.ticks = span.ticks
    result.readings = span.readings
    result.rejected = span.rejected
    result.open_at_end = span.open_at_own_end
    sp = sample_spacing(samples)
    result.spacing = sp.median if sp is not None else math.nan
    return result


def read_files(
    paths: Sequence[str], mapper: Mapper, open_text: Callable[[str], Iterator[str]]
) -> None:
    """Parse several OpenMetrics files (``-`` is standard input) into ``mapper``."""
    lo, hi = math.inf, -math.inf
    for path in paths:
        span = parse_openmetrics(open_text(path), mapper, source=path)
        if span is not None:
            lo, hi = min(lo, span[0]), max(hi, span[1])
    if hi >= lo:
        check_span(lo, hi, ", ".join(paths))
