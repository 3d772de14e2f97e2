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
(half-tick marks), exactly as :func:`~fabricwatch.engine.scenarios.run_live`
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from fabricwatch.counters import CounterTracker
from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.errors import FabricwatchError, ParseError
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
    """Where one source series goes: family, labels and how values convert."""

    family: str
    labels: tuple[str, ...]
    transform: str = "copy"
    scale: float = 1.0


MAPPING_TABLE: tuple[tuple[str, str, str], ...] = (
    (
        "fabricwatch_* (counters with _total)",
        "same family",
        "labels picked by name, extra labels ignored",
    ),
    ("DCGM_FI_DEV_GPU_UTIL{gpu}", sig.GPU_UTIL, "percent / 100"),
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
        "DCGM_FI_DEV_XID_ERRORS{gpu}",
        f"{sig.GPU_XID}{{xid=<value>}}",
        "gauge of the last XID: each change to a non-zero value counts one event",
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
    (
        "node_ethtool_{received,transmitted}_prio<p>_pause{device}",
        sig.NIC_PFC_FRAMES,
        "port=1, priority=p, direction rx/tx",
    ),
    (
        "node_ethtool_{received,transmitted}_prio<p>_pause_duration{device}",
        sig.NIC_PFC_RATIO,
        "microsecond counter -> pause-time fraction (rate / 1e6)",
    ),
    ("node_disk_written_bytes_total{device}", sig.ST_WRITE_BYTES, "path=device"),
    (
        "node_disk_write_time_seconds_total / node_disk_writes_completed_total{device}",
        sig.ST_WRITE_LAT,
        "delta time / delta writes = average write latency, path=device",
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
)
"""The documented mapping: (source series, fabricwatch family, conversion)."""

SOURCE_NAME_REGEX = (
    "fabricwatch_.+|DCGM_FI_.+|node_infiniband_.+|node_ethtool_.+pause.*|node_disk_write.+"
    "|node_disk_written_bytes_total|cpfcIfPriority.+|ifOperStatus|ifHC(In|Out)Octets"
)
"""``__name__`` regex of every source the mapping understands (for Prometheus)."""

_COUNTER_FAMILIES = {n: s for n, s in sig.SIGNAL_SPECS.items() if s.kind is MetricKind.COUNTER}
_DCGM: dict[str, tuple[str, str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": (sig.GPU_UTIL, "copy", 0.01),
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
_IB: dict[str, tuple[str, str]] = {
    "node_infiniband_port_data_transmitted_bytes_total": (sig.NIC_TX_BYTES, "copy"),
    "node_infiniband_port_data_received_bytes_total": (sig.NIC_RX_BYTES, "copy"),
    "node_infiniband_link_downed_total": (sig.NIC_LINK_DOWNED, "copy"),
    "node_infiniband_np_ecn_marked_roce_packets_received_total": (sig.NIC_ECN, "copy"),
    "node_infiniband_np_cnp_packets_sent_total": (sig.NIC_CNP_SENT, "copy"),
    "node_infiniband_rp_cnp_packets_handled_total": (sig.NIC_CNP_HANDLED, "copy"),
    "node_infiniband_state_id": (sig.NIC_LINK_UP, "eq4"),
}
_ETHTOOL = re.compile(r"^node_ethtool_(received|transmitted)_prio([0-7])_pause(_duration)?$")
_SNMP_PFC = {
    "cpfcIfPriorityIndications": ("rx", "cpfcIfPriorityValue", False),
    "cpfcIfPriorityRequests": ("tx", "cpfcIfPriorityValue", False),
    "cpfcIfPriorityWaitRx": ("rx", "cpfcIfPriorityWaitCoS", True),
    "cpfcIfPriorityWaitTx": ("tx", "cpfcIfPriorityWaitCoS", True),
}


def map_series(name: str, labels: dict[str, str]) -> Target | None:
    """Where a source series goes, or None when the engine does not use it."""
    if name.startswith("fabricwatch_"):
        family = name
        spec = sig.SIGNAL_SPECS.get(name)
        if spec is None and name.endswith("_total"):
            spec = _COUNTER_FAMILIES.get(name[:-6])
        if spec is None or spec.kind is MetricKind.HISTOGRAM:
            return None
        family = spec.name
        try:
            values = tuple(labels[k] for k in spec.labels)
        except KeyError:
            return None
        return Target(family, values)
    dcgm = _DCGM.get(name)
    if dcgm is not None:
        gpu = labels.get("gpu")
        if gpu is None:
            return None
        family, transform, scale = dcgm
        if family in (sig.NVLINK_TX, sig.NVLINK_RX):
            return Target(family, (gpu, "total"), transform, scale)
        return Target(family, (gpu,), transform, scale)
    nvlink_error = _DCGM_NVLINK_ERRORS.get(name)
    if nvlink_error is not None:
        gpu = labels.get("gpu")
        return None if gpu is None else Target(sig.NVLINK_ERRORS, (gpu, "total", nvlink_error))
    ib = _IB.get(name)
    if ib is not None:
        if "device" not in labels or "port" not in labels:
            return None
        return Target(ib[0], (labels["device"], labels["port"]), ib[1])
    m = _ETHTOOL.match(name)
    if m is not None:
        device = labels.get("device")
        if device is None:
            return None
        direction = "rx" if m.group(1) == "received" else "tx"
        values = (device, "1", m.group(2), direction)
        if m.group(3):
            return Target(sig.NIC_PFC_RATIO, values, "us_ratio")
        return Target(sig.NIC_PFC_FRAMES, values)
    if name in ("node_disk_written_bytes_total",):
        device = labels.get("device")
        return None if device is None else Target(sig.ST_WRITE_BYTES, (device,))
    if name in ("node_disk_write_time_seconds_total", "node_disk_writes_completed_total"):
        device = labels.get("device")
        if device is None:
            return None
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
    return None


class Mapper:
    """Turns source samples into fabricwatch samples, one series at a time.

    Stateful conversions (rate integration, microsecond counters to
    fractions, last-XID gauges, disk latency) keep per-series state, so each
    series must arrive in time order (OpenMetrics and Prometheus both
    guarantee it).
    """

    def __init__(self) -> None:
        self._tracker = CounterTracker()
        self._state: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._last_ts: dict[tuple[str, tuple[str, ...], str], float] = {}
        self._disk: dict[tuple[str, str], dict[float, float]] = {}
        self.out: list[Sample] = []
        self.ignored: dict[str, int] = {}
        self.samples = 0

    def add(self, target: Target | None, source: str, ts: float, value: float) -> None:
        """One source sample (``target`` from :func:`map_series`)."""
        self.samples += 1
        if target is None:
            self.ignored[source] = self.ignored.get(source, 0) + 1
            return
        if not math.isfinite(value):
            return
        tr = target.transform
        out = self.out
        if tr == "copy":
            out.append((ts, target.family, target.labels, value * target.scale))
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
        self.out.sort(key=itemgetter(0))
        return self.out


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


def parse_openmetrics(
    lines: Iterable[str], mapper: Mapper, *, source: str = "<input>", fast: bool = True
) -> None:
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

    Raises:
        ParseError: with ``source`` and the 1-based line number, for a
            malformed line, a sample without timestamp, a series going back in
            time, or content after ``# EOF``.
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
    for lineno, raw in enumerate(lines, 1):
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


def observed_spacing(samples: Sequence[Sample], per_series: int = 32) -> float:
    """Median interval between consecutive samples of a series, over the
    first ``per_series`` intervals of every series (NaN when none repeats).
    The engine derives its own spacing from what it stores, live and in
    replay alike; this is what replay reports."""
    last: dict[tuple[str, tuple[str, ...]], float] = {}
    count: dict[tuple[str, tuple[str, ...]], int] = {}
    gaps: list[float] = []
    for ts, name, labels, _ in samples:
        key = (name, labels)
        prev = last.get(key)
        last[key] = ts
        if prev is None or ts <= prev:
            continue
        n = count.get(key, 0)
        if n < per_series:
            count[key] = n + 1
            gaps.append(ts - prev)
    return sig.median(gaps) if gaps else math.nan


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
    store = replay_store()
    engine = Engine(settings, store, node, db)
    tick = settings.tick
    first = samples[0][0]
    last = samples[-1][0]
    t = math.floor(first / tick) * tick + tick / 2
    if t < first:
        t += tick
    result.start, result.end = first, last
    result.spacing = observed_spacing(samples)
    # Families the engine never reads cannot change its results: skip them
    # (the tick grid still spans every sample, as live ticks regardless).
    used = sig.ENGINE_FAMILIES
    if any(sm[1] not in used for sm in samples):
        total = len(samples)
        samples = [sm for sm in samples if sm[1] in used]
        result.skipped = total - len(samples)
        if progress is not None:
            progress(result.skipped)
    i = 0
    n = len(samples)
    last_expire = -math.inf
    ingest = store.ingest
    new_reading = tuple.__new__  # Reading(...) without NamedTuple's Python-level __new__
    times = [sm[0] for sm in samples]
    while i < n or t <= last + tick:
        j = bisect_right(times, t, i)
        if j > i:
            # One batch per tick, as the daemon ingests one collection at a time.
            batch = [
                new_reading(Reading, (name, labels, value, ts, None, None))
                for ts, name, labels, value in samples[i:j]
            ]
            res = ingest("replay", batch, now=t)
            result.readings += res.accepted
            result.rejected += res.rejected
            if progress is not None:
                progress(j - i)
            i = j
        if t - last_expire >= 60:
            store.expire(t)
            last_expire = t
        result.transitions.extend(engine.tick(t, t))
        result.ticks += 1
        t += tick
        if i >= n and t > last + tick / 2:
            break
    return result


def read_files(
    paths: Sequence[str], mapper: Mapper, open_text: Callable[[str], Iterator[str]]
) -> None:
    """Parse several OpenMetrics files (``-`` is standard input) into ``mapper``."""
    for path in paths:
        parse_openmetrics(open_text(path), mapper, source=path)
