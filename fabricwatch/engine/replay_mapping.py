"""Replay's name mapping: source series (fabricwatch's own, dcgm-exporter,
node_exporter, snmp_exporter) to the engine's families.

:func:`map_series` says where one series goes (a :class:`Target`);
:class:`Mapper` applies the stateful conversions and collects the samples.
:data:`MAPPING_TABLE` documents the mapping (also in ``docs/replay-mapping.md``).
"""

from __future__ import annotations

import itertools
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Generic, TypeVar

from fabricwatch import nicnames
from fabricwatch.counters import CounterTracker
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_refresh import held_mask, refresh_periods
from fabricwatch.errors import FabricwatchError
from fabricwatch.nicnames import classify_exported
from fabricwatch.readings import MetricKind

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
    (
        "DCGM_FI_DEV_POWER_USAGE{gpu,UUID,modelName,pci_bus_id}",
        sig.GPU_INFO,
        "1 once a minute: the model is the device class (its power limit where none is mapped)",
    ),
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
        "gauge of the last XID: each change to a non-zero value counts one event; "
        "the counts are held on every later sample",
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
        "node_disk_writes_completed_total{device}",
        sig.ST_WRITE_OPS,
        "count, path=device (same filter); bytes / writes is the request size",
    ),
    (
        "node_mountstats_nfs_total_write_bytes_total{export,protocol,mountaddr}",
        sig.ST_WRITE_BYTES,
        "bytes sent to the NFS server, path=export (an NFS mount: the remote device class)",
    ),
    (
        "node_mountstats_nfs_operations_request_time_seconds_total / "
        "_operations_requests_total{export,...,operation=WRITE}",
        sig.ST_WRITE_LAT,
        "delta execute time / delta WRITE requests, path=export; other operations dropped",
    ),
    (
        "node_mountstats_nfs_operations_requests_total{export,...,operation=WRITE}",
        sig.ST_WRITE_OPS,
        "count of WRITE requests, path=export",
    ),
    (
        "node_network_carrier{device}",
        sig.NIC_LINK_UP,
        "1 -> 1, else 0; the netdev's RDMA port (fabricwatch_nic_info / --nic-map), port=1 "
        "without one; container/overlay netdevs dropped",
    ),
    (
        "node_network_carrier_down_changes_total{device}",
        sig.NIC_LINK_DOWNED,
        "count: each carrier loss is one link-down event, also between two scrapes",
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
    "|node_mountstats_nfs_(total_write_bytes_total|operations_requests_total"
    "|operations_request_time_seconds_total)|node_network_carrier(_down_changes_total)?"
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
# node_exporter's mountstats collector (collector/mountstats_linux.go), labels
# export, protocol, mountaddr (+ operation): the bytes sent to the server, and
# per operation the RPC count and the total execute time ("request time":
# queue + round trip, what the live storage collector takes as NFS latency).
_NFS_WRITE_BYTES = "node_mountstats_nfs_total_write_bytes_total"
_NFS_OPS = {
    "node_mountstats_nfs_operations_requests_total": "disk_ops",
    "node_mountstats_nfs_operations_request_time_seconds_total": "disk_time",
}
# node_exporter's netclass collector (collector/netclass_linux.go), label device
# (the netdev): the carrier state and the count of carrier-down changes.
_CARRIER = {
    "node_network_carrier": "_carrier",
    "node_network_carrier_down_changes_total": "_carrier_down",
}
_CARRIER_FAMILIES = {"_carrier": sig.NIC_LINK_UP, "_carrier_down": sig.NIC_LINK_DOWNED}
VIRTUAL_NETDEV = re.compile(
    r"^(?:lo|docker\d*|veth.*|br-.*|virbr\d+.*|cni\d+|flannel\..*|cali.*|cilium_.*|lxc.*"
    r"|kube-.*|vxlan.*|genev.*|tun\d+|tap.*|wg\d+|dummy\d+)$"
)
"""Netdevs that are never an RDMA port: loopback, container and overlay devices."""
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
    model = labels.get("modelName", "")
    if family == sig.GPU_POWER and model:
        # The GPU's identity rides on its power series: the model is its
        # device class (the power limit where none is exported).
        ident = (gpu, labels.get("UUID", ""), model, labels.get("pci_bus_id", ""))
        return Target(family, ident, "power_info", scale, True)
    return Target(family, values, transform, scale, True)


def _own(name: str, labels: dict[str, str]) -> Target | None:
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


def _disk(name: str, labels: dict[str, str]) -> Target | None:
    device = labels.get("device")
    if device is None:
        return None
    if BLOCK_DEVICE_EXCLUDE.match(device):
        return Target(sig.ST_WRITE_BYTES, (device,), "drop:block_device")
    if name == "node_disk_written_bytes_total":
        return Target(sig.ST_WRITE_BYTES, (device,))
    part = "time" if "time" in name else "ops"
    return Target(sig.ST_WRITE_LAT, (device,), f"disk_{part}")


def _nfs(name: str, labels: dict[str, str]) -> Target | None:
    """An NFS mount is a storage path named by its export (``server:/vol``): the
    engine's storage scorer gives a path that is no local disk name the remote
    device class (its latency floor ``storage_latency_min``)."""
    export = labels.get("export")
    if not export:
        return None
    if name == _NFS_WRITE_BYTES:
        return Target(sig.ST_WRITE_BYTES, (export,))
    part = _NFS_OPS.get(name)
    if part is None:
        return None
    if labels.get("operation") != "WRITE":
        return Target(sig.ST_WRITE_LAT, (export,), "drop:nfs_not_write")
    # Same interval rule as diskstats: execute-time delta / WRITE-count delta.
    return Target(sig.ST_WRITE_LAT, (export,), part)


def _carrier(name: str, labels: dict[str, str]) -> Target | None:
    """Carrier state and carrier-down changes of a netdev: the RDMA port's link
    state and link-down events (renamed to the RDMA device in :meth:`Mapper.finish`)."""
    device = labels.get("device")
    family = _CARRIER.get(name)
    if device is None or family is None:
        return None
    if VIRTUAL_NETDEV.match(device):
        return Target(family, (device, "1"), "drop:virtual_netdev")
    return Target(family, (device, "1"), "carrier")


def _node(name: str, labels: dict[str, str]) -> Target | None:
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
        return _disk(name, labels)
    if name.startswith("node_mountstats_nfs_"):
        return _nfs(name, labels)
    if name.startswith("node_network_carrier"):
        return _carrier(name, labels)
    return None


def map_series(name: str, labels: dict[str, str]) -> Target | None:
    """Where a source series goes, or None when the engine does not use it."""
    if name.startswith("fabricwatch_"):
        return _own(name, labels)
    if name.startswith("DCGM_FI_"):
        return _dcgm(name, labels)
    if name.startswith("node_"):
        return _node(name, labels)
    return _snmp(name, labels)


def _snmp(name: str, labels: dict[str, str]) -> Target | None:
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


class Mapper:
    """Turns source samples into fabricwatch samples, one series at a time.

    Stateful conversions (rate integration, microsecond counters to
    fractions, last-XID gauges, disk latency, MIG aggregation) keep
    per-series state, so each series must arrive in time order (OpenMetrics
    and Prometheus both guarantee it).

    Attributes:
        ignored: samples per source name that no mapping reads.
        dropped: samples dropped on purpose, by reason (``dcgm_blank``,
            ``block_device``, ``saturated``, ``no_link_rate``, ``gpu_util_has_gr``,
            ``nfs_not_write``, ``virtual_netdev``, ``not_rdma_netdev``).
        unused: after :meth:`finish`, samples per mapped family no engine part reads.
    """

    def __init__(self, nic_map: dict[str, tuple[str, str]] | None = None) -> None:
        self._tracker = CounterTracker()
        self._state: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._xid_codes: dict[str, list[str]] = {}
        self._last_ts: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._disk: dict[tuple[str, str], dict[float, float]] = {}
        self._info_ts: dict[str, float] = {}
        self._mig: dict[tuple[str, Target], dict[str, list[tuple[float, float]]]] = {}
        self._wait: dict[tuple[str, ...], list[tuple[float, float]]] = {}
        self._rates: dict[tuple[str, ...], list[tuple[float, float]]] = {}
        self._integrate: dict[tuple[str, tuple[str, ...], str], list[tuple[float, float]]] = {}
        self._speed_high: set[tuple[str, ...]] = set()
        self._nic_map: dict[str, tuple[str, str]] = dict(nic_map or {})
        self._own: set[tuple[str, tuple[str, ...]]] = set()
        # Pause-time counters become ratios as they come: their stale
        # repeats are found on the way (the other counters' in finish()).
        self._stale: _StaleRepeats[tuple[Target, Hashable, float, float]] = _StaleRepeats()
        self._dcgm_seen = False
        self._ifspeed_seen = False
        self._carrier_seen = False
        self.out: list[Sample] = []
        self.ignored: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.unused: dict[str, int] = {}
        self.samples = 0

    def _us_ratio(self, target: Target, key: Hashable, ts: float, value: float) -> None:
        """A pause-time counter (microseconds) as the share of time paused."""
        rate = self._tracker.update(key, value, ts)
        if rate is not None:
            self.out.append((ts, target.family, target.labels, min(1.0, rate.per_second / 1e6)))

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
        if source.startswith("fabricwatch_"):
            # The daemon's own export is what its engine read live, repeats
            # and all: replayed as it is, so replay equals live.
            self._own.add((target.family, target.labels))
        elif target.dcgm:
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
            # Integrated in finish(), once the rate's held repeats are known.
            key = (target.family, target.labels, source)
            self._integrate.setdefault(key, []).append((ts, value * target.scale))
        elif tr == "us_ratio":
            series = (source, target.labels)
            if source.startswith("fabricwatch_"):
                self._us_ratio(target, series, ts, value)
            else:
                for kept in self._stale.push(series, ts, value, (target, series, ts, value)):
                    self._us_ratio(*kept)
        elif tr == "last_xid":
            self._xid(target, ts, value)
        elif tr == "power_info":
            gpu = target.labels[0]
            out.append((ts, target.family, (gpu,), value * target.scale))
            # Once a minute: a series expires when not refreshed for minutes.
            if ts - self._info_ts.get(gpu, -math.inf) >= 60.0:
                self._info_ts[gpu] = ts
                out.append((ts, sig.GPU_INFO, target.labels, 1.0))
        elif tr in ("disk_time", "disk_ops"):
            # Raw totals: the latency needs both counters' deltas over the
            # very same interval (finish()), which smoothed rates are not.
            self._disk.setdefault((tr, target.labels[0]), {})[ts] = value
            if tr == "disk_ops":  # the count itself: bytes / writes is the request size
                out.append((ts, sig.ST_WRITE_OPS, target.labels, value))
        else:
            self._apply_more(target, source, ts, value)

    def _apply_more(self, target: Target, source: str, ts: float, value: float) -> None:
        tr = target.transform
        if tr == "mig":
            key = (source, replace(target, instance=""))
            by_instance = self._mig.setdefault(key, {})
            by_instance.setdefault(target.instance, []).append((ts, value))
        elif tr.startswith("drop:"):
            self._drop(tr[5:])
        elif tr == "carrier":
            self._carrier_seen = True
            if target.family == "_carrier":
                value = 1.0 if value == 1 else 0.0
            self.out.append((ts, target.family, target.labels, value))
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
        codes = self._xid_codes.setdefault(gpu, [])
        # The first sample's XID happened at some unknown earlier time.
        new = prev is not None and value != prev and value > 0
        labels = (gpu, str(int(value))) if new else None
        # Each XID count the GPU has goes on with every sample of its gauge,
        # as the live collector's counters do: a count written only when it
        # moved went stale and was expired five minutes after its event, and
        # a job hung by that XID for longer lost its cause on the next
        # re-score.
        for code in codes:
            if (gpu, code) != labels:
                held = self._state[(target.family, (gpu, code), "count")]
                self.out.append((ts, target.family, (gpu, code), held))
        if labels is None:
            return
        ckey = (target.family, labels, "count")
        count = self._state.get(ckey)
        if count is None:
            count = 0.0
            codes.append(labels[1])
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

    def _refresh_periods(self) -> dict[tuple[str, tuple[str, ...], str], float]:
        """The refresh period of each slow-refresh series, mapped or to be
        integrated (:func:`~fabricwatch.engine.replay_refresh.refresh_periods`;
        keys are (family, labels, source), source '' for mapped series)."""
        series: dict[tuple[str, tuple[str, ...], str], tuple[list[float], list[float]]] = {}
        own = self._own
        for ts, family, labels, value in self.out:
            if (family, labels) in own:
                continue
            times, values = series.setdefault((family, labels, ""), ([], []))
            times.append(ts)
            values.append(value)
        for key, points in self._integrate.items():
            series[key] = ([t for t, _ in points], [v for _, v in points])
        for times, values in series.values():
            if any(b < a for a, b in itertools.pairwise(times)):
                order = sorted(range(len(times)), key=times.__getitem__)
                times[:] = [times[i] for i in order]
                values[:] = [values[i] for i in order]
        # One exporter refreshes one kind of device: fabricwatch_<kind>_...
        group = {key: _device_kind(key[0]) for key in series}
        return refresh_periods(series, group)

    def _finish_integrate(self, periods: dict[tuple[str, tuple[str, ...], str], float]) -> None:
        """Rates (bytes/s) integrated into byte counters. A rate re-read from a
        slow-refresh exporter's cache is no new sample: the next fresh rate
        covers the whole refresh interval (:mod:`~fabricwatch.engine.replay_refresh`)."""
        for key, points in sorted(self._integrate.items()):
            family, labels, _ = key
            period = periods.get(key)
            mask = None
            if period is not None:
                mask = held_mask([t for t, _ in points], [v for _, v in points], period)
                self._drop("held_repeat", mask.count(False))
            total = 0.0
            prev: float | None = None
            for i, (ts, rate) in enumerate(points):
                if mask is not None and not mask[i]:
                    continue
                if prev is not None and ts > prev:
                    total += max(rate, 0.0) * (ts - prev)
                prev = ts
                self.out.append((ts, family, labels, float(round(total))))
        self._integrate.clear()

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
            for ts, lat in _disk_latencies(times, ops):
                self.out.append((ts, sig.ST_WRITE_LAT, (device,), lat))
        self._disk.clear()
        self._finish_mig()
        for kept in self._stale.flush():
            self._us_ratio(*kept)
        self._finish_xmit_wait()
        periods = self._refresh_periods()
        self._finish_integrate(periods)
        out = self.out
        if self._dcgm_seen or self._ifspeed_seen:
            out = self._finish_dcgm_speed(out)
        if self._carrier_seen:
            out = self._finish_carrier(out)
        if self._nic_map:
            out = self._merge_members([self._nic_identity(s) for s in out])
        out.sort(key=itemgetter(0))
        out, held = _without_held_repeats(out, periods)
        if held:
            self._drop("held_repeat", held)
        out = _without_stale_counts(out)
        out, repeats = _without_stale_repeats(out, self._own)
        repeats += self._stale.dropped
        if repeats:
            self._drop("stale_repeat", repeats)
        self.out = out
        counts = Counter(map(itemgetter(1), out))
        self.unused = {f: n for f, n in sorted(counts.items()) if f not in sig.ENGINE_FAMILIES}
        return out

    def _finish_carrier(self, out: list[Sample]) -> list[Sample]:
        """Netdev carrier series to NIC link families. Where the data names the
        RDMA ports (``fabricwatch_nic_info``, ``--nic-map``), the live NIC
        collector watches only those: other netdevs are dropped (``not_rdma_netdev``)."""
        kept: list[Sample] = []
        dropped = 0
        for s in out:
            family = _CARRIER_FAMILIES.get(s[1])
            if family is None:
                kept.append(s)
            elif self._nic_map and s[2][0] not in self._nic_map:
                dropped += 1
            else:
                kept.append((s[0], family, s[2], s[3]))
        if dropped:
            self._drop("not_rdma_netdev", dropped)
        return kept

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
        """Series mapped to one RDMA port at one time (bond members, or a netdev's
        carrier next to the port's own state): counts summed, pause ratios the
        worst member, link state down if any member is down."""
        groups: dict[tuple[float, str, tuple[str, ...]], list[float]] = {}
        rest: list[Sample] = []
        for s in out:
            if s[1] in _NIC_FAMILIES:
                groups.setdefault((s[0], s[1], s[2]), []).append(s[3])
            else:
                rest.append(s)
        for (ts, family, labels), values in groups.items():
            merge = _MERGE.get(family, sum)
            rest.append((ts, family, labels, merge(values)))
        return rest


def _device_kind(family: str) -> str:
    """The kind of device a mapped family is of (``gpu``, ``nic``, ...)."""
    if family == _GR:
        return "gpu"
    parts = family.split("_")
    return parts[1] if len(parts) > 2 else family


def _without_held_repeats(
    samples: list[Sample], periods: Mapping[tuple[str, tuple[str, ...], str], float]
) -> tuple[list[Sample], int]:
    """``samples`` (sorted by time) without the held repeats of slow-refresh
    series (refresh ``periods`` by (family, labels, '')), and how many were
    dropped (:func:`~fabricwatch.engine.replay_refresh.held_mask`)."""
    if not periods:
        return samples, 0
    series: dict[tuple[str, tuple[str, ...], str], list[int]] = {}
    for i, s in enumerate(samples):
        key = (s[1], s[2], "")
        if key in periods:
            series.setdefault(key, []).append(i)
    drop: list[int] = []
    for key, idx in series.items():
        mask = held_mask([samples[i][0] for i in idx], [samples[i][3] for i in idx], periods[key])
        drop.extend(i for i, new in zip(idx, mask, strict=True) if not new)
    if not drop:
        return samples, 0
    gone = set(drop)
    return [s for i, s in enumerate(samples) if i not in gone], len(gone)


def _without_stale_counts(samples: list[Sample]) -> list[Sample]:
    """``samples`` (sorted by time) without counter values that went back
    between two that did not: a stale or out-of-order sample of an export
    (two samples' values swapped), not a reset. A reset or a wrap stays
    below the old value on the next sample too; read as a reset, the stale
    value would count the increase since it twice, on the next sample."""
    # Per series: the last sample kept, and a later one that went below it.
    runs: dict[tuple[str, tuple[str, ...]], tuple[int, int | None]] = {}
    stale: list[int] = []
    for i, (_, fam, labels, value) in enumerate(samples):
        if fam not in _COUNTER_FAMILIES:
            continue
        key = (fam, labels)
        run = runs.get(key)
        if run is None:
            runs[key] = (i, None)
            continue
        kept, low = run
        if value >= samples[kept][3]:
            if low is not None:
                stale.append(low)
            runs[key] = (i, None)
        elif low is None:
            runs[key] = (kept, i)
        else:
            # Still below it: the counter did restart, at the earlier low sample.
            runs[key] = (i, None) if value >= samples[low][3] else (low, i)
    if not stale:
        return samples
    drop = set(stale)
    return [x for i, x in enumerate(samples) if i not in drop]


_Item = TypeVar("_Item")


def _made_up_for(
    before: tuple[float, float, float, float], repeat: float, after: tuple[float, float]
) -> bool:
    """Whether a counter's repeated value at ``repeat`` was a stale sample: the
    counter moved over ``before`` (t0, v0, t1, v1) and its step to ``after``
    (ts, value) is at least 1.5 times that, per second (see :class:`_StaleRepeats`)."""
    t0, v0, t1, v1 = before
    ts, value = after
    if not (t1 > t0 and ts > repeat and v1 > v0):
        return False
    return (value - v1) / (ts - repeat) >= 1.5 * (v1 - v0) / (t1 - t0)


class _StaleRepeats(Generic[_Item]):
    """Counter values repeated for one sample between moving ones whose next
    step makes up for it (at least 1.5 times the step before it, per
    second): stale samples of a noisy export, not intervals without events.
    Read as one, a pause counter at 96 % reads 0 % for a sample and then
    192 %, and the storm no longer lasts (cross-check seed 18036: a switch
    PFC storm at 10 s came out ``unknown``). Without the value the rate
    covers both intervals, as over a missing sample. A quiet counter's
    repeats (its step before is 0) and a repeat at the end stay.

    Fed one series' samples in time order (:meth:`push`), it returns the
    items now known to be kept, a repeat's one sample late; :meth:`flush`
    returns those still waiting at the end."""

    def __init__(self) -> None:
        self._prev: dict[Hashable, tuple[float, float, float, float]] = {}
        self._pending: dict[Hashable, tuple[float, _Item]] = {}
        self.dropped = 0

    def push(self, key: Hashable, ts: float, value: float, item: _Item) -> list[_Item]:
        """The items of series ``key`` kept as of its sample (``ts``, ``value``)."""
        prev = self._prev.get(key)
        if prev is None:
            self._prev[key] = (math.nan, math.nan, ts, value)
            return [item]
        out: list[_Item] = []
        pending = self._pending.pop(key, None)
        if pending is not None:
            repeat, held = pending
            if _made_up_for(prev, repeat, (ts, value)):
                self.dropped += 1
                self._prev[key] = (prev[2], prev[3], ts, value)
                return [item]
            out.append(held)
            prev = (prev[2], prev[3], repeat, prev[3])
        if value == prev[3] and prev[3] > prev[1]:
            self._pending[key] = (ts, item)
            self._prev[key] = prev
            return out
        self._prev[key] = (prev[2], prev[3], ts, value)
        out.append(item)
        return out

    def flush(self) -> list[_Item]:
        """The repeats still waiting for a next sample: kept."""
        out = [held for _, held in self._pending.values()]
        self._pending.clear()
        return out


def _without_stale_repeats(
    samples: list[Sample], own: Collection[tuple[str, tuple[str, ...]]]
) -> tuple[list[Sample], int]:
    """``samples`` (sorted by time) without the stale repeats of counters
    (:class:`_StaleRepeats`), except in the daemon's own export (``own``:
    replayed as the engine read it live). Returns them and how many were dropped."""
    found: _StaleRepeats[int] = _StaleRepeats()
    keep = bytearray(len(samples))
    for i, (ts, fam, labels, value) in enumerate(samples):
        if fam not in _COUNTER_FAMILIES or (fam, labels) in own:
            keep[i] = 1
            continue
        for j in found.push((fam, labels), ts, value, i):
            keep[j] = 1
    for j in found.flush():
        keep[j] = 1
    if not found.dropped:
        return samples, 0
    return list(itertools.compress(samples, keep)), found.dropped


_NIC_FAMILIES = frozenset(
    {sig.NIC_PFC_FRAMES, sig.NIC_PFC_RATIO, sig.NIC_LINK_UP, sig.NIC_LINK_DOWNED}
)
_MERGE: dict[str, Callable[[list[float]], float]] = {sig.NIC_PFC_RATIO: max, sig.NIC_LINK_UP: min}
_SCALE = {sig.GPU_UTIL: 0.01, sig.GPU_MEM: 1048576.0}


def _disk_latencies(
    times: dict[float, float], ops: dict[float, float]
) -> list[tuple[float, float]]:
    """Write latencies of one disk from its raw write-time and write-count
    totals, at the timestamps both counters share.

    A latency is the write time over the writes of the same interval. Where
    the two refresh in different cycles one moves while the other does not,
    and the next interval holds the other's late delta: once in a while (at
    job end) both intervals are skipped, as a write-time delta over a
    near-zero write count reads as a huge spike. Where they are out of step
    more often than in step (exporters that refresh them in alternate
    scrapes) skipping would leave no latency at all: the span then runs on
    from its start until both have moved, so it holds both deltas.
    """
    stamps = sorted(t for t in times if t in ops)
    moves = [
        (times[b] - times[a] > 0, ops[b] - ops[a] > 0)
        for a, b in itertools.pairwise(stamps)
        if times[b] >= times[a] and ops[b] >= ops[a]
    ]
    apart = sum(t != n for t, n in moves) > sum(t and n for t, n in moves)
    out: list[tuple[float, float]] = []
    prev: tuple[float, float] | None = None
    in_step = True
    for ts in stamps:
        busy_total, n_total = times[ts], ops[ts]
        if prev is None or busy_total < prev[0] or n_total < prev[1]:
            prev = (busy_total, n_total)  # first sample or a reset
            in_step = True
            continue
        busy, n = busy_total - prev[0], n_total - prev[1]
        step = (busy > 0) == (n > 0)
        if apart and not step:
            continue  # one counter refreshed without the other: wait for it
        prev = (busy_total, n_total)
        if step and in_step:
            out.append((ts, busy / n if n > 0 else 0.0))
        in_step = step or apart
    return out
