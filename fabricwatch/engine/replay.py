"""Replay: run the engine offline over recorded telemetry.

Sources are read by :mod:`fabricwatch.engine.replay_openmetrics` (OpenMetrics
text with timestamps) and :mod:`fabricwatch.engine.replay_prometheus` (the
Prometheus HTTP API), names mapped by :mod:`fabricwatch.engine.replay_mapping`.
This module runs the engine over the mapped samples: they are fed into a fresh
:class:`~fabricwatch.store.SnapshotStore` and the engine ticks on a fixed grid
in the samples' own phase (:func:`first_tick`), as the daemon ticks once its
collectors' round is in (and :func:`~fabricwatch.testing.sim_scenarios.run_live`
does), and reports the sample spacing it saw.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress, pairwise, repeat
from operator import itemgetter
from typing import Any, cast

from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import Incident, IncidentTransition
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore

_time = itemgetter(0)
_family = itemgetter(1)
_labels = itemgetter(2)
_value = itemgetter(3)
_series_key = itemgetter(1, 2)

MAX_SPACING = 60.0
"""Coarsest sample spacing (seconds) the engine's rules are scaled and evaluated for."""


@dataclass(frozen=True, slots=True)
class Spacing:
    """Sample spacing seen in replayed data (median over series of their median step)."""

    median: float
    series: int
    # The same over the GPU work series alone (what a stall is seen on),
    # NaN without any: an exporter that refreshes them slower than it is
    # scraped (dcgm-exporter's own interval) spaces them wider than the rest.
    gpu_work: float = math.nan
    # Whether any GPU reports SM activity (a window average; power and
    # utilization are not read as one).
    sm_active: bool = True
    # The same as ``median`` over the node's own counters (NIC, storage,
    # switch: ``signals.SCRAPE_FAMILIES``, as the engine reads the scrape
    # off them), NaN without any: the scrape, where the GPU exporter's
    # series outnumber them and refresh slower.
    node: float = math.nan

    def warning(self, settings: EngineSettings) -> str:
        """What this spacing hides from the engine, or ''.

        The engine scales its time rules to the spacing it observes
        (:meth:`EngineSettings.at_spacing`), so coarse data needs no special
        config; what it cannot do is see a stall shorter than two samples, or
        anything at all between samples much coarser than a minute."""
        m = self.median if math.isnan(self.node) else self.node
        g = self.gpu_work
        if g > 1.25 * m and 2.0 * g > settings.min_duration:
            # One idle refresh is a stall where its scrape window outlasts
            # min_duration (StallDetector: the window of a slow-refresh SM
            # sample); else it takes two, or one with strong evidence.
            hidden = (
                f"stalls shorter than a refresh and a scrape ({g + m:g} s) may not be seen"
                if m >= settings.min_duration and self.sm_active
                else f"stalls shorter than two of its refreshes ({2.0 * g:g} s) may not "
                "be seen unless strong evidence comes with them"
            )
            return (
                f"GPU work samples are {g:g} s apart, other series {m:g} s: the "
                f"exporter refreshes GPU metrics slower than it is scraped (held "
                f"repeats are no samples), so {hidden}"
                + (
                    ""
                    if g <= MAX_SPACING
                    else f", and rules are scaled only up to {MAX_SPACING:g} s"
                )
            )
        if m > MAX_SPACING:
            return (
                f"samples are {m:g} s apart: the engine scales its rules to the sample "
                f"spacing up to {MAX_SPACING:g} s; beyond that most stalls and their "
                "evidence fall between samples"
            )
        if 2.0 * m > settings.min_duration:
            return (
                f"samples are {m:g} s apart: the engine scales its rules to that spacing, "
                f"and stalls shorter than two samples ({2.0 * m:g} s) cannot be seen"
            )
        return ""


def sample_spacing(samples: Sequence[Sample], limit: int = 200_000) -> Spacing | None:
    """The typical spacing of the first ``limit`` time-sorted samples, or None."""
    head = samples[:limit]
    times: defaultdict[tuple[str, tuple[str, ...]], list[float]] = defaultdict(list)
    # One dict lookup per sample, keys built by itemgetter: this runs over
    # every sample of an ordinary replay.
    for key, ts in zip(map(_series_key, head), map(_time, head), strict=True):
        times[key].append(ts)
    per_series: list[float] = []
    gpu_work: list[float] = []
    node: list[float] = []
    work = sig.FAMILY_GROUPS["gpu_work"]
    sm_active = False
    for (family, _), seq in times.items():
        steps = [b - a for a, b in pairwise(seq) if b > a]
        if steps:
            per_series.append(sig.median(steps))
            if family in work:
                gpu_work.append(per_series[-1])
                sm_active = sm_active or family == sig.GPU_SM
            elif family in sig.SCRAPE_FAMILIES:
                node.append(per_series[-1])
    if not per_series:
        return None
    return Spacing(
        round(sig.median(per_series), 3),
        len(per_series),
        round(sig.median(gpu_work), 3) if gpu_work else math.nan,
        sm_active,
        round(sig.median(node), 3) if node else math.nan,
    )


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
    # Incidents still open when the data ended, as the engine saw them then
    # (GPU-seconds and end of the stall so far): no transition carries that.
    open_at_end: list[Incident] = field(default_factory=list)
    spans: int = 1  # processes' spans the result was stitched from (replay --jobs)
    planned: int = 1  # spans it was cut into before the cuts were verified
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


