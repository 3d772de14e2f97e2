"""The metric families the engine reads (``docs/signals.md``) and small readers.

The names and label orders here are the contract with the collectors; the
specs are also what replay and the scenario simulator register in a fresh
:class:`~fabricwatch.store.SnapshotStore`, so live and replay share one shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from fabricwatch.readings import MetricKind, MetricSpec
from fabricwatch.store import Series

G = MetricKind.GAUGE
C = MetricKind.COUNTER
H = MetricKind.HISTOGRAM

GPU_UTIL = "fabricwatch_gpu_utilization_ratio"
GPU_SM = "fabricwatch_gpu_sm_active_ratio"
GPU_POWER = "fabricwatch_gpu_power_watts"
GPU_POWER_LIMIT = "fabricwatch_gpu_power_limit_watts"
GPU_MEM = "fabricwatch_gpu_memory_used_bytes"
GPU_PROCS = "fabricwatch_gpu_compute_processes"
GPU_HEALTHY = "fabricwatch_gpu_healthy"
GPU_XID = "fabricwatch_gpu_xid_errors"
NVLINK_TX = "fabricwatch_gpu_nvlink_transmit_bytes"
NVLINK_RX = "fabricwatch_gpu_nvlink_receive_bytes"
NVLINK_ERRORS = "fabricwatch_gpu_nvlink_errors"
NVLINK_UP = "fabricwatch_gpu_nvlink_up"
GPU_INFO = "fabricwatch_gpu_info"
GPU_JOB = "fabricwatch_gpu_job_info"
SW_PFC_RATIO = "fabricwatch_switch_pfc_pause_ratio"
SW_PFC_FRAMES = "fabricwatch_switch_pfc_pause_frames"
SW_ECN = "fabricwatch_switch_ecn_marked_packets"
SW_PORT_UP = "fabricwatch_switch_port_up"
SW_RX_BYTES = "fabricwatch_switch_port_receive_bytes"
SW_TX_BYTES = "fabricwatch_switch_port_transmit_bytes"
SW_DISCARDS = "fabricwatch_switch_port_discards"
SW_SPEED = "fabricwatch_switch_port_speed_bytes"
NIC_PFC_RATIO = "fabricwatch_nic_pfc_pause_ratio"
NIC_PFC_FRAMES = "fabricwatch_nic_pfc_pause_frames"
NIC_ECN = "fabricwatch_nic_ecn_marked_packets"
NIC_CNP_SENT = "fabricwatch_nic_cnp_sent_packets"
NIC_CNP_HANDLED = "fabricwatch_nic_cnp_handled_packets"
NIC_XMIT_WAIT = "fabricwatch_nic_xmit_wait_ratio"
NIC_LINK_UP = "fabricwatch_nic_link_up"
NIC_LINK_DOWNED = "fabricwatch_nic_link_downed"
NIC_TX_BYTES = "fabricwatch_nic_transmit_bytes"
NIC_RX_BYTES = "fabricwatch_nic_receive_bytes"
NIC_RATE = "fabricwatch_nic_link_rate_bytes_per_second"
ST_PROBE_HIST = "fabricwatch_storage_probe_latency_seconds"
ST_PROBE_LAST = "fabricwatch_storage_probe_last_latency_seconds"
ST_PROBE_FAIL = "fabricwatch_storage_probe_failures"
ST_WRITE_LAT = "fabricwatch_storage_write_latency_seconds"
ST_WRITE_BYTES = "fabricwatch_storage_write_bytes"
ST_WRITE_BURST = "fabricwatch_storage_write_burst"

_SW = ("switch", "port")
_SWP = ("switch", "port", "priority", "direction")
_NIC = ("device", "port")
_NICP = ("device", "port", "priority", "direction")

SIGNAL_SPECS: Mapping[str, MetricSpec] = {
    s.name: s
    for s in (
        MetricSpec(GPU_UTIL, G, "NVML utilization.gpu, 0-1.", ("gpu",)),
        MetricSpec(GPU_SM, G, "SM activity, 0-1.", ("gpu",)),
        MetricSpec(GPU_POWER, G, "GPU power draw in watts.", ("gpu",)),
        MetricSpec(GPU_POWER_LIMIT, G, "Enforced power limit in watts.", ("gpu",)),
        MetricSpec(GPU_MEM, G, "Framebuffer memory used in bytes.", ("gpu",)),
        MetricSpec(GPU_PROCS, G, "Compute processes on the GPU.", ("gpu",)),
        MetricSpec(GPU_HEALTHY, G, "1 healthy, 0 lost or failed.", ("gpu",)),
        MetricSpec(GPU_XID, C, "XID events seen.", ("gpu", "xid")),
        MetricSpec(NVLINK_TX, C, "NVLink transmitted bytes.", ("gpu", "link")),
        MetricSpec(NVLINK_RX, C, "NVLink received bytes.", ("gpu", "link")),
        MetricSpec(NVLINK_ERRORS, C, "NVLink errors by type.", ("gpu", "link", "type")),
        MetricSpec(NVLINK_UP, G, "NVLink state, 1 active.", ("gpu", "link")),
        MetricSpec(GPU_INFO, G, "GPU identity.", ("gpu", "uuid", "model", "pci_bus_id")),
        MetricSpec(GPU_JOB, G, "Job owning the GPU's processes.", ("gpu", "job_id")),
        MetricSpec(SW_PFC_RATIO, G, "Switch PFC pause-time fraction, 0-1.", _SWP),
        MetricSpec(SW_PFC_FRAMES, C, "Switch PFC pause frames.", _SWP),
        MetricSpec(SW_ECN, C, "Switch ECN-marked packets.", ("switch", "port", "queue")),
        MetricSpec(SW_PORT_UP, G, "Switch port oper status, 1 up.", _SW),
        MetricSpec(SW_RX_BYTES, C, "Switch port received bytes.", _SW),
        MetricSpec(SW_TX_BYTES, C, "Switch port transmitted bytes.", _SW),
        MetricSpec(SW_DISCARDS, C, "Switch port discards.", (*_SW, "direction")),
        MetricSpec(SW_SPEED, G, "Switch port speed in bytes per second.", _SW),
        MetricSpec(NIC_PFC_RATIO, G, "Host NIC PFC pause-time fraction, 0-1.", _NICP),
        MetricSpec(NIC_PFC_FRAMES, C, "Host NIC PFC pause frames.", _NICP),
        MetricSpec(NIC_ECN, C, "RoCE packets received ECN-marked.", _NIC),
        MetricSpec(NIC_CNP_SENT, C, "CNPs sent.", _NIC),
        MetricSpec(NIC_CNP_HANDLED, C, "CNPs handled (rate cut).", _NIC),
        MetricSpec(NIC_XMIT_WAIT, G, "Share of time the port waited to transmit.", _NIC),
        MetricSpec(NIC_LINK_UP, G, "NIC port state, 1 active.", _NIC),
        MetricSpec(NIC_LINK_DOWNED, C, "NIC link_downed events.", _NIC),
        MetricSpec(NIC_TX_BYTES, C, "RDMA port transmitted bytes.", _NIC),
        MetricSpec(NIC_RX_BYTES, C, "RDMA port received bytes.", _NIC),
        MetricSpec(NIC_RATE, G, "RDMA port link rate in bytes per second.", _NIC),
        MetricSpec(ST_PROBE_HIST, H, "Storage probe latency in seconds.", ("path",)),
        MetricSpec(ST_PROBE_LAST, G, "Latest storage probe latency in seconds.", ("path",)),
        MetricSpec(ST_PROBE_FAIL, C, "Storage probe failures.", ("path", "reason")),
        MetricSpec(ST_WRITE_LAT, G, "Average write latency in seconds.", ("path",)),
        MetricSpec(ST_WRITE_BYTES, C, "Bytes written to the path.", ("path",)),
        MetricSpec(ST_WRITE_BURST, G, "1 while writes exceed their baseline.", ("path",)),
    )
}
"""Every family of ``docs/signals.md``, by name."""

FAMILY_GROUPS: Mapping[str, tuple[str, ...]] = {
    "gpu_work": (GPU_SM, GPU_POWER, GPU_UTIL),
    "switch_pfc": (SW_PFC_RATIO, SW_PFC_FRAMES),
    "nic_pfc": (NIC_PFC_RATIO, NIC_PFC_FRAMES),
    "congestion": (NIC_ECN, NIC_CNP_SENT, NIC_CNP_HANDLED, SW_ECN, NIC_XMIT_WAIT),
    "link": (NIC_LINK_UP, NIC_LINK_DOWNED, SW_PORT_UP),
    # Byte counters: one GPU's traffic collapsing while its peers' does not.
    "nvlink": (NVLINK_UP, NVLINK_ERRORS, NVLINK_TX, NVLINK_RX),
    "xid": (GPU_XID, GPU_HEALTHY),
    "storage": (ST_WRITE_LAT, ST_WRITE_BYTES, ST_PROBE_LAST, ST_PROBE_FAIL, ST_WRITE_BURST),
}
"""Evidence families; an absent group lowers confidence and is named in the incident."""

SPEED_FAMILIES: frozenset[str] = frozenset({SW_SPEED, NIC_RATE})
"""Port speeds: what turns PFC frames/s into a paused fraction per port
(speed / (65535 x 512) frames/s hold a priority paused). Replay keeps them."""

ENGINE_FAMILIES: frozenset[str] = frozenset(
    {GPU_POWER_LIMIT, GPU_MEM, GPU_PROCS, GPU_JOB}.union(*FAMILY_GROUPS.values(), SPEED_FAMILIES)
)
"""Every family the engine reads (tested against what it actually touches).
Replay stores only these: byte counters of NICs and switch ports are many of a
node's samples and no scorer reads them. NVLink byte counters are read (the
throughput-collapse scorer), at up to 18 links x 2 directions per GPU."""


@dataclass(frozen=True, slots=True)
class Window:
    """Values of one series inside a time window."""

    values: tuple[float, ...]
    times: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.values)


def window(series: Series, start: float, end: float) -> Window:
    """Points of ``series`` with ``start <= ts <= end``, oldest first."""
    vals: list[float] = []
    times: list[float] = []
    # History is time-ordered: walk from the newest end and stop early.
    for p in reversed(series.history):
        if p.ts > end:
            continue
        if p.ts < start:
            break
        vals.append(p.value)
        times.append(p.ts)
    vals.reverse()
    times.reverse()
    return Window(tuple(vals), tuple(times))


def median(values: Iterable[float]) -> float:
    """Median of a non-empty collection (NaN when empty)."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        return math.nan
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def mad(values: Iterable[float], center: float) -> float:
    """Median absolute deviation around ``center``, scaled to a normal sigma."""
    return 1.4826 * median(abs(v - center) for v in values)


