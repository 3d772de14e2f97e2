"""The metric families the engine reads (``docs/signals.md``) and small readers.

The specs are the signals contract of :mod:`fabricwatch.signals`, which the
collectors export too; they are also what replay and the scenario simulator
register in a fresh :class:`~fabricwatch.store.SnapshotStore`, so live and
replay share one shape.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import cast

from fabricwatch import signals as fam
from fabricwatch.readings import MetricSpec
from fabricwatch.store import Series

# Family names the engine's modules use; the specs are the contract's
# (fabricwatch/signals.py), declared once for collectors and engine alike.
GPU_UTIL = fam.GPU_UTIL.name
GPU_SM = fam.GPU_SM.name
GPU_POWER = fam.GPU_POWER.name
GPU_POWER_LIMIT = fam.GPU_POWER_LIMIT.name
GPU_MEM = fam.GPU_MEM.name
GPU_PROCS = fam.GPU_PROCS.name
GPU_HEALTHY = fam.GPU_HEALTHY.name
GPU_XID = fam.GPU_XID.name
NVLINK_TX = fam.NVLINK_TX.name
NVLINK_RX = fam.NVLINK_RX.name
NVLINK_ERRORS = fam.NVLINK_ERRORS.name
NVLINK_UP = fam.NVLINK_UP.name
GPU_INFO = fam.GPU_INFO.name
GPU_JOB = fam.GPU_JOB.name
SW_PFC_RATIO = fam.SW_PFC_RATIO.name
SW_PFC_FRAMES = fam.SW_PFC_FRAMES.name
SW_ECN = fam.SW_ECN.name
SW_PORT_UP = fam.SW_PORT_UP.name
SW_RX_BYTES = fam.SW_RX_BYTES.name
SW_TX_BYTES = fam.SW_TX_BYTES.name
SW_DISCARDS = fam.SW_DISCARDS.name
SW_SPEED = fam.SW_SPEED.name
NIC_PFC_RATIO = fam.NIC_PFC_RATIO.name
NIC_PFC_FRAMES = fam.NIC_PFC_FRAMES.name
NIC_ECN = fam.NIC_ECN.name
NIC_CNP_SENT = fam.NIC_CNP_SENT.name
NIC_CNP_HANDLED = fam.NIC_CNP_HANDLED.name
NIC_XMIT_WAIT = fam.NIC_XMIT_WAIT.name
NIC_LINK_UP = fam.NIC_LINK_UP.name
NIC_LINK_DOWNED = fam.NIC_LINK_DOWNED.name
NIC_TX_BYTES = fam.NIC_TX_BYTES.name
NIC_RX_BYTES = fam.NIC_RX_BYTES.name
NIC_RATE = fam.NIC_RATE.name
NIC_GPU_LOCALITY = fam.NIC_GPU_LOCALITY.name
ST_PROBE_HIST = fam.ST_PROBE_HIST.name
ST_PROBE_LAST = fam.ST_PROBE_LAST.name
ST_PROBE_FAIL = fam.ST_PROBE_FAIL.name
ST_WRITE_LAT = fam.ST_WRITE_LAT.name
ST_WRITE_BYTES = fam.ST_WRITE_BYTES.name
ST_WRITE_BURST = fam.ST_WRITE_BURST.name
ST_WRITE_OPS = fam.ST_WRITE_OPS.name

SIGNAL_SPECS: Mapping[str, MetricSpec] = {s.name: s for s in fam.SIGNALS}
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
    "storage": (
        ST_WRITE_LAT,
        ST_WRITE_BYTES,
        ST_WRITE_OPS,
        ST_PROBE_LAST,
        ST_PROBE_FAIL,
        ST_WRITE_BURST,
    ),
}
"""Evidence families; an absent group lowers confidence and is named in the incident."""

SPEED_FAMILIES: frozenset[str] = frozenset({SW_SPEED, NIC_RATE})
"""Port speeds: what turns PFC frames/s into a paused fraction per port
(speed / (65535 x 512) frames/s hold a priority paused). Replay keeps them."""

PORT_JOB_FAMILIES: frozenset[str] = frozenset({NIC_TX_BYTES, SW_TX_BYTES, NIC_GPU_LOCALITY})
"""What says which job's port a port is on a node shared by two jobs: its
transmitted bytes (co-activity with the job's communication phases; a
collective sends as much as it receives, so one direction is read) and,
live, the GPUs near it on the PCI topology."""

SCRAPE_FAMILIES: tuple[str, ...] = (NIC_TX_BYTES, ST_WRITE_BYTES, SW_TX_BYTES, NIC_ECN)
"""Counters of the node's own exporters (NIC, storage, switch), refreshed on
every scrape: the node's scrape spacing, which an exporter refreshing GPU
metrics on its own interval (dcgm-exporter) may be slower than."""

ENGINE_FAMILIES: frozenset[str] = frozenset(
    {GPU_POWER_LIMIT, GPU_INFO, GPU_MEM, GPU_PROCS, GPU_JOB}.union(
        *FAMILY_GROUPS.values(), SPEED_FAMILIES, PORT_JOB_FAMILIES
    )
)
"""Every family the engine reads (tested against what it actually touches).
Replay stores only these. NVLink byte counters are read (the
throughput-collapse scorer), at up to 18 links x 2 directions per GPU; NIC and
switch port transmit byte counters too (which job a port carries), receive
byte counters not."""


# Board power (W) of datacenter GPUs by their NVML / dcgm-exporter model name,
# most specific first: the device class's power limit where none is exported
# (dcgm-exporter's default fields have no DCGM_FI_DEV_POWER_MGMT_LIMIT).
_BOARD_POWER: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 350.0),
    (("H100", "NVL"), 400.0),
    (("H200", "NVL"), 600.0),
    (("H100",), 700.0),
    (("H200",), 700.0),
    (("GB200",), 1200.0),
    (("B200",), 1000.0),
    (("A100", "PCIE", "40GB"), 250.0),
    (("A100", "PCIE"), 300.0),
    (("A100",), 400.0),
    (("L40S",), 350.0),
    (("L40",), 300.0),
    (("V100", "PCIE"), 250.0),
    (("V100",), 300.0),
)


def board_power(model: str) -> float | None:
    """The nominal power limit (W) of a GPU model (``NVIDIA H100 80GB HBM3``:
    700), None for a model not in the table. A real H100 idles near 70 W
    of it (``gpud_h100x8_nvidia-smi-q``), so idle_power_ratio of this
    limit holds a hung context's draw, where the observed peak of a job
    that never reaches its limit would not."""
    name = model.upper()
    for parts, watts in _BOARD_POWER:
        if all(p in name for p in parts):
            return watts
    return None


@dataclass(frozen=True, slots=True)
class Window:
    """Values of one series inside a time window."""

    values: tuple[float, ...]
    times: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.values)


def _columns(series: Series) -> tuple[memoryview[float], memoryview[float]]:
    """The history's timestamps and values, oldest first (views of copies of the rings)."""
    times, values = series.ordered_rings()
    return (
        cast("memoryview[float]", memoryview(times)),
        cast("memoryview[float]", memoryview(values)),
    )


