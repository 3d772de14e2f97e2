"""What a node tells the fleet about its jobs: the GPUs each job holds and how hard they work.

Nodes publish incidents, not telemetry. Three fleet features need a little more:

- the **badput** (a job's share of its GPU wall time lost) needs the job's GPU
  wall time, so each report carries the job's GPUs on the node over its window;
- **stragglers** compare the work of a job's nodes, so each report carries the
  node's work signal (mean SM activity of its GPUs, power when it has none);
- **NCCL evidence** names a culprit rank, so each report carries the lowest NCCL
  Inspector bus bandwidth per GPU and the ranks NCCL RAS reports missing.

A node publishes one :class:`JobWork` per ``window`` on
``<prefix>/<cluster>/<node>/jobwork`` (``fabricwatch.node-jobwork/v1``, QoS 1,
not retained). Fleet replay builds the same reports from each node's samples
(:func:`reports`), so the live fleet and the replay share one input and one
detector (:mod:`fabricwatch.fleet.stragglers`, :mod:`fabricwatch.fleet.nccl`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from fabricwatch import signals as contract
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.errors import ParseError

SCHEMA = "fabricwatch.node-jobwork/v1"
WINDOW = 60.0
"""Seconds of a report's window; windows lie on this grid of unix time (the fleet's)."""
NCCL_BUS_BW = contract.NCCL_BUS_BW.name
NCCL_RAS_MISSING = contract.NCCL_RAS_MISSING.name
MAX_POINTS = 10_000
"""Work points one report may carry (a window of an hour at 1 s, with room)."""
MAX_ITEMS = 4_096
"""Jobs, GPUs, bandwidth readings or missing ranks one report may carry."""


@dataclass(frozen=True, slots=True)
class JobWork:
    """One node's jobs and work over ``[start, end)``.

    Attributes:
        node: the node's name.
        start: window start (unix seconds, a multiple of the window).
        end: window end (the last sample plus one sample spacing, at most the window's end).
        jobs: job -> the node's GPUs (NVML indices) running it.
        points: (unix seconds, mean work signal of the node's GPUs) in time order.
        bus_bw: GPU -> lowest NCCL Inspector bus bandwidth (bytes/s) in the window.
        missing: (host, cuda_dev, rank) NCCL RAS reported missing in the window.
        addresses: the node's own addresses (IP, FQDN), so the fleet maps a host
            NCCL RAS names by address to this node (optional; empty: match by name).
    """

    node: str
    start: float
    end: float
    jobs: tuple[tuple[str, tuple[str, ...]], ...]
    points: tuple[tuple[float, float], ...]
    bus_bw: tuple[tuple[str, float], ...] = ()
    missing: tuple[tuple[str, str, str], ...] = ()
    addresses: tuple[str, ...] = ()

    def gpu_seconds(self) -> dict[str, float]:
        """GPU wall time of each job on this node in the window."""
        span = max(0.0, self.end - self.start)
        return {job: len(gpus) * span for job, gpus in self.jobs}

    def to_json(self) -> dict[str, Any]:
        """The ``fabricwatch.node-jobwork/v1`` message."""
        return {
            "schema": SCHEMA,
            "node": self.node,
            "start": self.start,
            "end": self.end,
            "jobs": {job: list(gpus) for job, gpus in self.jobs},
            "work": [[t, round(v, 6)] for t, v in self.points],
            "nccl_bus_bw": dict(self.bus_bw),
            "nccl_missing": [list(m) for m in self.missing],
            "addresses": list(self.addresses),
        }

    def body(self) -> bytes:
        """The message as compact JSON bytes."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


def _finite(v: Any, what: str, source: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ParseError(f"{what}: expected a finite number, got {v!r}"[:200], source=source)
    return float(v)


def _items(v: Any, kind: type[list[Any]] | type[dict[str, Any]], what: str, source: str) -> Any:
    if not isinstance(v, list | dict) or not isinstance(v, kind):
        raise ParseError(f"{what}: expected a {kind.__name__}", source=source)
    if len(v) > (MAX_POINTS if what == "work" else MAX_ITEMS):
        raise ParseError(f"{what}: too many entries ({len(v)})", source=source)
    return v


def parse(payload: bytes, *, source: str, max_bytes: int = 1 << 20) -> JobWork:
    """A ``fabricwatch.node-jobwork/v1`` message; :class:`ParseError` on garbage."""
    if len(payload) > max_bytes:
        raise ParseError(f"message of {len(payload)} bytes over {max_bytes}", source=source)
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"not JSON: {exc}"[:200], source=source) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ParseError(f"not a {SCHEMA} message", source=source)
    node = doc.get("node")
    if not isinstance(node, str) or not node:
        raise ParseError("node: expected a non-empty string", source=source)
    start = _finite(doc.get("start"), "start", source)
    end = _finite(doc.get("end"), "end", source)
    if end < start:
        raise ParseError("end before start", source=source)
    jobs: list[tuple[str, tuple[str, ...]]] = []
    for job, gpus in sorted(_items(doc.get("jobs"), dict, "jobs", source).items()):
        gl = _items(gpus, list, "jobs", source)
        if not job or not all(isinstance(g, str) for g in gl):
            raise ParseError("jobs: expected job -> list of GPU names", source=source)
        jobs.append((job, tuple(sorted(set(gl)))))
    points: list[tuple[float, float]] = []
    for p in _items(doc.get("work"), list, "work", source):
        if not isinstance(p, list) or len(p) != 2:
            raise ParseError("work: expected [unix seconds, value] pairs", source=source)
        points.append((_finite(p[0], "work", source), _finite(p[1], "work", source)))
    bw = _items(doc.get("nccl_bus_bw", {}), dict, "nccl_bus_bw", source)
    bus = tuple(sorted((str(g), _finite(v, "nccl_bus_bw", source)) for g, v in bw.items()))
    missing: list[tuple[str, str, str]] = []
    for m in _items(doc.get("nccl_missing", []), list, "nccl_missing", source):
        if not isinstance(m, list) or len(m) != 3 or not all(isinstance(x, str) for x in m):
            raise ParseError("nccl_missing: expected [host, cuda_dev, rank]", source=source)
        missing.append((m[0], m[1], m[2]))
    # Optional (older nodes send none): the node's own addresses for NCCL RAS hosts.
    addrs = _items(doc.get("addresses", []), list, "addresses", source)
    if not all(isinstance(a, str) and 0 < len(a) <= 255 for a in addrs):
        raise ParseError("addresses: expected a list of host names or addresses", source=source)
    return JobWork(
        node, start, end, tuple(jobs), tuple(sorted(points)), bus, tuple(missing),
        tuple(sorted(set(addrs))),
    )  # fmt: skip


@dataclass(slots=True)
class _Window:
    jobs: dict[str, set[str]]
    work: dict[float, list[float]]
    power: dict[float, list[float]]
    bus: dict[str, float]
    missing: set[tuple[str, str, str]]
    first: float
    last: float


def _spacing(samples: Sequence[Sample]) -> float:
    ts = sorted({round(s[0], 3) for s in samples if s[1] == sig.GPU_JOB})
    gaps = [b - a for a, b in itertools.pairwise(ts) if b > a]
    return median(gaps) if gaps else 0.0


def reports(node: str, samples: Sequence[Sample], window: float) -> list[JobWork]:
    """The reports a node publishes over ``samples``, one per window with any job.

    The work signal per timestamp (rounded to the second) is the mean SM
    activity of the node's GPUs, or their mean power when the node has no SM
    activity in that window (relative levels are all the fleet compares).
    """
    if window <= 0:
        msg = "window must be positive"
        raise ValueError(msg)
    wins: dict[float, _Window] = {}
    for ts, fam, labels, value in samples:
        lo = math.floor(ts / window) * window
        w = wins.get(lo)
        if w is None:
            w = wins[lo] = _Window({}, {}, {}, {}, set(), ts, ts)
        w.first, w.last = min(w.first, ts), max(w.last, ts)
        if fam == sig.GPU_JOB and value > 0 and len(labels) >= 2:
            w.jobs.setdefault(labels[1], set()).add(labels[0])
        elif fam == sig.GPU_SM:
            w.work.setdefault(float(round(ts)), []).append(value)
        elif fam == sig.GPU_POWER:
            w.power.setdefault(float(round(ts)), []).append(value)
        elif fam == NCCL_BUS_BW and labels:
            w.bus[labels[0]] = min(value, w.bus.get(labels[0], math.inf))
        elif fam == NCCL_RAS_MISSING and value > 0 and len(labels) >= 3:
            w.missing.add((labels[0], labels[1], labels[2]))
    step = _spacing(samples)
    out: list[JobWork] = []
    for lo, w in sorted(wins.items()):
        if not w.jobs:
            continue
        series = w.work or w.power
        pts = tuple((t, sum(v) / len(v)) for t, v in sorted(series.items()) if v)
        end = min(lo + window, w.last + step)
        jobs = tuple((j, tuple(sorted(g))) for j, g in sorted(w.jobs.items()))
        out.append(
            JobWork(
                node, max(lo, w.first), end, jobs, pts,
                tuple(sorted(w.bus.items())), tuple(sorted(w.missing)),
            )
        )  # fmt: skip
    return out


def reports_by_node(
    samples_by_node: Mapping[str, Sequence[Sample]], window: float
) -> dict[str, list[JobWork]]:
    """:func:`reports` of every node."""
    return {n: reports(n, s, window) for n, s in sorted(samples_by_node.items())}