def fresh(series: Series | None, now: float, max_age: float) -> bool:
    """True when ``series`` exists and was updated within ``max_age`` seconds."""
    return series is not None and now - series.updated <= max_age


def spacing(series: Series, n: int = 9) -> float:
    """Typical interval between a series' samples: the median of its last ``n``
    intervals (robust to a missing sample or a collector gap); NaN with fewer
    than two samples."""
    hist = series.history
    k = len(hist)
    if k < 2:
        return math.nan
    ts = [hist[i].ts for i in range(max(0, k - n - 1), k)]
    return median(b - a for a, b in pairwise(ts) if b > a)


def sustained(values: Sequence[float]) -> float:
    """The level a window held on at least two samples (its second-highest
    value; the only value of a one-sample window). One poll is not evidence:
    a swapped sample, a stray burst or a counter artefact reads high once."""
    if len(values) < 2:
        return values[0] if values else math.nan
    top = second = -math.inf
    for v in values:
        if v > top:
            top, second = v, top
        elif v > second:
            second = v
    return second


def iteration_period(values: Sequence[float], times: Sequence[float]) -> float | None:
    """The job's rhythm (seconds per iteration) from a work or traffic series:
    the mean interval between up-crossings of its mid-level, with hysteresis.
    None when fewer than three crossings show (a flat series, or one
    sampled slower than it oscillates)."""
    if len(values) < 8:
        return None
    srt = sorted(values)
    lo, hi = srt[int(0.1 * (len(srt) - 1))], srt[int(0.9 * (len(srt) - 1))]
    # Midway between the levels: a duty cycle's median sits on one of them.
    mid = (lo + hi) / 2
    band = 0.15 * (hi - lo)
    if band <= 0:
        return None
    ups: list[float] = []
    low = False
    for v, t in zip(values, times, strict=True):
        if v < mid - band:
            low = True
        elif v > mid + band and low:
            ups.append(t)
            low = False
    if len(ups) < 3:
        return None
    return (ups[-1] - ups[0]) / (len(ups) - 1)
