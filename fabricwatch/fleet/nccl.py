"""NCCL evidence for job incidents: which rank's collectives collapsed, which rank went missing.

Node engines see local counters only; a job that hangs on a rank whose node
shows nothing local is a job incident with no origin. Where the site runs
NCCL Inspector and NCCL RAS, each node's job report (:mod:`fabricwatch.fleet.jobwork`)
carries, per window, the lowest collective bus bandwidth per GPU and the ranks
RAS reported missing. :func:`score` reads the reports of one job's nodes over a
job incident's window and finds:

- **a missing rank**: RAS named it (host, CUDA device, rank); the host maps to
  the node whose own name or reported addresses match it;
- **a collapsed rank**: a GPU whose lowest bus bandwidth in the incident window
  is at most ``collapse`` of the median of the job's other ranks in the same
  window, and (when the rank has earlier windows) at most ``collapse`` of its
  own earlier median. All thresholds are shares of the job's own levels, so
  they hold across NIC speeds, message sizes and collective kinds. When every
  rank is equally slow no single rank stands out and nothing is named.

Fused with the node's work signal and the job incident's kind, the finding's
cause is one of:

- ``collective_hang``: a rank is missing, or its bandwidth fell to at most
  ``zero`` of its peers' (the collective makes no progress);
- ``collective_slow``: its bandwidth collapsed but stayed above that, while
  its node's GPUs kept working at their own level (communication);
- ``straggler``: its bandwidth collapsed and its node's GPUs also worked at
  most ``slower`` of their own earlier level, relatively more than the other
  nodes' did (compute: the rank is slow, not its links).

The two new causes name what NCCL saw without claiming a fabric mechanism the
node's counters did not show (no PFC, ECN, link or NVLink evidence, or the
job incident would already have an origin); ``straggler`` is the fleet's
existing cause for a slow node.

:func:`with_nccl` applies a finding to a rendered job incident document: the
evidence always joins its evidence list, and when no member had local
evidence it names the origin node and culprit (rank, GPU). The live fleet
and fleet replay both call it, on the same reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, Literal

from fabricwatch.engine.causes import Cause
from fabricwatch.fleet.jobs import Candidate, Verdict, job_summary, origin_json
from fabricwatch.fleet.jobwork import JobWork

NcclCause = Literal[Cause.COLLECTIVE_HANG, Cause.COLLECTIVE_SLOW, Cause.STRAGGLER]


@dataclass(frozen=True, slots=True)
class NcclSettings:
    """Thresholds, all shares of the job's own levels.

    Attributes:
        collapse: a rank's bandwidth at most this share of its peers' median
            (and of its own earlier median) collapsed.
        zero: at most this share of its peers' median counts as no progress (hang).
        slower: the node's work at most this share of its own earlier level,
            and below the other nodes' relative work by as much, is compute-bound.
        min_ranks: ranks with bandwidth readings needed to compare one with its peers.
        lead: seconds before the incident's onset that still belong to it (a
            report window that ends just before the onset saw the collapse begin).
    """

    collapse: float = 0.5
    zero: float = 0.05
    slower: float = 0.85
    min_ranks: int = 3
    lead: float = 60.0


@dataclass(frozen=True, slots=True)
class NcclFinding:
    """One culprit rank NCCL evidence names.

    Attributes:
        node: the node of the rank.
        gpu: its GPU (the CUDA device Inspector's ``gpu_device_id`` or RAS's ``cuda_dev`` names).
        rank: its NCCL rank ("" when Inspector data does not carry one).
        cause: see the module docstring.
        confidence: how strongly the evidence names it.
        source: ``nccl_ras`` or ``nccl_inspector``.
        ratio: its bandwidth as a share of its peers' median (0 for a missing rank).
        text: the evidence sentence.
    """

    node: str
    gpu: str
    rank: str
    cause: NcclCause
    confidence: float
    source: str
    ratio: float
    text: str

    @property
    def culprit(self) -> str:
        """``gpu:<node>:<gpu>`` (the GPU whose rank is the culprit)."""
        return f"gpu:{self.node}:{self.gpu}"

    def to_json(self) -> dict[str, Any]:
        """The ``nccl`` field of a job incident document."""
        return {
            "node": self.node,
            "gpu": self.gpu,
            "rank": self.rank or None,
            "cause": self.cause,
            "confidence": round(self.confidence, 3),
            "source": self.source,
            "bus_bw_ratio": round(self.ratio, 4),
            "text": self.text,
        }


def _host_key(host: str) -> str:
    """``[fe80::1]:28028`` -> ``fe80::1``; ``10.0.0.7:28028`` -> ``10.0.0.7``; lower case."""
    h = host.strip().lower()
    if h.startswith("["):
        return h[1:].split("]", 1)[0]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h


def node_of_host(host: str, reports: Mapping[str, Sequence[JobWork]]) -> str | None:
    """The node a NCCL RAS host names: by its reported addresses, else by its name
    (full or short, so ``gpu-017.cluster.local`` matches node ``gpu-017``)."""
    key = _host_key(host)
    if not key or key == "unknown":
        return None
    for node, rs in sorted(reports.items()):
        if any(key == _host_key(a) for r in rs for a in r.addresses):
            return node
    for node in sorted(reports):
        n = node.lower()
        if key in (n, n.split(".", 1)[0]) or key.split(".", 1)[0] == n:
            return node
    return None


def _in_job(r: JobWork, job: str) -> tuple[str, ...] | None:
    return next((g for j, g in r.jobs if j == job), None)


def _bandwidths(
    reports: Mapping[str, Sequence[JobWork]], job: str, lo: float, hi: float
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], list[float]]]:
    """(node, GPU) -> lowest bandwidth in [lo, hi), and -> its earlier window minima."""
    now: dict[tuple[str, str], float] = {}
    before: dict[tuple[str, str], list[float]] = {}
    for node, rs in reports.items():
        for r in rs:
            gpus = _in_job(r, job)
            if gpus is None:
                continue
            for gpu, bw in r.bus_bw:
                if gpus and gpu not in gpus:
                    continue
                k = (node, gpu)
                if r.end <= lo:
                    before.setdefault(k, []).append(bw)
                elif r.start < hi:
                    now[k] = min(bw, now.get(k, math.inf))
    return now, before


def _work_ratio(rs: Sequence[JobWork], job: str, lo: float, hi: float) -> float | None:
    """The node's work in [lo, hi) as a share of its own earlier work (None: unknown)."""
    mine = [r for r in rs if _in_job(r, job) is not None]
    early = [v for r in mine if r.end <= lo for _, v in r.points]
    late = [v for r in mine if r.end > lo and r.start < hi for _, v in r.points]
    if not early or not late or median(early) <= 0:
        return None
    return median(late) / median(early)