def _visited(times: memoryview[float], start: float) -> tuple[int, list[float]] | None:
    """Where a walk from the newest point back to the first one older than
    ``start`` stops, and the times it visits (from that point on, oldest
    first), when they are finite and in order; None when they are not.

    bisect's final position always has an older neighbour below ``start`` and
    itself at or above it, so with the visited times in order, the points
    from it on are exactly what the walk keeps (and bisects over them find
    any later bound the walk would). A history out of order (a source's own
    timestamps going back) takes the walk itself.
    """
    first = max(bisect_left(times, start) - 1, 0)
    seen = cast("list[float]", times[first:].tolist())
    if seen != sorted(seen) or not math.isfinite(sum(seen)):
        return None
    return first, seen


def _suffix(series: Series, start: float) -> tuple[memoryview[float], list[float]] | None:
    """The values and times (oldest first) of the points a walk from the
    newest point back to the first one older than ``start`` visits, or more
    points before those (all in order), as :func:`_visited` finds them; None
    where it finds none (take the walk).

    Mostly the walk stops in the ring's newest stretch (before its write
    head, not wrapped): that stretch is searched in place, without copying
    the ring, when its visited times are finite, in order and begin older
    than ``start`` (then the walk stops inside them, whatever lies before).
    """
    ring, ring_ts, head = series.ring, series.ring_ts, series.head
    if ring is not None and ring_ts is not None and head >= 2:
        times = cast("memoryview[float]", memoryview(ring_ts))[:head]
        p = bisect_left(times, start)
        if p > 0:
            seen = cast("list[float]", times[p - 1 :].tolist())
            if seen[0] < start and seen == sorted(seen) and math.isfinite(sum(seen)):
                return cast("memoryview[float]", memoryview(ring))[p - 1 : head], seen
    times, values = _columns(series)
    found = _visited(times, start)
    if found is None:
        return None
    first, seen = found
    return values[first:], seen


