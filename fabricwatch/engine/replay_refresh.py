"""Slow-refresh exporters: a value re-read from the exporter's cache is no new sample.

dcgm-exporter collects on its own interval (30 s by default) and a faster
scrape re-reads the last collection, so its series repeat their values for
two or more scrapes and then jump. Read as measurements, the repeats make
the data look finer than it is: a held counter reads as zero rate and then
a double step, a held gauge hides a stall for a refresh while it counts as
fresh polls, and the engine scales its rules to the scrape spacing instead
of the spacing at which anything new is known.

Exact repeats are not dropped blindly: an idle GPU's power or a gauge that
truly stays constant repeats legitimately. An exporter refreshes all its
series together, so the period is learnt from the series of one kind of
device together (GPU, NIC, storage, switch: :func:`refresh_periods`): the
scrapes at which any of them changed keep a period of ``k >= 2`` scrapes
(:func:`refresh_steps`). A series of such a group is slow-refresh unless
its own changes come faster than that. Of a slow-refresh series replay
keeps each change and, while the value stays the same, one sample per
refresh period (:func:`held_mask`), so it is never staler than its exporter
makes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from itertools import pairwise
from typing import TypeVar

from fabricwatch.engine import signals as sig

MIN_CHANGES = 10
"""Scrapes with a change a group needs before its refresh period is read from them."""

MAX_STEPS = 64
"""Longest refresh period, in scrapes, that is looked for (30 s collection at 0.5 s scrapes)."""

REGULAR = 0.7
"""Share of the intervals between changes that must be whole refresh periods."""

SHORT = 0.15
"""Largest share of intervals between changes shorter than one refresh period
(a missed scrape makes a change late, so the next interval is short)."""

FRESH = 0.4
"""Share of a series' own intervals between changes, shorter than its group's
refresh period, above which the series is refreshed on every scrape (noise,
a swapped or stale sample, makes a few such intervals in a held series)."""

Series = tuple[Sequence[float], Sequence[float]]
"""One series' sample times (ascending) and values."""

K = TypeVar("K", bound=Hashable)


def refresh_steps(changes: Sequence[float], step: float) -> int:
    """How many scrapes ``step`` apart one refresh spans, from the times at
    which values changed (1: every scrape can be new).

    The data is slow-refresh when its commonest interval between changes,
    in scrapes, is two or more; ``k`` is then the largest divisor of that
    interval (itself included, 2 at least) of which at least
    :data:`REGULAR` of the intervals are whole multiples (a value that held
    over several refreshes gives a multiple) and at most :data:`SHORT` are
    shorter. The commonest interval is itself a multiple where values
    often hold over refreshes: a GPU group whose every series is flat or
    aliased by its rhythm (a 1.48 s iteration read every 3 s moves its
    1 s averages a grid step every 2-3 refreshes) changed every 9 scrapes
    more often than every 3, and read as fresh every scrape, its held
    samples as new ones (cross-check seed 2041). Data that changes at
    random (the commonest interval is one scrape), rarely (fewer than
    :data:`MIN_CHANGES` changes) or at irregular intervals is not."""
    if len(changes) <= MIN_CHANGES or step <= 0:
        return 1
    gaps = [g for g in (round((b - a) / step) for a, b in pairwise(changes)) if g >= 1]
    counts = Counter(g for g in gaps if g <= MAX_STEPS)
    if not counts:
        return 1
    common = counts.most_common(1)[0][0]
    for k in range(common, 1, -1):
        if common % k:
            continue
        regular = sum(g % k == 0 for g in gaps) / len(gaps)
        short = sum(g < k for g in gaps) / len(gaps)
        if regular >= REGULAR and short <= SHORT:
            return k
    return 1


def _step(times: Sequence[float]) -> float:
    steps = [b - a for a, b in pairwise(times) if b > a]
    return sig.median(steps) if steps else 0.0


def _changes(times: Sequence[float], values: Sequence[float]) -> list[float]:
    return [times[i] for i in range(1, len(times)) if values[i] != values[i - 1]]


def refresh_periods(series: Mapping[K, Series], group: Mapping[K, str]) -> dict[K, float]:
    """The refresh period (seconds) of each slow-refresh series.

    Series are pooled by ``group`` (one kind of device, as one exporter
    refreshes them together): the group's scrapes are the times its series
    were sampled at, a scrape changed when any series changed there. A
    series of a slow-refresh group is left out where its own changes are
    often closer than the group's period (:data:`FRESH`: it is refreshed on
    every scrape)."""
    members: dict[str, list[K]] = {}
    for key in series:
        members.setdefault(group[key], []).append(key)
    out: dict[K, float] = {}
    for keys in members.values():
        step = _step(sorted({round(t, 3) for k in keys for t in series[k][0]}))
        own = {k: _changes(*series[k]) for k in keys}
        counts = Counter(round(t, 3) for k in keys for t in own[k])
        if not counts:
            continue
        # A refresh changes many of the group's series at once; a swapped or
        # stale sample of one series between refreshes is noise, not a refresh.
        many = sorted(counts.values())[int(0.9 * (len(counts) - 1))]
        n = refresh_steps(sorted(t for t, c in counts.items() if c >= many / 2), step)
        if n < 2:
            continue
        for key in keys:
            gaps = [round((b - a) / step) for a, b in pairwise(own[key])]
            if gaps and sum(g < n for g in gaps) > FRESH * len(gaps):
                continue
            out[key] = n * step
    return out


def held_mask(times: Sequence[float], values: Sequence[float], period: float) -> list[bool]:
    """Which samples of a slow-refresh series (refreshed every ``period``
    seconds) are new: the first sample of each value, and while the value
    stays the same one sample per refresh period (the exporter refreshed it
    and read the same)."""
    step = _step(times)
    due = period - step / 2
    keep: list[bool] = []
    kept_at = -float("inf")
    last: float | None = None
    for ts, v in zip(times, values, strict=True):
        new = last is None or v != last or ts - kept_at >= due
        keep.append(new)
        if new:
            kept_at = ts
        last = v
    return keep