def _missing(
    reports: Mapping[str, Sequence[JobWork]], job: str, lo: float, hi: float
) -> NcclFinding | None:
    seen: set[tuple[str, str, str]] = set()
    for rs in reports.values():
        for r in rs:
            if _in_job(r, job) is not None and r.end > lo and r.start < hi:
                seen.update(r.missing)
    for host, dev, rank in sorted(seen, key=lambda m: (m[2].zfill(8), m)):
        node = node_of_host(host, reports)
        if node is None:
            continue
        text = f"NCCL RAS reports rank {rank} (GPU {dev} on {host}) missing: the collective hangs"
        return NcclFinding(node, dev, rank, Cause.COLLECTIVE_HANG, 0.8, "nccl_ras", 0.0, text)
    return None


def _collapsed(
    reports: Mapping[str, Sequence[JobWork]], job: str, lo: float, hi: float, st: NcclSettings
) -> NcclFinding | None:
    now, before = _bandwidths(reports, job, lo, hi)
    if len(now) < st.min_ranks:
        return None
    flagged: list[tuple[float, tuple[str, str], bool]] = []
    for k, bw in now.items():
        peers = median(v for o, v in now.items() if o != k)
        if peers <= 0 or bw > st.collapse * peers:
            continue
        own = before.get(k)
        if own and bw > st.collapse * median(own):
            continue  # it was always this slow: its path, not a collapse
        flagged.append((bw / peers, k, bool(own)))
    # More than a third of the ranks low: the job as a whole is slow, not one rank.
    if not flagged or len(flagged) * 3 > len(now):
        return None
    ratio, (node, gpu), history = min(flagged)
    peers_bw = median(v for o, v in now.items() if o != (node, gpu))
    if ratio <= st.zero:
        cause: NcclCause = Cause.COLLECTIVE_HANG
        what = "no progress"
    else:
        cause, what = Cause.COLLECTIVE_SLOW, "a slow collective"
        mine = _work_ratio(reports[node], job, lo, hi)
        others = [
            w
            for n, rs in reports.items()
            if n != node and (w := _work_ratio(rs, job, lo, hi)) is not None
        ]
        if (
            mine is not None
            and mine <= st.slower
            and (not others or mine <= st.slower * median(others))
        ):
            cause, what = Cause.STRAGGLER, f"its GPUs also worked at {mine:.0%} of their own level"
    conf = min(0.9, 0.5 + 0.4 * (1.0 - ratio)) - (0.0 if history else 0.1)
    text = (
        f"NCCL Inspector: GPU {gpu} on {node} reached {now[(node, gpu)] / 1e9:.2f} GB/s bus "
        f"bandwidth, {ratio:.0%} of the job's other ranks ({peers_bw / 1e9:.2f} GB/s): {what}"
    )
    return NcclFinding(node, gpu, "", cause, conf, "nccl_inspector", ratio, text)


