"""Job membership on a shared node without process data: co-activity.

Two jobs on one node (GPUs 0-3 and 4-7, say) each run their own
compute/communication rhythm. A GPU's peers for a comparison are the GPUs of
its own job: live the job labels say which; in replay (dcgm-exporter has no
process data) the GPUs whose work signals rise and fall together are one job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fabricwatch.engine import signals as sig
from fabricwatch.store import SnapshotStore

_MIN_POINTS = 8
_MIN_SWING = 0.1  # relative standard deviation at or above which a series oscillates clearly
_SAME_JOB = 0.3  # correlation at or above which two GPUs move together
# Correlation with another GPU at or above which a GPU's swings are its job's
# rhythm however small they are (power as the work signal of a fast rhythm,
# averaged over each sample, moves a few per cent); noise is shared with no one.
_SHARED = 0.6


def pearson(a: Sequence[float], b: Sequence[float]) -> float:
    """The correlation of two equally long series; NaN where either is flat."""
    n = len(a)
    ma = sum(a) / n
    mb = sum(b) / n
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    if sa == 0 or sb == 0:
        return math.nan
    return sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True)) / (sa * sb)


def coactive_groups(
    store: SnapshotStore, gpus: Sequence[str], lo: float, hi: float
) -> Mapping[str, frozenset[str]]:
    """Each GPU's job-mates (itself included), from co-activity in [lo, hi].

    Two GPUs are apart only when both show a rhythm over >= 8 shared sample
    times (they oscillate clearly, relative standard deviation >= 10 %, or
    move with some other GPU, r >= 0.6) and their work signals are
    uncorrelated (r < 0.3); anything less informative keeps them together
    (one job per node is the usual case, and at 15-30 s averaging the rhythm
    is mostly gone). A GPU without a rhythm of its own never joins two
    rhythmic jobs into one: it goes with the job it moves with most.
    """
    series: dict[str, dict[float, float]] = {}
    for g in gpus:
        for fam in (sig.GPU_SM, sig.GPU_POWER):
            s = store.get(fam, (g,))
            if s is None:
                continue
            w = sig.window(s, lo, hi)
            series[g] = dict(zip(w.times, w.values, strict=True))
            break
    corr: dict[tuple[str, str], float] = {}
    clear: set[str] = set()
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            sa, sb = series.get(a, {}), series.get(b, {})
            common = sorted(sa.keys() & sb.keys())
            if len(common) < _MIN_POINTS:
                continue
            va = [sa[t] for t in common]
            vb = [sb[t] for t in common]
            r = pearson(va, vb)
            if math.isnan(r):
                continue
            corr[a, b] = corr[b, a] = r
            if _swing(va) >= _MIN_SWING:
                clear.add(a)
            if _swing(vb) >= _MIN_SWING:
                clear.add(b)
    rhythmic = [
        g
        for g in gpus
        if g in clear or any(corr.get((g, h), 0.0) >= _SHARED for h in gpus if h != g)
    ]
    parent = {g: g for g in gpus}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for i, a in enumerate(rhythmic):
        for b in rhythmic[i + 1 :]:
            if root(a) != root(b) and corr.get((a, b), 1.0) >= _SAME_JOB:
                parent[root(a)] = root(b)
    jobs = sorted({root(g) for g in rhythmic})
    for g in gpus:
        if g in rhythmic:
            continue
        if len(jobs) <= 1:
            if jobs:
                parent[g] = jobs[0]
            continue
        # Mean correlation with each job's GPUs (unknown pairs count as 0).
        score = {
            j: sum(corr.get((g, h), 0.0) for h in rhythmic if root(h) == j)
            / sum(1 for h in rhythmic if root(h) == j)
            for j in jobs
        }
        parent[g] = max(jobs, key=lambda j: score[j])
    if not rhythmic:
        for g in gpus[1:]:
            parent[g] = gpus[0]
    groups: dict[str, set[str]] = {}
    for g in gpus:
        groups.setdefault(root(g), set()).add(g)
    return {g: frozenset(groups[root(g)]) for g in gpus}


def _swing(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    if m <= 0:
        return 0.0
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values)) / m
