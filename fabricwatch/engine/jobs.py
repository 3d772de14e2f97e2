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
_MIN_SWING = 0.1  # relative standard deviation below which a series says nothing
_SAME_JOB = 0.3  # correlation at or above which two GPUs move together


def _pearson(a: Sequence[float], b: Sequence[float]) -> float:
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

    Two GPUs are apart only when both oscillate clearly (relative standard
    deviation >= 10 %) over >= 8 shared sample times and their work signals
    are uncorrelated (r < 0.3); anything less informative keeps them
    together (one job per node is the usual case, and at 15-30 s averaging
    the rhythm is gone).
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
    parent = {g: g for g in gpus}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if root(a) == root(b):
                continue
            sa, sb = series.get(a, {}), series.get(b, {})
            common = sorted(sa.keys() & sb.keys())
            together = True
            if len(common) >= _MIN_POINTS:
                va = [sa[t] for t in common]
                vb = [sb[t] for t in common]
                swing = min(_swing(va), _swing(vb))
                r = _pearson(va, vb)
                if swing >= _MIN_SWING and not math.isnan(r) and r < _SAME_JOB:
                    together = False
            if together:
                parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for g in gpus:
        groups.setdefault(root(g), set()).add(g)
    return {g: frozenset(groups[root(g)]) for g in gpus}


def _swing(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    if m <= 0:
        return 0.0
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values)) / m