def score(
    reports: Mapping[str, Sequence[JobWork]],
    job: str,
    lo: float,
    hi: float,
    settings: NcclSettings | None = None,
) -> NcclFinding | None:
    """The culprit rank NCCL evidence names for ``job`` over ``[lo, hi)``, if any.

    ``reports``: node -> its job reports (any jobs; other jobs' are ignored). A
    missing rank (RAS) outranks a bandwidth collapse (Inspector): it says the
    rank is gone, not slow."""
    st = settings or NcclSettings()
    return _missing(reports, job, lo - st.lead, hi) or _collapsed(
        reports, job, lo - st.lead, hi, st
    )


def with_nccl(
    doc: Mapping[str, Any],
    reports: Mapping[str, Sequence[JobWork]],
    settings: NcclSettings | None = None,
) -> dict[str, Any]:
    """A job incident document with NCCL evidence applied (the same document, copied,
    when it is not a job incident or NCCL names no rank)."""
    out = dict(doc)
    if doc.get("group", {}).get("kind") != "job" or not doc.get("job"):
        return out
    onset = float(doc["onset_unix"])
    end = doc.get("resolved_unix") or doc.get("updated_unix") or onset
    found = score(reports, str(doc["job"]), onset, float(end), settings)
    if found is None:
        return out
    out["nccl"] = found.to_json()
    out["evidence"] = [
        *doc.get("evidence", []),
        {
            "cause": found.cause,
            "family": found.source,
            "culprit": found.culprit,
            "score": round(found.confidence, 3),
            "text": found.text,
            "nodes": 1,
        },
    ]
    if doc.get("origin") is None:
        _name_origin(out, found, onset, float(end))
    return out


def _name_origin(out: dict[str, Any], found: NcclFinding, onset: float, end: float) -> None:
    """Make the NCCL culprit the job incident's origin (no member had local evidence)."""
    group = f"job:{out['job']}"
    c = Candidate(
        node=found.node, incident="", cause=found.cause, confidence=found.confidence,
        onset=onset, culprit=found.culprit, culprit_kind="rank", evidence=found.text,
        group=group, group_incident=str(out.get("key", "")), gpus=1,
    )  # fmt: skip
    nodes = sorted({*out.get("job_nodes", []), *out.get("nodes", []), found.node})
    waiting = [n for n in nodes if n != found.node]
    summary = job_summary(
        job=str(out["job"]), nodes=len(nodes), seconds=max(0.0, end - onset),
        kind=str(out.get("kind", "stall")), verdict=Verdict(c, (), ()), waiting=len(waiting),
    )  # fmt: skip
    summary += f"; {float(out.get('gpu_seconds_lost') or 0.0):,.0f} GPU-seconds lost"
    if out.get("cost_lost") is not None:
        summary += f" ({float(out['cost_lost']):,.2f} cost)"
    labels = dict(out.get("culprit", {}).get("labels", {}))
    labels.update(origin=found.node, gpu=found.gpu)
    if found.rank:
        labels["rank"] = found.rank
    out.update(
        cause=found.cause,
        confidence=round(found.confidence, 3),
        summary=summary,
        culprit={**out.get("culprit", {}), "labels": labels},
        origin=origin_json(c),
        waiting=waiting,
        waiting_count=len(waiting),
        job_nodes=nodes,
    )
