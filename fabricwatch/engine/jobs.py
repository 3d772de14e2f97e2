"""Job membership on a shared node without process data: co-activity.

Two jobs on one node (GPUs 0-3 and 4-7, say) each run their own
compute/communication rhythm. A GPU's peers for a comparison are the GPUs of
its own job: live the job labels say which; in replay (dcgm-exporter has no
process data) the GPUs whose work signals rise and fall together are one job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

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

    GPUs that show a rhythm (they oscillate clearly, relative standard
    deviation >= 10 %, or move with some other GPU, r >= 0.6) and move
    together over >= 8 shared sample times (r >= 0.3) are one job. Two such
    groups are apart when the pairs between them with enough shared sample
    times are uncorrelated (r < 0.3), and together where no pair has them;
    anything less informative keeps GPUs together (one job per node is the
    usual case, and at 15-30 s averaging the rhythm is mostly gone). A GPU
    without a rhythm of its own never joins two rhythmic jobs into one: it
    goes with the job it moves with most.
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
            if root(a) != root(b) and corr.get((a, b), 0.0) >= _SAME_JOB:
                parent[root(a)] = root(b)
    _join_unseen(rhythmic, corr, root, parent)
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


def _join_unseen(
    rhythmic: Sequence[str],
    corr: Mapping[tuple[str, str], float],
    root: Callable[[str], str],
    parent: dict[str, str],
) -> None:
    """Join the co-active groups that no pair of GPUs sets apart: groups
    with no correlation known between them (too few shared sample times:
    missed samples, a collector gap) are one job, as with no data at all.
    Where some pairs are known and uncorrelated, the pairs without data do
    not join two jobs (a single pair short of shared samples merged two
    rhythmic jobs, and the other job's swings became the first's slowdown)."""
    while True:
        members: dict[str, list[str]] = {}
        for g in rhythmic:
            members.setdefault(root(g), []).append(g)
        groups = sorted(members)
        pair = next(
            (
                (a, b)
                for i, a in enumerate(groups)
                for b in groups[i + 1 :]
                if not any((x, y) in corr for x in members[a] for y in members[b])
            ),
            None,
        )
        if pair is None:
            return
        parent[pair[0]] = pair[1]


def _swing(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    if m <= 0:
        return 0.0
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values)) / m