def window(series: Series, start: float, end: float) -> Window:
    """Points of ``series`` with ``start <= ts <= end``, oldest first.

    The newest-first walk over the history (which stops at the first point
    older than ``start``) is what this computes; on an ordered history it is
    two bisections and two slices of the ring.
    """
    found = _suffix(series, start)
    if found is None:
        return _window_walk(series, start, end)
    values, seen = found
    lo = bisect_left(seen, start)
    hi = bisect_right(seen, end, lo)
    return Window(tuple(values[lo:hi]), tuple(seen[lo:hi]))


def _window_walk(series: Series, start: float, end: float) -> Window:
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


def enough_points(latest: int, least: int = 2) -> int:
    """Points an earlier window needs for its mean to stand for the window:
    half of what the latest window holds (``least`` at least). After a
    collector gap the two or three samples left in a window may all fall
    in one phase of the job's rhythm; their mean is a phase, not the window."""
    return max(least, (latest + 1) // 2)


def chunk_spans(now: float, width: float, chunks: int) -> list[tuple[float, float]]:
    """The ``(start, end)`` bounds :func:`chunk_means` averages over: the latest
    window ``[now - width, now]``, then the ``chunks`` windows before it, each
    ending just short of the next one's start (a sample on a boundary counts once)."""
    spans = [(now - width, now)]
    spans += [(now - (j + 2) * width, now - (j + 1) * width - 1e-3) for j in range(chunks)]
    return spans


def chunk_means(series: Series, now: float, width: float, chunks: int) -> list[float] | None:
    """Means of ``series`` over the latest window and the ``chunks`` before it.

    Element 0 is the mean over ``[now - width, now]``; element ``j + 1`` the mean
    over ``[now - (j + 2) * width, now - (j + 1) * width - 1e-3]``: exactly what
    :func:`window` gives for each of those spans (same bounds, same summation
    order), from one bisection per bound over the ring instead of a walk per
    chunk (the shallow-slowdown check reads it for every job GPU on every
    sample). None when the latest span holds fewer than two points; an
    earlier span with fewer than :func:`enough_points` (a collector gap) is
    NaN, a window whose mean is unknown, so one gap in the history does not
    blind the check that reads it for the whole span the history covers.
    """
    found = _suffix(series, now - (chunks + 1) * width)
    if found is None:
        return _chunk_means_walk(series, now, width, chunks)
    values, seen = found
    out: list[float] = []
    need = 2
    for start, end in chunk_spans(now, width, chunks):
        lo = bisect_left(seen, start)
        hi = bisect_right(seen, end, lo)
        if hi - lo < need:
            if not out:
                return None
            out.append(math.nan)
            continue
        if not out:
            need = enough_points(hi - lo)
        # Oldest first, as window() sums them, so the figures are bit-for-bit the same.
        out.append(sum(values[lo:hi]) / (hi - lo))
    return out


def _chunk_means_walk(series: Series, now: float, width: float, chunks: int) -> list[float] | None:
    buckets: list[list[float]] = [[] for _ in range(chunks + 1)]
    oldest = now - (chunks + 1) * width
    for p in reversed(series.history):
        ts = p.ts
        if ts > now:
            continue
        if ts < oldest:
            break
        if ts >= now - width:
            buckets[0].append(p.value)
            continue
        guess = int((now - ts) / width) - 1
        for j in (guess - 1, guess, guess + 1):
            if 0 <= j < chunks and now - (j + 2) * width <= ts <= now - (j + 1) * width - 1e-3:
                buckets[j + 1].append(p.value)
                break
    if len(buckets[0]) < 2:
        return None
    need = enough_points(len(buckets[0]))
    return [
        sum(reversed(b)) / len(b) if k == 0 or len(b) >= need else math.nan
        for k, b in enumerate(buckets)
    ]


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
    ts = series.history.tail_times(n + 1)
    if len(ts) < 2:
        return math.nan
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


def iteration_period(
    values: Sequence[float], times: Sequence[float], *, min_swing: float = 0.0
) -> float | None:
    """The job's rhythm (seconds per iteration) from a work or traffic series:
    the mean interval between up-crossings of its mid-level, with hysteresis.
    None when fewer than three crossings show (a flat series, or one
    sampled slower than it oscillates), or when the series swings (10th to
    90th percentile) by less than ``min_swing`` of its high level: the
    crossings of sampling noise, or of a rhythm averaged away inside each
    sample, are no iteration."""
    if len(values) < 8:
        return None
    srt = sorted(values)
    lo, hi = srt[int(0.1 * (len(srt) - 1))], srt[int(0.9 * (len(srt) - 1))]
    if hi - lo < min_swing * abs(hi):
        return None
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