@dataclass(frozen=True, slots=True)
class TickPlan:
    """The tick grid of one replay and the samples the engine reads, shared by every span.

    Tick times are accumulated exactly as a single pass accumulates them, and
    ``expire`` marks the ticks that expire stale series, so a span run from
    any tick sees bit-identical times and housekeeping.
    """

    samples: Sequence[Sample]
    times: Sequence[float]
    ticks: Sequence[float]
    expire: Sequence[bool]
    start: float
    end: float
    skipped: int


_PHASE_SAMPLES = 512
"""Samples per family (spread over the run) that :func:`first_tick` reads phases from."""


def _arc_end(phases: list[float], share: float, tick: float) -> int:
    """Index (into the sorted ``phases``) of the end of the shortest arc of
    the circle [0, tick) that holds ``share`` of them."""
    n = len(phases)
    k = max(1, math.ceil(share * n))
    best, end = math.inf, n - 1
    for i in range(n):
        j = i + k - 1
        arc = phases[j] - phases[i] if j < n else phases[j - n] + tick - phases[i]
        if arc < best:
            best, end = arc, j % n
    return end


def first_tick(samples: Sequence[Sample], tick: float) -> float:
    """The first tick of the grid over time-sorted ``samples``: in the
    phase where a round of samples is complete.

    The daemon's engine ticks just after the collectors' round of the same
    instant (:meth:`~fabricwatch.supervisor.Supervisor.settled`), so what
    it decides on is at most milliseconds old. Recorded data comes in
    phases of its own (each Prometheus target has its scrape offset): a
    grid in another phase makes every stall wait for up to a tick more
    than it would live (half a tick on average, which at 1 s samples is
    half a sample). Phases are sample times modulo the tick, on a circle.
    Each family arrives at the end of the shortest arc holding 90 % of its
    phases (a few late scrapes do not move it); the grid ticks at the end
    of the shortest arc holding every family's arrival, on a sample's own
    time. A family sampled in no steady phase (irregular spacing) arrives
    anywhere, as any phase is then as good as another for it.
    """
    first = samples[0][0]
    spread = samples[:: max(1, len(samples) // (64 * _PHASE_SAMPLES))]
    by_family: defaultdict[str, list[float]] = defaultdict(list)
    for ts, family in zip(map(_time, spread), map(_family, spread), strict=True):
        by_family[family].append(ts)
    # A family too rare to be in the spread (an XID series far from the
    # rest) leaves the phase to the others: it comes with a dense one of its
    # exporter, in its phase.

    def phase(x: float) -> float:
        return x - math.floor(x / tick) * tick

    arrivals: list[float] = []
    for seen in by_family.values():
        times = sorted(seen[:: max(1, len(seen) // _PHASE_SAMPLES)], key=phase)
        arrivals.append(times[_arc_end([phase(x) for x in times], 0.9, tick)])
    arrivals.sort(key=phase)
    x = arrivals[_arc_end([phase(x) for x in arrivals], 1.0, tick)]
    return x - math.floor((x - first) / tick) * tick


def plan_replay(samples: Sequence[Sample], settings: EngineSettings) -> TickPlan:
    """The tick grid over time-sorted ``samples`` (families the engine reads only)."""
    tick = settings.tick
    first = samples[0][0]
    last = samples[-1][0]
    # Families the engine never reads cannot change its results: skip them
    # (the tick grid still spans every sample, as live ticks regardless).
    used = sig.ENGINE_FAMILIES
    kept: Sequence[Sample] = samples
    if not used.issuperset(map(_family, samples)):
        kept = list(compress(samples, map(used.__contains__, map(_family, samples))))
    times = list(map(_time, kept))
    n = len(kept)
    t = first_tick(kept, tick)
    ticks: list[float] = []
    expire: list[bool] = []
    last_expire = -math.inf
    i = 0
    while i < n or t <= last + tick:
        i = bisect_right(times, t, i)
        ticks.append(t)
        due = t - last_expire >= 60
        expire.append(due)
        if due:
            last_expire = t
        t += tick
        if i >= n and t > last + tick / 2:
            break
    return TickPlan(kept, times, ticks, expire, first, last, len(samples) - n)


def store_rows(samples: Sequence[Sample]) -> list[Reading]:
    """``samples`` as the rows the store ingests (it unpacks readings as plain
    6-tuples): built by zip, without a Python-level step or a Reading per sample."""
    rows = zip(
        map(_family, samples),
        map(_labels, samples),
        map(_value, samples),
        map(_time, samples),
        repeat(None),
        repeat(None),
        strict=False,
    )
    return cast("list[Reading]", list(rows))


@dataclass(slots=True)
class SpanRun:
    """What one span of ticks produced (see :func:`run_span`)."""

    transitions: list[IncidentTransition] = field(default_factory=list)
    ticks: int = 0
    readings: int = 0
    rejected: int = 0
    open_at_own_start: list[Any] = field(default_factory=list)
    open_at_own_end: list[Any] = field(default_factory=list)
    gpus_at_own_start: list[Any] = field(default_factory=list)
    gpus_at_own_end: list[Any] = field(default_factory=list)
    head: list[IncidentTransition] = field(default_factory=list)
    tail: list[IncidentTransition] = field(default_factory=list)


def _gpu_state(engine: Engine) -> list[Any]:
    """The engine state that later decisions branch on: per GPU the
    detector's discrete state and work baselines (bounded history: a span
    warmed up for two baseline epochs holds them bit for bit), and what has
    no bounded history where it is in use."""
    det = engine.detector
    gpus = [g for _, g in sorted(det.gpus.items())]
    # The power references (a GPU's observed peak, the node's idle draw) keep
    # the whole run's extremes; they steer decisions only where a GPU's work
    # is not read from SM activity, so only then must both spans agree on them.
    power = any(g.signal not in ("", "sm_active") for g in gpus)
    state: list[Any] = [
        (
            g.gpu,
            g.in_job,
            g.job,
            g.armed,
            g.idle,
            g.slow,
            g.signal,
            g.baseline,
            g.next_baseline,
            *g.recent,
            g.peak_power if power else None,
        )
        for g in gpus
    ]
    state.append(det._idle_draw if power else None)
    # The slowdown check's schedules are on the absolute clock, so a span
    # warmed up long enough agrees on them; checked all the same: the last
    # check where checks are sparser than ticks, and when the job's rhythm
    # was measured where the rhythm sets the throughput window.
    sparse = engine.spacing > engine.tick_s
    state.append(engine._comm_checked if sparse else None)
    rhythms = sorted((sorted(grp), r) for grp, r in engine._rhythms.items())
    by_rhythm = any(r > 0 for _, r in rhythms)  # whole iterations of it
    state.append((rhythms, engine._rhythm_at if by_rhythm else None))
    # The faults of stall incidents a later slowdown may not open on anew.
    state.append(list(engine._reported_faults))
    return state


def run_span(
    plan: TickPlan,
    settings: EngineSettings,
    node: str,
    *,
    begin: int,
    own_from: int,
    own_to: int,
    end: int,
    head: int = 0,
    db: IncidentDB | None = None,
    progress: Callable[[int], None] | None = None,
) -> SpanRun:
    """Run a fresh store and engine over ticks ``[begin, end)`` of ``plan``.

    Ticks ``[begin, own_from)`` only warm the engine up; the transitions,
    counts and progress of ticks ``[own_from, own_to)`` are the span's own;
    transitions of ``[own_to, end)`` are kept apart (``tail``) so a caller can
    check that the next span, started fresh, agrees with this one there: that
    span keeps its transitions of its first ``head`` own ticks in ``head``.
    """
    out = SpanRun()
    store = replay_store()
    engine = Engine(settings, store, node, db, tick=settings.tick)
    times, ticks, expire = plan.times, plan.ticks, plan.expire
    ingest = store.ingest
    i = 0 if begin == 0 else bisect_right(times, ticks[begin - 1])
    # The span's own rows, built here: a forked worker builds only its part,
    # and a tick's batch is then a list slice.
    base = i
    rows = store_rows(
        plan.samples[base : bisect_right(times, ticks[end - 1], base)] if end > begin else []
    )
    for k in range(begin, end):
        t = ticks[k]
        own = own_from <= k < own_to
        if k == own_from:
            out.open_at_own_start = engine.open_incidents()
            out.gpus_at_own_start = _gpu_state(engine)
        j = bisect_right(times, t, i)
        if j > i:
            # One batch per tick, as the daemon ingests one collection at a time.
            res = ingest("replay", rows[i - base : j - base], now=t)
            if own:
                out.readings += res.accepted
                out.rejected += res.rejected
                if progress is not None:
                    progress(j - i)
            i = j
        if expire[k]:
            store.expire(t)
        transitions = engine.tick(t, t)
        if own:
            out.transitions.extend(transitions)
            out.ticks += 1
            if k < own_from + head:
                out.head.extend(transitions)
        elif k >= own_to:
            out.tail.extend(transitions)
        if k == own_to - 1:
            out.open_at_own_end = engine.open_incidents()
            out.gpus_at_own_end = _gpu_state(engine)
    return out


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
    plan = plan_replay(samples, settings)
    result.start, result.end = plan.start, plan.end
    result.skipped = plan.skipped
    if progress is not None and plan.skipped:
        progress(plan.skipped)
    n = len(plan.ticks)
    span = run_span(
        plan, settings, node, begin=0, own_from=0, own_to=n, end=n, db=db, progress=progress
    )
    result.transitions = span.transitions
    result.ticks = span.ticks
    result.readings = span.readings
    result.rejected = span.rejected
    result.open_at_end = span.open_at_own_end
    sp = sample_spacing(samples)
    result.spacing = sp.median if sp is not None else math.nan
    return result
