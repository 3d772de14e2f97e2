"""The correlation engine: stall detection -> evidence -> attribution -> incidents.

:class:`Engine` is tick-driven and reads only the snapshot store, so it gives
the same result live and in replay for the same store contents and times.
Transitions are persisted (when a database is given) before ``tick`` returns
them, so nothing downstream ever sees an incident that is not on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import is_

from fabricwatch.engine import signals as sig
from fabricwatch.engine.attribution import Attribution, attribute
from fabricwatch.engine.causes import Cause
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.evidence import (
    TIMED_FAMILIES,
    Culprit,
    Evidence,
    ScoreContext,
    collect,
    missing_groups,
)
from fabricwatch.engine.incidents import (
    Incident,
    IncidentTransition,
    from_json,
    incident_key,
    summarize,
)
from fabricwatch.engine.jobs import coactive_groups
from fabricwatch.engine.port_jobs import PortJobs, assign_ports, port_key
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.stall import GpuState, StallDetector
from fabricwatch.engine.windows import HistoryMirrors, summed_window_means
from fabricwatch.errors import StoreError
from fabricwatch.readings import MetricKind, MetricSpec, Reading
from fabricwatch.store import Series, SnapshotStore

GPU_STALLED = MetricSpec(
    "fabricwatch_gpu_stalled",
    MetricKind.GAUGE,
    "1 while the GPU is stalled in an incident, by cause ('none' when not stalled).",
    ("gpu", "cause"),
)
INCIDENTS_OPENED = MetricSpec(
    "fabricwatch_incidents_opened",
    MetricKind.COUNTER,
    "Incidents opened, by cause at opening.",
    ("cause",),
)
STALL_GPU_SECONDS = MetricSpec(
    "fabricwatch_stall_gpu_seconds",
    MetricKind.COUNTER,
    "GPU-seconds of work lost to incidents, by cause.",
    ("cause",),
)
STALL_COST = MetricSpec(
    "fabricwatch_stall_cost",
    MetricKind.COUNTER,
    "Money lost to incidents (GPU-seconds x cost_per_gpu_hour / 3600), by cause.",
    ("cause",),
)

# A rhythm is a swing of the work signal by at least this share of its high
# level: the compute/communication cycle of a job sampled faster than it
# iterates swings by a third or more; sampling noise, or a rhythm averaged
# away inside each sample, by a few per cent (its crossings are no iteration).
_RHYTHM_SWING = 0.2
# The least drop of a job's throughput or work over its own history that is
# a slowdown, however steady the history.
_MIN_DROP = 0.05

# The order metric series are written in (the causes as they were listed
# before the enumeration, so the exposition stays byte for byte the same).
_CAUSES = (
    Cause.PFC_STORM,
    Cause.ECN_CONGESTION,
    Cause.LINK_DOWN,
    Cause.NVLINK_DEGRADED,
    Cause.GPU_FAULT,
    Cause.CHECKPOINT_WRITE,
    Cause.STORAGE_LATENCY,
    Cause.UNKNOWN,
)


@dataclass(slots=True)
class _Live:
    incident: Incident
    onset: float  # monotonic onset of the current episode
    ended: float | None = None  # monotonic end of the last episode, while resolving


@dataclass(frozen=True, slots=True)
class _Reported:
    """The fault a stall incident named: its cause, its culprit (and the
    other devices its evidence of that cause named), the GPUs it stalled
    and when they worked again (monotonic)."""

    cause: str
    culprits: frozenset[str]
    gpus: frozenset[str]
    ended: float


@dataclass(slots=True)
class _Episode:
    kind: str
    onset: float
    last_bad: float
    # Start of the current unbroken run: a tick with too few bad GPUs breaks
    # it (the episode itself survives until ``end_after``, for the evidence
    # onset and GPU-seconds), and a stall without strong evidence must be one
    # unbroken run of ``min_duration`` (straggler waits next to an evaluation
    # dip add up to 10 s of idleness, never to 10 s in one piece).
    run_onset: float = 0.0
    broken_at: float | None = None
    # Newest sample of the bad GPUs: a run also breaks where none of them
    # reported for longer than ``sample_max_age`` (a collector gap is blind
    # time, not idle time).
    seen: float = -math.inf
    gpus: set[str] = field(default_factory=set)
    gpu_seconds: float = 0.0
    live: _Live | None = None
    next_score: float = -math.inf
    # Whether the evidence before the onset was already checked (once).
    pre_checked: bool = False
    # How far before the onset evidence counts: one iteration of the job's
    # rhythm plus one sample (a fault stalls the GPUs only when the compute
    # phase in flight ends).
    lead: float = 0.0
    # Whether the stall began inside the sample before its dated onset (see
    # GpuState.began_inside): the evidence window reaches back one more sample.
    began_inside: bool = False
    # Seconds the onset lies before its first idle sample (GpuState.dated_back).
    dated_back: float = 0.0
    # Each GPU's job-mates (job labels live, co-activity in replay).
    peers: Mapping[str, frozenset[str]] | None = None
    # Which job's port each port is, from the same baseline (two jobs only).
    ports: PortJobs | None = None
    # The onset of the resolving incident this episode resumes: the evidence
    # baseline ends there (see ScoreContext.base_onset).
    base_onset: float | None = None
    # Causes with evidence when the incident opened. A slowdown's evidence
    # windows slide with it, so every cause soon reads as "after the onset";
    # a cause first seen later (a checkpoint in the middle of a congestion
    # slowdown) is secondary evidence and never replaces these.
    open_causes: frozenset[Cause] = frozenset()
    # Whether an unexplained slowdown's exchange slowed (see
    # Engine._unseen_slowdown), judged once its run filled a throughput
    # window (None before): its tail, work coming back into the window,
    # never makes a deep one shallow.
    exchange_slowed: bool | None = None
    # Every GPU seen in a running job while the episode was scored: a GPU
    # that fell off the bus leaves the job (``activity_window`` after its
    # last active sample) while the stall it caused goes on, and its silence
    # stays the stall's evidence.
    members: frozenset[str] = frozenset()


class Engine:
    """Per-node correlation engine.

    Args:
        settings: the ``[engine]`` settings.
        store_reader: the snapshot store the pipeline fills.
        node: this node's name (in incidents and keys).
        db: where transitions are persisted before ``tick`` returns them.
        tick: seconds between :meth:`tick` calls (the daemon's ``daemon.tick``;
            replay steps at its own): the spacing it can see at best, and the
            time one tick accounts for.
    """

    def __init__(
        self,
        settings: EngineSettings,
        store_reader: SnapshotStore,
        node: str,
        db: IncidentDB | None = None,
        *,
        tick: float = 1.0,
    ) -> None:
        self.settings = settings
        self.tick_s = tick
        self.store = store_reader
        self.node = node
        self.db = db
        self.detector = StallDetector(settings, tick)
        self._live: dict[str, _Live] = {}
        self._stall: _Episode | None = None
        self._slow: _Episode | None = None
        self._last_tick: float | None = None
        self._clear: dict[str, float] = {}  # last tick without a node stall / slowdown, by kind
        self._idle_at_clear: list[tuple[str, float]] = []  # (GPU, idle since) seen idle then
        self._offset = 0.0
        self._opened: dict[str, float] = dict.fromkeys(_CAUSES, 0.0)
        self._gpu_seconds: dict[str, float] = dict.fromkeys(_CAUSES, 0.0)
        self._restored = False
        # Keys of incidents restored from the database and not yet continued
        # or resolved: see :meth:`_continue_restored`.
        self._restoring: set[str] = set()
        # Observed sample spacing and the settings scaled to it.
        self.spacing = tick
        self._eff = settings
        self._scaled: dict[float, EngineSettings] = {}
        self._retune_slot = math.nan  # the 10-tick slot the settings were last re-derived in
        # Communication-throughput slowdown: when it was last checked, the GPUs
        # found slow, and since when.
        self._comm_checked = -math.inf
        self._comm_gpus: list[GpuState] = []
        self._comm_since = 0.0
        # When the slow GPUs were first found (not back-dated), and whether
        # their fall stood out from the history's noise twice over (see
        # _Change.fell_clearly).
        self._comm_found = 0.0
        self._comm_clear = False
        # The slow GPUs whose fall two samples of the window carry (see _held).
        self._comm_dips: frozenset[str] = frozenset()
        self._stall_end = -math.inf
        self._slow_end = -math.inf  # last bad tick of the last slowdown incident's episode
        # The faults of stall incidents that ended while the slowdown check's
        # history still reaches before them (see _reported).
        self._reported_faults: list[_Reported] = []
        # Each job's iteration period as last measured (0 where none shows),
        # by the job's GPUs, re-measured once a minute on the absolute clock.
        # Per job: on a node of two jobs, a median over all the node's GPUs
        # is neither job's rhythm, and a throughput window made of its
        # iterations cuts both jobs' cycles (cross-check seed 70009: 6.6 s
        # and 2.8 s jobs read 8.7 s, and a steady job's window means beat by
        # 30 %).
        self._rhythms: dict[frozenset[str], float] = {}
        self._rhythm_at = -math.inf
        # Job membership by co-activity (no job labels), as last derived.
        self._groups: list[frozenset[str]] = []
        self._groups_of: tuple[str, ...] = ()
        self._groups_at = -math.inf
        # The slowdown check's window reads, kept in step with the store's rings.
        self._windows = HistoryMirrors()
        # The per-link NVLink series grouped by GPU, and the family they were grouped from.
        self._links: tuple[Sequence[Series], dict[str, list[Series]]] = ((), {})

    # -- public surface -------------------------------------------------

    def tick(self, now_monotonic: float, now_wall: float) -> list[IncidentTransition]:
        """Advance the engine to ``now``; return (persisted) incident transitions."""
        now = now_monotonic
        self._offset = now_wall - now_monotonic
        tick = self.tick_s
        dt = tick if self._last_tick is None else min(max(now - self._last_tick, 0.0), 5 * tick)
        self._last_tick = now
        out: list[IncidentTransition] = []
        if not self._restored:
            self._restored = True
            self._restore(now)
        # Schedules on the absolute clock, not counted from this engine's
        # start: an engine started earlier or later (replay --jobs spans)
        # re-derives at the very same ticks.
        slot = now // (10 * tick)
        if slot != self._retune_slot:
            self._retune_slot = slot
            self._retune()
        self.detector.observe(self.store, now, dt)
        job = self.detector.job_gpus()
        stalled = self._stalled_jobs(self.detector.stalled(), job, now)
        before = self._stall
        self._stall = self._step_stall(self._stall, stalled, now=now, dt=dt, out=out)
        was_stalled = before is not None
        if before is not None and self._stall is None:
            self._stall_end = now
            if before.live is not None:
                self._remember_fault(before.live.incident, before.gpus, now)
        if self._reported_faults:
            self._forget_faults(now)
        # A job recovering from a stall (its first samples partly idle, its
        # throughput averaged with the stall's) is not slow: no slowdown
        # starts within one throughput window of a stall.
        recovering = now - self._stall_end < self._comm_window(None) or was_stalled
        if self._stall is None and recovering and self._slow is None:
            pass
        elif self._stall is None:
            slow = self._slow_gpus(job, now)
            self._slow = self._step_slowdown(self._slow, slow, now=now, dt=dt, out=out)
        elif self._slow is not None:
            self._slow = self._step_slowdown(self._slow, [], now=now, dt=dt, out=out)
        self._resolve(now, out)
        if out and self.db is not None:
            self.db.record(out)
        return out

    def open_incidents(self) -> list[Incident]:
        """Incidents not yet resolved, as of the last tick."""
        return [lv.incident for lv in self._live.values()]

    def metrics(self) -> Sequence[MetricSpec]:
        """The families :meth:`readings` produces."""
        specs = [GPU_STALLED, INCIDENTS_OPENED, STALL_GPU_SECONDS]
        if self.settings.cost_per_gpu_hour > 0:
            specs.append(STALL_COST)
        return specs

    def readings(self) -> Sequence[Reading]:
        """Current values of :meth:`metrics` (counters as running totals)."""
        out: list[Reading] = []
        ep = self._stall
        cause = ep.live.incident.cause if ep is not None and ep.live is not None else None
        # Every (gpu, cause) pair gets a value each tick, so when a stall ends
        # or its cause is revised the old series reads 0 at once instead of
        # lingering at 1 until the store drops it as stale.
        for gpu, st in sorted(self.detector.gpus.items()):
            active = cause if cause is not None and st.stalled else None
            for c in _CAUSES:
                out.append(Reading(GPU_STALLED.name, (gpu, c), 1.0 if c == active else 0.0))
        price = self.settings.cost_per_gpu_hour
        for c in _CAUSES:
            out.append(Reading(INCIDENTS_OPENED.name, (c,), self._opened[c]))
            out.append(Reading(STALL_GPU_SECONDS.name, (c,), self._gpu_seconds[c]))
            if price > 0:
                out.append(Reading(STALL_COST.name, (c,), self._gpu_seconds[c] * price / 3600.0))
        return out

    # -- internals -------------------------------------------------------

    def _wall(self, mono: float) -> float:
        return mono + self._offset

    def _restore(self, now: float) -> None:
        """Reload incidents left open by a previous run.

        Each resolves after ``resolve_hold`` unless its GPUs are seen still
        stalled, which continues it (:meth:`_continue_restored`). A database
        that cannot be read yet (disk full at start) is tried again next tick.
        """
        if self.db is None:
            return
        try:
            docs = self.db.incidents(node=self.node, state="open")
        except StoreError:
            self._restored = False
            return
        for doc in docs:
            try:
                inc = from_json(doc)
            except (KeyError, ValueError, TypeError):
                continue
            if inc.key in self._live:
                continue
            self._live[inc.key] = _Live(inc, inc.onset - self._offset, ended=now)
            self._restoring.add(inc.key)

    def _continue_restored(self, now: float) -> None:
        """A restored stall whose GPUs are still idle in their job goes on.

        After a restart the detector has not seen those GPUs work for
        ``arm_after`` (a hung job never does), so it would not call them
        stalled and the incident would resolve while the fault holds. They
        worked when the incident opened: arm them again and make the
        incident the current stall episode, which the stall then continues
        (and which ends, and resolves, once they work again).
        """
        s = self.settings
        for key in sorted(self._restoring):
            live = self._live.get(key)
            if live is None or live.ended is None or live.incident.kind != "stall":
                self._restoring.discard(key)  # resolved, recurred, or not a stall
                continue
            states = [self.detector.gpus.get(g) for g in live.incident.gpus]
            idle = [
                st
                for st in states
                if st is not None and st.in_job and st.idle and st.work is not None
            ]
            if len(idle) < max(1, math.ceil(s.stall_gpus_ratio * len(live.incident.gpus))):
                continue  # working again or not seen yet: the hold runs on
            ep = self._stall
            if ep is not None and ep.live is not None and ep.live is not live:
                live.ended = now  # another incident holds the stall: keep this one open
                continue
            for st in idle:
                st.armed = True
            if ep is None:
                ep = _Episode("stall", live.onset, now, run_onset=live.onset)
                ep.next_score = now + s.rescore_every
                self._stall = ep
            ep.gpus.update(st.gpu for st in idle)
            ep.seen = max(ep.seen, *(st.last_sample for st in idle))
            ep.last_bad = now
            ep.broken_at = None
            ep.live = live
            live.ended = None
            live.incident = replace(live.incident, ended_at=None)
            self._restoring.discard(key)

    def _comm_window(self, gpus: Collection[str] | None) -> float:
        """Seconds over which the communication throughput of the job of
        ``gpus`` (None: the longest of the node's jobs) is averaged: at
        least 30 s and 4 samples, made up to a whole number of iterations of
        the job's rhythm where it shows, so the compute/communication cycle
        cancels out (a 30 s window of a 5.3 s iteration holds 5.7, and its
        mean beats by the part iteration it cuts: cross-check seed 19002,
        6 % down on a steady job). Whole iterations cancel it; more of them
        do not cancel it better. Four of a rhythm sampled slower than it
        runs (the 30-40 s beat of a 1-3 s iteration in 10-30 s samples of
        power) made the window 150-200 s, longer than the slowdowns it was
        to find and than the history of a node replayed from minutes
        before. A rhythm that does not show is averaged inside each sample
        already."""
        w = max(30.0, 4.0 * self.spacing)
        if gpus is not None:
            r = self._job_rhythm(gpus)
            return w if r <= 0 else math.ceil(w / r - 1e-9) * r
        return max([w, *(math.ceil(w / r - 1e-9) * r for r in self._rhythms.values() if r > 0)])

    def _job_rhythm(self, gpus: Collection[str]) -> float:
        """The measured rhythm of the job of ``gpus`` (0 where none shows;
        the longest where they span jobs)."""
        return max([0.0, *(r for grp, r in self._rhythms.items() if not grp.isdisjoint(gpus))])

    def _job_groups(self, job: list[GpuState], now: float) -> list[list[GpuState]]:
        """The node's job GPUs, one list per job: by job label where every GPU
        has one, else by co-activity over the last baseline window (replay:
        dcgm-exporter has no process data), re-derived once a minute or when
        the set of job GPUs changes."""
        if job and all(g.job for g in job):
            by_job: dict[str, list[GpuState]] = {}
            for g in job:
                by_job.setdefault(g.job, []).append(g)
            return [by_job[k] for k in sorted(by_job)]
        names = tuple(sorted((g.gpu for g in job), key=_gpu_order))
        # Not while a slowdown goes on: one job slowing down moves all its
        # GPUs at once, which reads as co-activity with the other job.
        stale = now // 60.0 != self._groups_at // 60.0 and self._slow is None
        if names != self._groups_of or stale:
            self._groups_of = names
            self._groups_at = now
            peers = coactive_groups(self.store, names, now - self._eff.baseline_window, now)
            self._groups = sorted(
                {peers[g] for g in names}, key=lambda grp: min(_gpu_order(g) for g in grp)
            )
        return [[g for g in job if g.gpu in grp] for grp in self._groups]

    def _stalled_jobs(
        self, stalled: list[GpuState], job: list[GpuState], now: float
    ) -> list[GpuState]:
        """The stalled GPUs of a node stall: ``stall_gpus_ratio`` of the
        node's job GPUs, or of one job's where the node runs several (each
        job's GPUs counted against its own: a job of four GPUs that stalls,
        one of them fallen silent, is three of its four, not three of the
        node's eight). Else none."""
        s = self._eff
        if not stalled or len(stalled) >= max(1, math.ceil(s.stall_gpus_ratio * len(job))):
            return stalled
        groups = self._job_groups(job, now)
        if len(groups) < 2:
            return []
        names = {g.gpu for g in stalled}
        out: list[GpuState] = []
        for grp in groups:
            mine = [g for g in grp if g.gpu in names]
            if len(mine) >= max(1, math.ceil(s.stall_gpus_ratio * len(grp))):
                out.extend(mine)
        return out

    def _slow_gpus(self, job: list[GpuState], now: float) -> list[GpuState]:
        """The slow GPUs of the node's most slowed job (``slow_gpus_ratio`` of
        that job's GPUs at least), or none. A slowdown is one job's: GPUs of
        two jobs slow at once (one in an evaluation phase, the other in its
        communication phase) are no node slowdown, and the other job's GPUs
        are no part of its evidence scope."""
        s = self._eff
        groups = self._job_groups(job, now)
        ep = self._slow
        if ep is not None:
            # An episode stays with its job: the other job's slow ticks
            # neither extend it nor join it.
            groups = [grp for grp in groups if ep.gpus & {g.gpu for g in grp}] or groups
        comm: list[GpuState] | None = None
        best: list[GpuState] = []
        for grp in groups:
            need = max(1, math.ceil(s.slow_gpus_ratio * len(grp)))
            slow = [g for g in grp if g.slow]
            if len(slow) < need:
                if comm is None:
                    comm = self._comm_slow(groups, now)
                names = {g.gpu for g in grp}
                slow = [g for g in comm if g.gpu in names]
            if len(slow) >= need and len(slow) > len(best):
                best = slow
        return best

    def _comm_slow(self, groups: list[list[GpuState]], now: float) -> list[GpuState]:
        """Job GPUs whose communication throughput (NVLink) or work (SM
        activity, else power) fell below their own history while the other
        did not rise (a shallow slowdown: all-reduce 30-70 % slower while SM
        activity, busy through the longer communication phase, barely moves
        and stays above ``slow_ratio``), in the jobs where
        ``slow_gpus_ratio`` of the GPUs show it. Less traffic with more work
        is a change in the iteration's mix (fewer or shorter exchanges), and
        less work with more traffic one the other way: no work is lost.

        Checked once a sample, in slots of the sample spacing on the absolute
        clock (an engine started earlier or later checks at the same ticks);
        the result holds between checks.
        """
        s = self._eff
        job = [g for grp in groups for g in grp]
        step = max(self.tick_s, self.spacing)
        if now // step == self._comm_checked // step:
            return self._comm_gpus
        self._comm_gpus = self._comm_kept(now, step)
        self._comm_checked = now
        # Not while a slowdown goes on: the job's own rhythm is the one before.
        if now // 60.0 != self._rhythm_at // 60.0 and self._slow is None:
            self._rhythm_at = now
            self._rhythms = {}
            for grp in groups:
                members = frozenset(g.gpu for g in grp)
                self._rhythms[members] = self._measured_rhythm(now, members)
        # Two baseline windows of history, eight windows at least where the
        # history holds them: the spread of its window means is what the
        # drop must stand out from, and from four of them it is itself
        # mostly noise (a job of a few exchanges per window read a spread of
        # 40-120 % and hid a 35 % drop, tests/engine/test_slowdown_history.py).
        # Each job's window is made of its own iterations.
        width: dict[str, tuple[float, int]] = {}
        for grp in groups:
            w = self._comm_window([g.gpu for g in grp])
            chunks = max(_HISTORY_CHUNKS, int(2.0 * s.baseline_window // w))
            width.update((g.gpu, (w, chunks)) for g in grp)
        out: list[GpuState] = []
        clear: set[str] = set()
        dips: set[str] = set()
        per_link: dict[str, list[Series]] | None = None  # grouped once, when needed
        spare = _spare(groups, s.slow_gpus_ratio)
        means = self._windows.summed_means
        for g in job:
            left = spare.get(g.gpu)
            if left is not None:
                if left[0] < 0:
                    continue  # its job can no longer have enough slow GPUs: none is kept
                left[0] -= 1
            w, chunks = width[g.gpu]
            series = self.store.get(sig.NVLINK_TX, (g.gpu, "total"))
            links = [series] if series is not None else []
            if not links:
                if per_link is None:
                    per_link = self._links_by_gpu()
                links = per_link.get(g.gpu, [])
            seen = self._work_window(g, now - w, now)
            if seen is not None:
                vals, idle = seen
                if vals and min(vals) < idle:
                    continue  # a stall's tail or a dip inside the window is no slowdown
                # A window the collector mostly missed holds a few samples
                # whose mean is a phase of the rhythm or a dip next to the
                # gap, not the window (cross-check seed 42010: a 35 s
                # dcgm-exporter gap left 9 samples of a 44 s window, two of
                # them in a 1.4 s evaluation pause, and the job read 15 %
                # slower): no verdict from it.
                if len(vals) < 0.5 * w / step:
                    continue
            work_series = self.store.get(sig.GPU_SM, (g.gpu,)) or self.store.get(
                sig.GPU_POWER, (g.gpu,)
            )
            works = [work_series] if work_series is not None else []
            # A node replayed (or started) a few windows before the slowdown
            # has less history than two baseline windows: the windows it
            # holds, four at least (at 15-30 s spacing two baseline windows
            # are 10-20 minutes).
            n = min(chunks, _whole_windows([*links, *works], now, w))
            if n < _MIN_CHUNKS:
                continue
            traffic = _change(means, links, now, w, n, floor=s.nvlink_min_bytes)
            work = _change(means, works, now, w, n)
            limit = 1.0 - s.slow_ratio
            by_traffic = (
                traffic is not None
                and traffic.fell(limit)
                and not (work is not None and work.rose())
            )
            # An iteration that takes longer moves its bytes over more time:
            # where the GPU's traffic is known, a slowdown lowers it, if by
            # less than its noise (noisy sampling): the work signal may then
            # show it clearer. Less work with the same traffic (within
            # _MIN_DROP) is no lost iteration (the work signal of a rhythm
            # sampled near its own period beats by 20 %: cross-check seed
            # 11015, power at 5 s, a 10 s iteration).
            by_work = (
                work is not None
                and work.fell(limit)
                and (traffic is None or traffic.ratio < 1.0 - _MIN_DROP)
            )
            deep = (by_traffic and traffic is not None and traffic.fell_clearly()) or (
                by_work and work is not None and work.fell_clearly()
            )
            if (by_traffic or by_work) and not deep and not self._held(links, works, now, w, n):
                dips.add(g.gpu)
            if by_traffic or by_work:
                out.append(g)
                if deep:
                    clear.add(g.gpu)
                if left is not None:
                    left[0] += 1
        kept: list[GpuState] = []
        clearly = False
        for grp in groups:
            names = {g.gpu for g in grp}
            mine = [g for g in out if g.gpu in names]
            need = max(1, math.ceil(s.slow_gpus_ratio * len(grp)))
            if len(mine) >= need:
                kept.extend(mine)
                clearly = clearly or sum(g.gpu in clear for g in mine) >= need
        out = kept
        if out and not self._comm_gpus:
            self._comm_since = now - max(width[g.gpu][0] for g in out) / 2
            self._comm_found = now
        self._comm_clear = clearly
        self._comm_dips = frozenset(dips)
        self._comm_gpus = out
        return out

    def _held(
        self, links: Sequence[Series], works: Sequence[Series], now: float, w: float, n: int
    ) -> bool:
        """Whether a GPU's fall of traffic (or, without traffic, of work) over
        the latest window ``w`` holds without each window's two lowest
        samples (:meth:`_trimmed_means`). A shallow fall that two samples
        carry is a pause or a burst inside the window, too short for any
        sample to read idle (a 7 s ECN burst on a job's port at 10 s cut its
        40 s mean by 7 %: cross-check seed 56037). Read only for the GPUs
        found slow: rare, and the reads are per span."""
        s = self._eff
        limit = 1.0 - s.slow_ratio
        trimmed = partial(_summed, self._trimmed_means)
        traffic = _change(trimmed, links, now, w, n, floor=s.nvlink_min_bytes)
        if traffic is not None:
            return traffic.fell(limit)
        work = _change(trimmed, works, now, w, n)
        return work is not None and work.fell(limit)

    def _links_by_gpu(self) -> dict[str, list[Series]]:
        """The per-link NVLink transmit series by GPU, in the store's order:
        grouped again only when the family's series changed (the same series
        objects, checked by identity, group the same way)."""
        fam = self.store.family(sig.NVLINK_TX)
        seen, grouped = self._links
        if len(fam) == len(seen) and all(map(is_, fam, seen)):
            return grouped
        grouped = {}
        for x in fam:
            grouped.setdefault(x.labels[0], []).append(x)
        self._links = (fam, grouped)
        return grouped

    def _comm_kept(self, now: float, step: float) -> list[GpuState]:
        """The last check's slow GPUs, where that check was the one before:
        after checks were skipped (a stall went on, then its recovery) the
        GPUs found slow then are no part of a slowdown found now, nor is the
        time since they were (the other job's slowdown was dated back to
        before the stall)."""
        return self._comm_gpus if now - self._comm_checked <= 2.0 * step else []

    def _work_window(
        self, g: GpuState, lo: float, hi: float
    ) -> tuple[Sequence[float], float] | None:
        """The values of ``g``'s work signal in [lo, hi] (SM activity where
        it was sampled since ``lo``, else power against the GPU's peak) and
        the level under which one is idle; None without either. Read once
        per job GPU on every sample: the slowdown check skips a window with
        an idle sample in it (a slowdown is work going on at a lower rate; a
        stall's tail or a dip would lower its average without being one) or
        with under half its samples."""
        s = self._eff
        sm = self.store.get(sig.GPU_SM, (g.gpu,))
        if sm is not None and sm.updated >= lo:
            return self._windows.values(sm, lo, hi), s.idle_sm_ratio
        power = self.store.get(sig.GPU_POWER, (g.gpu,))
        if power is not None and g.peak_power > 0:
            return self._windows.values(power, lo, hi), s.idle_power_ratio * g.peak_power
        return None

    def _retune(self) -> None:
        """Re-derive the sample spacing and the settings scaled to it."""
        sp = self.detector.spacing()
        if math.isnan(sp):
            return
        sp = self._quantized(sp)
        self.spacing = sp
        eff = self._scaled.get(sp)
        if eff is None:
            eff = self._scaled[sp] = self.settings.at_spacing(sp, self.tick_s)
        self._eff = eff
        self.detector.retune(eff, sp, self._scrape_spacing())

    def _scrape_spacing(self) -> float:
        """The node's scrape spacing, read off its non-GPU counters (NIC,
        storage, switch: median over a few series; NaN without any), as
        quantized as :attr:`spacing`. An exporter may refresh GPU metrics
        slower than the node is scraped, so this can be finer than it."""
        found: list[float] = []
        for fam in sig.SCRAPE_FAMILIES:
            for series in self.store.family(fam)[:2]:
                sp = sig.spacing(series)
                if not math.isnan(sp):
                    found.append(sp)
        return self._quantized(sig.median(found)) if found else math.nan

    def _quantized(self, spacing: float) -> float:
        """``spacing`` to 0.25 s, never under the tick: jitter must not make
        every tick's settings differ."""
        return max(self.tick_s, round(spacing * 4) / 4)

    def _lead(self, onset: float, gpus: Collection[str]) -> float:
        """One iteration of the rhythm of the job of ``gpus`` plus one sample
        (at least ``onset_lead``)."""
        return max(self._eff.onset_lead, min(self._rhythm(onset, gpus), 60.0) + self.spacing)

    def _rhythm(self, until: float, gpus: Collection[str]) -> float:
        """The iteration period before ``until`` of the job of ``gpus`` (its
        GPUs as the last rhythm measurement grouped them; every job GPU
        before there was one); where it cannot be measured (flat, or sampled
        slower than it oscillates) it is at most two samples (the Nyquist
        bound), and that is used."""
        jobs = [grp for grp in self._rhythms if not grp.isdisjoint(gpus)]
        names = frozenset().union(*jobs) if jobs else None
        return max(self._measured_rhythm(until, names), 2.0 * self.spacing)

    def _measured_rhythm(self, until: float, gpus: Collection[str] | None) -> float:
        """The iteration period of the job of ``gpus`` (None: of every job
        GPU), measured on the work signal of those of them that run a job,
        over the baseline window before ``until`` (0 where it does not show)."""
        s = self._eff
        periods: list[float] = []
        for g in self.detector.job_gpus():
            if gpus is not None and g.gpu not in gpus:
                continue
            for fam in (sig.GPU_SM, sig.GPU_POWER):
                series = self.store.get(fam, (g.gpu,))
                if series is None:
                    continue
                w = sig.window(series, until - s.baseline_window, until - 1e-3)
                p = sig.iteration_period(w.values, w.times, min_swing=_RHYTHM_SWING)
                if p is not None:
                    periods.append(p)
                break
        return sig.median(periods) if periods else 0.0

    def _peers(self, ep: _Episode) -> Mapping[str, frozenset[str]]:
        """Each job GPU's job-mates: by job label where the GPUs have one,
        else by co-activity over the baseline before the onset."""
        job = self.detector.job_gpus()
        if job and all(g.job for g in job):
            by_job: dict[str, set[str]] = {}
            for g in job:
                by_job.setdefault(g.job, set()).add(g.gpu)
            return {g.gpu: frozenset(by_job[g.job]) for g in job}
        s = self._eff
        names = sorted((g.gpu for g in job), key=_gpu_order)
        return coactive_groups(self.store, names, ep.onset - s.baseline_window, ep.onset - ep.lead)

    def _resumed_from(self, ep: _Episode) -> float | None:
        """The onset of a resolving incident of the same kind and GPUs that
        ``ep`` resumes (it began within ``resolve_hold`` of that one's end, or is
        dated back to before it): a resumption of about an iteration inside
        one congestion, a link that flaps. The time since that onset is the
        fault's, not a baseline."""
        hold = self.settings.resolve_hold
        onsets = [
            live.incident.onset - self._offset
            for live in self._live.values()
            if live.ended is not None
            and live.incident.kind == ep.kind
            and ep.onset - live.ended <= hold
            and not ep.gpus.isdisjoint(live.incident.gpus)
        ]
        return min(*onsets, ep.onset) if onsets else None

    def _scope(self, ep: _Episode, now: float, members: list[GpuState]) -> frozenset[str]:
        """The stalled job's GPUs: those stalled in the episode, the GPUs of
        their job (process data, live), and job GPUs whose telemetry went
        silent (a GPU that fell off the bus stalls with the rest but reports
        nothing). Without job data the co-stalled GPUs are the job: the other
        job of a shared node keeps working. A job-mate (by co-activity
        before the onset) that has not reported since the stall began is
        silent already: where a job of four GPUs stalls because one fell off
        the bus, that GPU's XID explains the stall from the first idle poll,
        not once its silence outlasted ``sample_max_age``. ``members``: the
        episode's job GPUs (:meth:`_members`)."""
        s = self._eff
        gpus = set(ep.gpus)
        states = self.detector.gpus
        jobs = {states[g].job for g in gpus if g in states and states[g].job}
        mates: set[str] = set()
        for name in gpus:
            mates |= (ep.peers or {}).get(name, frozenset())
        for g in members:
            silent = now - g.last_sample > s.sample_max_age or (
                g.gpu in mates and g.last_sample < ep.onset
            )
            if (jobs and g.job in jobs) or silent:
                gpus.add(g.gpu)
        return frozenset(gpus)

    def _members(self, ep: _Episode) -> list[GpuState]:
        """The GPUs running a job now and those seen in one earlier in the
        episode (:attr:`_Episode.members`), in the detector's order."""
        job = self.detector.job_gpus()
        names = {g.gpu for g in job}
        if not ep.members <= names:
            states = self.detector.gpus
            job = [states[g] for g in sorted(names | ep.members, key=_gpu_order) if g in states]
        ep.members |= names
        return job

    def _score(
        self, ep: _Episode, now: float, *, min_samples: int = 2
    ) -> tuple[Attribution, tuple[str, ...]]:
        s = self._eff
        if ep.lead <= 0:
            ep.lead = self._lead(ep.onset, ep.gpus) + (self.spacing if ep.began_inside else 0.0)
        if ep.peers is None:
            ep.peers = self._peers(ep)
            ep.base_onset = self._resumed_from(ep)
        if ep.ports is None:
            base = ep.onset if ep.base_onset is None else ep.base_onset
            ep.ports = assign_ports(
                self.store, ep.peers, base - s.baseline_window, base - ep.lead, spacing=self.spacing
            )
        members = self._members(ep)
        ctx = ScoreContext(
            self.store,
            replace(s, onset_lead=ep.lead),
            ep.onset,
            now,
            spacing=self.spacing,
            scope=self._scope(ep, now, members),
            min_samples=min_samples,
            reach=self._comm_window(ep.gpus) if ep.kind == "slowdown" else 0.0,
            slowdown=ep.kind == "slowdown",
            peers=ep.peers,
            tick=self.tick_s,
            ports=ep.ports,
            base_onset=ep.base_onset,
        )
        evidence = collect(ctx, {g.gpu: g.last_sample for g in members})
        if ep.kind == "slowdown":
            evidence = [e for e in evidence if e.cause.slows]
        missing = missing_groups(self.store, now, s.sample_max_age)
        late_after = ep.onset + max(self.tick_s, 0.5 * self.spacing)
        # Exporters scrape at their own offsets and a rate's first sample of
        # a fault may be partial: a fault present at the onset shows within
        # about a sample and a half of it; one that showed later began while
        # the GPUs were already waiting and never decides a stall's cause.
        decides_by = ep.onset + max(2.0 * self.tick_s, 1.5 * self.spacing)
        # A slowdown is dated after it began: what showed first, by over a
        # sample, caused it (a storm starting inside it is secondary).
        first_by = 1.5 * max(self.tick_s, self.spacing) if ep.kind == "slowdown" else math.inf
        attr = attribute(
            evidence,
            missing,
            min_evidence=s.min_evidence,
            late_after=late_after,
            first_by=first_by,
            decides_by=decides_by if ep.kind == "stall" else math.inf,
            events_by=self._events_by(ep),
        )
        return attr, tuple(missing)

    def _events_by(self, ep: _Episode) -> float:
        """The time after which an event or link state change (an XID, a link
        going down) first seen began while the stall's GPUs already waited.

        SM activity slower than the tick is an average over its sample: the
        first one under ``idle_sm_ratio`` had the GPUs idle for almost all
        of the sample before its time, the stall's onset. An event is first
        seen on the first sample after it, so one first seen after the onset
        (plus a tenth of a sample of scrape jitter) happened inside that idle
        sample or later: secondary, whatever its score (cross-check seed
        16055: an XID stalled the job at 15 s samples, a link flap 15 s
        later, seen a sample after the onset, took the incident over). An
        onset dated back to the partial sample the stall began in is that
        sample's end, idle only for part of it: a sample later; one dated
        back by the scrape window of SM activity refreshed slower than the
        scrape is that window's start, and an event seen on the first idle
        sample, on a series refreshed as slowly, may have come in the
        refresh interval before the window. At the tick's pace, and on
        other work signals (power, utilization: not averages over the
        whole sample), the usual bounds hold."""
        if ep.kind != "stall" or not self.spacing > 2.0 * self.tick_s:
            return math.inf
        gpus = [self.detector.gpus.get(g) for g in ep.gpus]
        if not gpus or any(g is None or g.signal != "sm_active" for g in gpus):
            return math.inf
        return ep.onset + ep.dated_back + 0.1 * self.spacing

    def _step_stall(
        self,
        ep: _Episode | None,
        bad: list[GpuState],
        *,
        now: float,
        dt: float,
        out: list[IncidentTransition],
    ) -> _Episode | None:
        """One tick of the stall path: start, extend, open or end the episode."""
        s = self._eff
        if not bad:
            self._idle_at_clear = [
                (g.gpu, g.idle_since)
                for g in self.detector.gpus.values()
                if g.idle and now - g.last_sample <= max(self.tick_s, self.spacing)
            ]
            if ep is not None and ep.live is not None and ep.broken_at is None:
                self._name_at_resumption(ep, ep.live, now, out)
            return self._quiet(ep, "stall", now)
        if ep is not None and ep.live is None and not ep.gpus & {g.gpu for g in bad}:
            # Every GPU of an episode not yet opened works again: it ended,
            # whatever went idle on this tick (one GPU's swapped or stale
            # sample held idle until its next one, 60 s later, as the
            # job stalled on its others: cross-check seed 16000 dated the
            # job's checkpoint a sample early and read no write burst in it).
            ep = None
        if ep is None:
            onset = self._stall_onset(bad)
            ep = _Episode("stall", onset, now, run_onset=onset)
            ep.began_inside = any(g.began_inside and g.idle_since == onset for g in bad)
            ep.dated_back = max((g.dated_back for g in bad if g.idle_since == onset), default=0.0)
        elif ep.broken_at is not None:
            self._rejoin(ep, min(g.idle_since for g in bad))
        lost = dt * len(bad)
        grew, latest = self._extend(ep, bad, now, lost)
        if ep.live is not None:
            self._continue(ep, ep.live, lost, grew, now=now, out=out, may_fall_to_unknown=True)
            return ep
        # Measured on samples, not ticks: a GPU whose next samples are
        # missing must not look idle for longer than it was seen idle. And
        # a stall lasts while GPUs stay idle: GPUs idle on one sample each,
        # at different samples (a pause seen on one GPU's sample, a missed
        # or swapped sample on another's next), are no stall of two samples.
        held = max(g.last_sample - g.idle_since for g in bad)
        duration = min(latest - ep.onset, held)
        if not self._reached(duration, s.min_duration_with_evidence):
            # Evidence before the onset is credited as one poll.
            credit = max(self.tick_s, self.spacing)
            if not ep.pre_checked and duration + credit >= s.min_duration_with_evidence:
                ep.pre_checked = True
                self._open_if_preceded(ep, bad, now=now, out=out)
            return ep
        attr, missing = self._score(ep, now)
        run = min(latest - ep.run_onset, held)
        if self._reached(run, s.min_duration) or (
            self._strong(ep, attr, now)
            and self._outlasted_dips(attr, duration)
            and not self._reported(ep, attr)
        ):
            self._open(ep, attr, missing, bad, now=now, out=out)
        return ep

    def _name_at_resumption(
        self, ep: _Episode, live: _Live, now: float, out: list[IncidentTransition]
    ) -> None:
        """Re-score a stall still ``unknown`` on the tick its GPUs work again.

        A counter refreshed slower than the scrape (dcgm-exporter's NVLink
        error counters on its own interval) may show the stall's interval
        on one sample only before the GPUs resume, and no more than one
        until the samples that come with the resumption: those can name
        the cause the incident lacked. They never overturn a cause already
        named (a storm whose end let the GPUs resume reads gone on them)."""
        inc = live.incident
        if inc.cause is not Cause.UNKNOWN:
            return
        attr, missing = self._score(ep, now)
        if attr.cause is Cause.UNKNOWN:
            return
        live.incident = self._revise(self._with_cost(_with_verdict(inc, attr, missing)), now)
        out.append(IncidentTransition("updated", self._wall(now), live.incident))

    def _outlasted_dips(self, attr: Attribution, duration: float) -> bool:
        """Whether a stall seen for ``duration`` has outlasted the dips that
        come with the same evidence. A write burst begins with the stall it
        explains, and with an evaluation pause too (the job logs or saves
        while its GPUs wait): a pause shorter than two samples still reads
        idle on two, the first dated back to the partial sample it began
        in, or two 1 s samples it nearly covered. So a burst on a disk
        opens a checkpoint on its ``checkpoint_min_samples``-th idle sample.
        A burst on a checkpoint path of the node's configuration (where the
        storage collector flags bursts, ``fabricwatch_storage_write_burst``)
        is the job's own write, and like a cause whose evidence came first,
        or a discrete event, is told apart on two."""
        if attr.cause is not Cause.CHECKPOINT_WRITE:
            return True
        path = dict(attr.culprit.labels).get("path")
        if path is not None and self.store.get(sig.ST_WRITE_BURST, (path,)) is not None:
            return True
        step = max(self.tick_s, self.spacing)
        return self._reached(duration, (self._eff.checkpoint_min_samples - 1) * step)

    def _reached(self, duration: float, need: float) -> bool:
        """Whether a stall seen for ``duration`` (between sample times) has
        lasted ``need``. Scrape jitter moves a sample by a few per cent of
        the spacing: the second of two 1 s samples may come 0.98 s after the
        first, and a stall then waited a poll for its ``need`` of 1 s. A
        tenth of a sample of slack, never half of ``need`` (a first idle
        sample is no second one at any spacing)."""
        slack = min(0.1 * max(self.tick_s, self.spacing), 0.5 * need)
        return duration + slack >= need

    def _step_slowdown(
        self,
        ep: _Episode | None,
        bad: list[GpuState],
        *,
        now: float,
        dt: float,
        out: list[IncidentTransition],
    ) -> _Episode | None:
        """One tick of the slowdown path. Slowdowns without evidence are not
        incidents (evaluation phases, data loading): only attributed ones
        open, and on a node blind to congestion those whose exchange slowed
        (:meth:`_unseen_slowdown`)."""
        s = self._eff
        if not bad:
            kept = self._quiet(ep, "slowdown", now)
            if ep is not None and ep.live is not None and kept is None:
                self._slow_end = ep.last_bad
            return kept
        if ep is None:
            onset = min(g.slow_since if g.slow else self._comm_since for g in bad)
            # Dated back no further than the last slowdown incident's end: its tail,
            # still in the throughput window as the job recovers, reads as
            # slow for a check or two, and is no new slowdown's time (nor
            # does a second cause that began inside that one become the
            # cause of a new one).
            onset = max(onset, self._slow_end)
            ep = _Episode("slowdown", onset, now, run_onset=onset)
        elif ep.broken_at is not None:
            self._rejoin(ep, min(g.slow_since for g in bad))
        lost = dt * sum(g.lost_work() for g in bad)
        grew, latest = self._extend(ep, bad, now, lost)
        if ep.live is not None:
            self._continue(ep, ep.live, lost, grew, now=now, out=out, may_fall_to_unknown=False)
        elif latest - ep.onset >= s.min_duration and now >= ep.next_score:
            attr, missing = self._score(ep, now)
            ep.next_score = now + s.rescore_every
            if (
                (attr.cause is not Cause.UNKNOWN or self._unseen_slowdown(ep, latest, missing))
                and self._slow_settled(ep, bad, latest, now, attr)
                and not self._reported(ep, attr)
            ):
                self._open(ep, attr, missing, bad, now=now, out=out)
        return ep

    def _remember_fault(self, inc: Incident, gpus: Collection[str], now: float) -> None:
        """Keep the fault of a stall incident whose GPUs work again (see
        :meth:`_reported`); an ``unknown`` stall named none."""
        if inc.cause == Cause.UNKNOWN:
            return
        named = {e.culprit.key for e in inc.evidence if e.cause == inc.cause}
        fault = _Reported(inc.cause, frozenset({inc.culprit.key, *named}), frozenset(gpus), now)
        self._reported_faults = [
            r
            for r in self._reported_faults
            if (r.cause, r.culprits, r.gpus) != (fault.cause, fault.culprits, fault.gpus)
        ]
        self._reported_faults.append(fault)

    def _forget_faults(self, now: float) -> None:
        """Drop the reported faults the slowdown check's history no longer
        reaches before (two baseline windows, or eight throughput windows of
        the job, plus the latest one): past there a fault that stood on is
        part of the job's baseline, and its evidence no rise."""
        s = self._eff
        kept = []
        for r in self._reported_faults:
            w = self._comm_window(r.gpus)
            reach = max(_HISTORY_CHUNKS * w, 2.0 * s.baseline_window) + w
            if now - r.ended <= reach:
                kept.append(r)
        self._reported_faults = kept

    def _reported(self, ep: _Episode, attr: Attribution) -> bool:
        """Whether a verdict names the fault of a stall incident of the same
        job that stood on since the GPUs worked again: that fault was
        reported with the stall. A slowdown it explains is no new incident;
        a new stall it explains opens only once it lasted ``min_duration``
        (standing evidence came with no dip; a 5.8 s evaluation pause read
        idle on one 30 s sample four minutes after an NVLink stall, and the
        link's standing evidence opened a 29 s stall on it: held-out
        cross-check seed 130069).

        A fault can outlast the stall it caused: an NVLink left degraded and
        erroring while the job runs on around it (cross-check seeds 87069,
        112009, 117069, 70039). The slowdown check's history still holds
        the windows before the fault, so the GPU behind the link reads slow
        on every window, and a beat of the rhythm on one other GPU, or a
        dip of a few per cent on all, made a "slowdown" that the fault's
        standing evidence explained, once or twice after every such stall.
        Evidence of the same cause on the same device that showed anew after
        the GPUs worked again (its unbroken run began after that, see
        :attr:`Evidence.since`) is a new occurrence and opens as usual, as
        does every other cause, and a verdict that continues a resolving
        incident (:meth:`_recurring`: a checkpoint's second idle phase)
        opens nothing new."""
        if not self._reported_faults or self._recurring(ep, attr) is not None:
            return False
        for r in self._reported_faults:
            if r.cause != attr.cause or r.gpus.isdisjoint(ep.gpus):
                continue
            same = [
                e for e in attr.evidence if e.cause == attr.cause and e.culprit.key in r.culprits
            ]
            if attr.culprit.key not in r.culprits and not same:
                continue
            if not any(e.since is not None and e.since > r.ended for e in same):
                return True
        return False

    def _slow_settled(
        self, ep: _Episode, bad: list[GpuState], latest: float, now: float, attr: Attribution
    ) -> bool:
        """Whether the slow GPUs' verdict is more than one look at the data.

        A slowdown found on window means is dated half a throughput window
        back, and that date alone meets ``min_duration``. Where the window
        holds many samples (30 at 1 s), a check's window shares all but one
        of them with the one before: a mean just past its noise (the beat of
        a rhythm sampled near its own period makes one now and then, for a
        check or two) is one observation however many checks see it. Such a
        verdict must hold until the window took in a tenth of its samples
        anew (3 checks at 1 s; at once where a window is ten samples or
        fewer, as at 5-30 s). A fall of twice the noise or strong evidence
        of a cause that halts a job (as for a stall) opens at once. A
        shallow fall that two samples of the window carry (:meth:`_held`: a
        pause or a burst inside it) waits until it holds without them. Work
        below ``slow_ratio`` of its baseline opens once it lasted an
        iteration of the job's rhythm (as the throughput window holds whole
        ones): sampled near its own period, a job's work beats, and its
        samples read low for a sample or two once a beat (cross-check seed
        52035: a 9.3 s rhythm's power at 10 s read slow on two samples of a
        62 s beat, next to the tail of a CNP burst)."""
        s = self._eff
        if self._comm_clear or (attr.cause.halts and attr.score >= s.strong_evidence):
            return True
        if all(g.slow for g in bad):
            return latest - ep.run_onset >= self._job_rhythm(ep.gpus) - 1e-9
        if all(g.slow or g.gpu in self._comm_dips for g in bad):
            return False
        step = max(self.tick_s, self.spacing)
        looks = math.ceil(0.1 * self._comm_window(ep.gpus) / step - 1e-9)
        return now - self._comm_found >= (looks - 1) * step - 1e-9

    def _unseen_slowdown(self, ep: _Episode, latest: float, missing: tuple[str, ...]) -> bool:
        """Whether a slowdown nothing explains is ``unknown`` rather than no
        incident: on a node that reads no congestion counters (ECN marks,
        CNPs: the evidence of what slows an exchange), one unbroken for a
        whole throughput window whose exchange slowed (:meth:`_exchange_slowed`),
        judged once. The incident names the counters this node does not read."""
        s = self._eff
        w = self._comm_window(ep.gpus)
        if "congestion" not in missing or latest - ep.run_onset < max(s.min_duration, w):
            return False
        if ep.exchange_slowed is None:
            ep.exchange_slowed = self._exchange_slowed(ep, latest, w)
        return ep.exchange_slowed

    def _exchange_slowed(self, ep: _Episode, latest: float, w: float) -> bool:
        """Whether the job's exchange slowed over the latest throughput
        window ``w``: communication throughput (NVLink) fell below its own
        history on ``slow_gpus_ratio`` of the episode's GPUs while their work
        did not rise, judged without each span's two lowest samples
        (:func:`_without_lowest`: a 1-3 s dip, a pause straddling two
        coarse samples or a missing sample of a rhythm near the sample
        spacing moves a 5 s window mean by the few per cent of a shallow
        slowdown) and by more than the window may stray by the phases of
        the rhythm its samples caught (:meth:`_phase_luck`), and the median
        GPU's work stayed at ``slow_ratio`` of its history or more (an
        evaluation phase or data loading cuts the work itself). Without
        communication throughput nothing tells a slower exchange from a
        change of work: no incident."""
        s = self._eff
        chunks = max(_HISTORY_CHUNKS, int(2.0 * s.baseline_window // w))
        ratios: list[float] = []
        held = 0
        for gpu in sorted(ep.gpus, key=_gpu_order):
            found = self.store.get(sig.GPU_SM, (gpu,)) or self.store.get(sig.GPU_POWER, (gpu,))
            work = [found] if found is not None else []
            links = self._nvlink(gpu) or self._own_roce(ep)
            n = min(chunks, _whole_windows([*links, *work], latest, w))
            if n < _MIN_CHUNKS:
                continue
            change = _change(self._windows.summed_means, work, latest, w, n)
            if change is not None:
                ratios.append(change.ratio)
            trimmed = partial(_summed, self._trimmed_means)
            traffic = _change(trimmed, links, latest, w, n)
            level = _change(trimmed, work, latest, w, n)
            # Where the window's lowest samples hold most of the work's fall
            # (of over 2 %, as rose() reads a rise), that is a pause inside
            # it (an evaluation, a dip): its traffic is no slower exchange,
            # though without those samples it still reads a little low (the
            # history's windows lost their own lowest, samples of the
            # rhythm's usual low).
            dip = (
                change is not None
                and level is not None
                and change.ratio < 1.0 - 0.02
                and level.ratio - change.ratio > 0.5 * (1.0 - change.ratio)
            )
            if (
                traffic is not None
                and traffic.fell(1.0 - s.slow_ratio)
                and traffic.ratio < 1.0 - self._phase_luck(links, latest, w, n)
                and not (level is not None and level.rose())
                and not dip
            ):
                held += 1
        need = max(1, math.ceil(s.slow_gpus_ratio * len(ep.gpus)))
        return held >= need and bool(ratios) and sig.median(ratios) >= s.slow_ratio

    def _phase_luck(self, links: Sequence[Series], latest: float, w: float, n: int) -> float:
        """How far the mean of the latest window ``w`` of ``links`` (summed
        per sample, its two lowest samples left out) may stray from the
        history by which phases of the job's rhythm its samples caught: the
        spread of the history's samples relative to their mean, over the
        root of the samples left in the window (0.0 where unknown).

        The history's window means of a strictly periodic rhythm agree to a
        per cent or two, each window catching the same mix of phases; any
        pause shifts the phase, and a gauge sampled near the rhythm's period
        (dcgm-exporter NVLink bandwidth every 5 s, a 6.4 s iteration: samples
        of 12-97 GB/s) then moves the next window's mean by as much as the
        samples' spread allows (cross-check seeds 132029, 136025, 96023,
        104015: a 1.5-6.6 s evaluation pause, 7-23 % less traffic without
        its samples, read as a slower exchange)."""
        hist = [self._windows.values(x, latest - (n + 1) * w, latest - w) for x in links]
        recent = [self._windows.values(x, latest - w, latest) for x in links]
        if not hist or any(len(v) != len(hist[0]) for v in hist):
            return 0.0
        summed: list[float] = [sum(col) for col in zip(*hist, strict=True)]
        m = min(len(v) for v in recent)
        kept = m - 2 if m >= 4 else m - 1
        if len(summed) < 2 or kept < 1:
            return 0.0
        mean = sum(summed) / len(summed)
        if mean <= 0:
            return 0.0
        sd = math.sqrt(sum((v - mean) ** 2 for v in summed) / len(summed))
        return sd / mean / math.sqrt(kept)

    def _own_roce(self, ep: _Episode) -> list[Series]:
        """The RoCE transmit series of the episode's job (every port where
        the node holds one job, else the ports assigned to it): the
        exchange, read where the node has no NVLink counters."""
        ports = self.store.family(sig.NIC_TX_BYTES)
        if ep.ports is None or len(ep.ports.jobs) < 2:
            return list(ports)
        return [
            x for x in ports if ep.ports.verdict(port_key("nic", x), frozenset(ep.gpus)) == "own"
        ]

    def _nvlink(self, gpu: str) -> list[Series]:
        """The GPU's NVLink transmit series: its total, else one per link."""
        total = self.store.get(sig.NVLINK_TX, (gpu, "total"))
        if total is not None:
            return [total]
        return [x for x in self.store.family(sig.NVLINK_TX) if x.labels[0] == gpu]

    def _trimmed_means(
        self, series: Series, now: float, width: float, chunks: int
    ) -> list[float] | None:
        """Means of ``series`` over the spans of :func:`signals.chunk_means`,
        each without its two lowest samples (:func:`_without_lowest`; None
        when the latest span holds fewer than three points; an earlier one
        with fewer than :func:`signals.enough_points` is NaN, as in
        :func:`signals.chunk_means`)."""
        out: list[float] = []
        need = 3
        for start, end in sig.chunk_spans(now, width, chunks):
            vals = self._windows.values(series, start, end)
            if len(vals) < need:
                if not out:
                    return None
                out.append(math.nan)
                continue
            if not out:
                need = sig.enough_points(len(vals), 3)
            out.append(_without_lowest(vals))
        return out

    def _quiet(self, ep: _Episode | None, kind: str, now: float) -> _Episode | None:
        """A tick without bad GPUs: the run breaks, and the episode ends once
        its GPUs worked for ``end_after``."""
        self._clear[kind] = now
        if ep is None:
            return None
        if now - ep.last_bad >= self._eff.end_after:
            if ep.live is not None:
                ep.live.ended = ep.last_bad
                inc = ep.live.incident
                ep.live.incident = replace(inc, ended_at=self._wall(ep.last_bad))
            return None
        if ep.broken_at is None:
            ep.broken_at = now
        return ep

    @staticmethod
    def _rejoin(ep: _Episode, since: float) -> None:
        """Bad GPUs again after a break: a new unbroken run starts."""
        ep.run_onset = max(since, ep.broken_at if ep.broken_at is not None else since)
        ep.broken_at = None

    def _extend(
        self, ep: _Episode, bad: list[GpuState], now: float, lost: float
    ) -> tuple[bool, float]:
        """Add this tick's bad GPUs to the episode; (whether the GPU set grew,
        the newest sample of the bad GPUs)."""
        latest = max(g.last_sample for g in bad)
        if latest - ep.seen > self._eff.sample_max_age and ep.seen > -math.inf:
            ep.run_onset = max(ep.run_onset, latest)
        ep.seen = max(ep.seen, latest)
        grew = not {g.gpu for g in bad} <= ep.gpus
        ep.gpus.update(g.gpu for g in bad)
        ep.last_bad = now
        ep.gpu_seconds += lost
        return grew, latest

    def _continue(
        self,
        ep: _Episode,
        live: _Live,
        lost: float,
        grew: bool,
        *,
        now: float,
        out: list[IncidentTransition],
        may_fall_to_unknown: bool,
    ) -> None:
        """Account an open incident's tick and re-score it every ``rescore_every``.

        ``may_fall_to_unknown``: once the onset window is complete, evidence
        that did not last through it (a burst that coincided with the first
        idle polls) no longer explains a stall, so its verdict may fall to
        unknown; a slowdown keeps its last attributed cause.
        """
        s = self._eff
        self._account(live.incident.cause, lost)
        inc = live.incident
        inc = replace(
            inc,
            gpus=tuple(sorted(set(inc.gpus) | ep.gpus, key=_gpu_order)),
            gpu_seconds=inc.gpu_seconds + lost,
        )
        changed = grew
        if now >= ep.next_score:
            ep.next_score = now + s.rescore_every
            attr, missing = self._score(ep, now)
            settled = now - ep.onset >= max(5.0, 2.0 * self.spacing, 3.0 * self.tick_s)
            later = ep.kind == "slowdown" and attr.cause not in ep.open_causes | {inc.cause}
            # A slowdown outlasting its fault (the throughput window lags)
            # keeps the culprit named while the fault held: fading evidence
            # of its cause does not hand it to a weaker port.
            fading = (
                ep.kind == "slowdown"
                and attr.cause == inc.cause
                and (
                    _cause_score(attr.evidence, attr.cause) < _cause_score(inc.evidence, inc.cause)
                    or _culprit_faded(attr, inc)
                )
            )
            if (
                not later
                and not fading
                and (attr.cause is not Cause.UNKNOWN or (settled and may_fall_to_unknown))
                and (
                    attr.cause != inc.cause
                    or attr.culprit.key != inc.culprit.key
                    or abs(attr.confidence - inc.confidence) >= 0.1
                    # A second fault that began inside the episode: listed
                    # as secondary evidence, with its own time, once seen.
                    or {e.cause for e in attr.evidence} - {e.cause for e in inc.evidence}
                )
            ):
                changed = True
                inc = _with_verdict(inc, attr, missing)
        inc = self._with_cost(inc)
        if changed:
            inc = self._revise(inc, now)
            out.append(IncidentTransition("updated", self._wall(now), inc))
        live.incident = inc

    def _open_if_preceded(
        self, ep: _Episode, bad: list[GpuState], *, now: float, out: list[IncidentTransition]
    ) -> None:
        """Open on the stall's first poll when the evidence came first.

        A fault usually shows before its victims stall: a pause storm blocks
        traffic, an NVLink drops, and the collectives hang on the next poll.
        Evidence of one cause before the stall onset (credited as one poll,
        however long it lasted), strong by the stalled poll (see
        :meth:`_strong`), plus the stalled poll is the same
        two-poll confirmation the fast path asks of a stall seen on two
        polls (``min_duration_with_evidence`` of one tick). A discrete event
        on the stalled job's own devices (an XID, a link that went down) in
        the interval the GPUs stopped in is evidence on its own, with no
        second sample to wait for (issue 16, mechanism 5). Other evidence
        that appears only with the idle poll (a checkpoint burst, a storm
        that began with it) still needs the second idle poll.
        """
        s = self._eff
        # Before the onset one sample suffices, and it need only show the
        # cause: a fault that began inside the sample the GPUs stalled in
        # reads partly there, as their work does. The verdict at ``now``
        # must hold on two samples (that one and the stalled one at least).
        pre, _ = self._score(ep, ep.onset - 1e-3, min_samples=1)
        # A checkpoint is the job's own write and begins with the stall: a
        # burst in a scrape just before the first idle one is the exporters'
        # offsets (or a background writer), not a fault that came first.
        preceded = (
            pre.cause.halts
            and pre.score >= s.min_evidence
            and pre.cause is not Cause.CHECKPOINT_WRITE
        )
        attr, missing = self._score(ep, now)
        if (
            (preceded and attr.cause == pre.cause and self._strong(ep, attr, now))
            or _discrete(attr, s.strong_evidence)
        ) and not self._reported(ep, attr):
            self._open(ep, attr, missing, bad, now=now, out=out)

    def _strong(self, ep: _Episode, attr: Attribution, now: float) -> bool:
        """Whether ``attr`` (scored on two samples) may open a stall before
        ``min_duration``: a cause that halts a job, strong on two samples, or
        shown on two (``min_evidence``) and strong on one of them. A sample
        is an average over its interval: a fault that began inside the
        first one reads there only for the part after it began (a storm
        from the middle of a sample pauses half of it), so holding it to
        the strong level on both samples waits a sample for what the
        second shows whole. One poll is still no evidence: what showed on
        one sample only does not count (a second sample must show the
        same cause), nor does a cause that does not halt."""
        s = self._eff
        if not attr.cause.halts or attr.score < s.min_evidence:
            return False
        if attr.score >= s.strong_evidence:
            return True
        peak, _ = self._score(ep, now, min_samples=1)
        return (
            peak.cause == attr.cause
            and peak.culprit.key == attr.culprit.key
            and peak.score >= s.strong_evidence
        )

    def _stall_onset(self, bad: list[GpuState]) -> float:
        """When the node stall began: its first idle GPU's onset, unless that
        GPU's idleness reaches back past the last tick the node was working
        without having been seen idle then (its samples were missing and its
        idle state was held) or from long before (a GPU idle on its own)."""
        clear = self._clear.get("stall", -math.inf)
        seen = dict(self._idle_at_clear)
        hold = self._eff.end_after
        # Samples slower than the tick are interval averages: a stall that
        # began inside the last one before the clear tick began before it.
        slack = self.spacing if self.spacing > 2 * self.tick_s else 0.0
        trusted = [
            g.idle_since
            for g in bad
            if g.idle_since > clear - slack
            or (seen.get(g.gpu) == g.idle_since and clear - g.idle_since <= hold)
        ]
        return min(trusted) if trusted else clear

    def _with_cost(self, inc: Incident) -> Incident:
        price = self.settings.cost_per_gpu_hour
        return replace(inc, cost=inc.gpu_seconds * price / 3600.0 if price > 0 else None)

    def _revise(self, inc: Incident, now: float) -> Incident:
        end = inc.ended_at if inc.ended_at is not None else self._wall(now)
        return replace(
            inc,
            updated_at=self._wall(now),
            revision=inc.revision + 1,
            summary=summarize(
                kind=inc.kind,
                gpus=inc.gpus,
                seconds=end - inc.onset,
                cause=inc.cause,
                confidence=inc.confidence,
                evidence=inc.evidence,
                missing=inc.missing,
            ),
        )

    def _account(self, cause: str, gpu_seconds: float) -> None:
        self._gpu_seconds[cause] = self._gpu_seconds.get(cause, 0.0) + gpu_seconds

    def _open(
        self,
        ep: _Episode,
        attr: Attribution,
        missing: tuple[str, ...],
        bad: list[GpuState],
        *,
        now: float,
        out: list[IncidentTransition],
    ) -> None:
        s = self._eff
        ep.next_score = now + s.rescore_every
        ep.open_causes = attr.primary
        gpus = tuple(sorted(ep.gpus, key=_gpu_order))
        jobs = [g.job for g in bad if g.job]
        job = max(sorted(set(jobs)), key=jobs.count) if jobs else ""
        # A recurrence of a resolving incident (same kind, cause, culprit) is
        # the same incident: a flapping link pages once, not forty times.
        live = self._recurring(ep, attr)
        if live is not None:
            inc = live.incident
            live.ended = None
            live.onset = ep.onset
            inc = replace(
                inc,
                ended_at=None,
                episodes=inc.episodes + 1,
                gpus=tuple(sorted(set(inc.gpus) | set(gpus), key=_gpu_order)),
                gpu_seconds=inc.gpu_seconds + ep.gpu_seconds,
            )
            inc = self._revise(self._with_cost(inc), now)
            live.incident = inc
            ep.live = live
            self._account(inc.cause, ep.gpu_seconds)
            out.append(IncidentTransition("updated", self._wall(now), inc))
            return
        if ep.kind == "stall" and self._adopt_slowdown(ep, attr, missing, now=now, out=out):
            return
        onset = self._wall(ep.onset)
        inc = Incident(
            key=incident_key(self.node, attr.cause, attr.culprit.key, onset),
            node=self.node,
            kind="stall" if ep.kind == "stall" else "slowdown",
            state="open",
            cause=attr.cause,
            confidence=attr.confidence,
            culprit=attr.culprit,
            summary="",
            onset=onset,
            opened_at=self._wall(now),
            updated_at=self._wall(now),
            ended_at=None,
            resolved_at=None,
            gpus=gpus,
            job=job,
            gpu_seconds=ep.gpu_seconds,
            cost=None,
            episodes=1,
            evidence=attr.evidence[:10],
            missing=missing,
            revision=0,
        )
        inc = self._revise(self._with_cost(inc), now)
        live = _Live(inc, ep.onset)
        self._live[inc.key] = live
        ep.live = live
        self._opened[attr.cause] = self._opened.get(attr.cause, 0.0) + 1.0
        self._account(attr.cause, ep.gpu_seconds)
        out.append(IncidentTransition("opened", self._wall(now), inc))

    def _recurring(self, ep: _Episode, attr: Attribution) -> _Live | None:
        """A resolving incident (ended, not yet resolved) of the episode's
        kind, with the verdict's cause and culprit: opening ``ep`` continues
        it (see :meth:`_open`)."""
        for live in self._live.values():
            inc = live.incident
            if (
                live.ended is not None
                and inc.kind == ep.kind
                and inc.cause == attr.cause
                and _same_culprit(inc, attr)
            ):
                return live
        return None

    def _adopt_slowdown(
        self,
        ep: _Episode,
        attr: Attribution,
        missing: tuple[str, ...],
        *,
        now: float,
        out: list[IncidentTransition],
    ) -> bool:
        """Continue, as this stall, a slowdown incident of the same GPUs that
        opened on the stall's own leading edge; whether one was continued.

        At 5-30 s spacing a sample is a window average: the one in which the
        GPUs stall reads as a deep drop of work, and the slowdown check may
        open on it a sample before the stall path sees an idle sample. That
        slowdown is this stall (one incident, not two), and what caused it
        is the stall's verdict, not whatever fabric burst (an ECN burst on
        some port, the other job's congestion) held on that one sample. A
        slowdown opened earlier than the sample before the stall is one of
        its own and stays apart, unless it names the stall's own fault (the
        same cause and culprit) and is still open or resolving: the fault
        slowed the job first and then stalled it, one incident from its
        first slow sample (held-out cross-check seed 138003: NFS write
        latency ramping up over a minute slowed the job at 19x its baseline,
        the slowdown ended as its window lagged, and the stall 20 s later at
        98x was a second page for the same path).
        """
        sample_s = max(self.tick_s, self.spacing)
        since = self._wall(ep.onset - 1.5 * sample_s)
        for live in self._live.values():
            inc = live.incident
            shared = ep.gpus.intersection(inc.gpus)
            if inc.kind != "slowdown" or 2 * len(shared) <= len(inc.gpus):
                continue
            leading = inc.opened_at >= since and (
                live.ended is None or live.ended >= ep.onset - sample_s
            )
            same_fault = (
                attr.cause is not Cause.UNKNOWN
                and inc.cause == attr.cause
                and _same_culprit(inc, attr)
            )
            if not (leading or same_fault):
                continue
            if self._slow is not None and self._slow.live is live:
                self._slow = None
            live.ended = None
            live.onset = ep.onset
            inc = replace(
                _with_verdict(inc, attr, missing),
                kind="stall",
                ended_at=None,
                gpus=tuple(sorted(set(inc.gpus) | ep.gpus, key=_gpu_order)),
                gpu_seconds=inc.gpu_seconds + ep.gpu_seconds,
            )
            live.incident = self._revise(self._with_cost(inc), now)
            ep.live = live
            self._account(attr.cause, ep.gpu_seconds)
            out.append(IncidentTransition("updated", self._wall(now), live.incident))
            return True
        return False

    def _resolve(self, now: float, out: list[IncidentTransition]) -> None:
        if self._restoring:
            self._continue_restored(now)
        hold = self.settings.resolve_hold
        done = [
            k for k, lv in self._live.items() if lv.ended is not None and now - lv.ended >= hold
        ]
        for key in done:
            live = self._live.pop(key)
            inc = replace(live.incident, state="resolved", resolved_at=self._wall(now))
            inc = self._revise(inc, now)
            out.append(IncidentTransition("resolved", self._wall(now), inc))


@dataclass(frozen=True, slots=True)
class _Change:
    """A series' mean over the latest window against its own history."""

    ratio: float  # latest window mean / median of the history's window means
    history: Sequence[float]  # the history's window means
    base: float  # their median

    @property
    def noise(self) -> float:
        """3 sigma of the history's window means, relative to their median."""
        return 3.0 * sig.mad(self.history, self.base) / self.base

    def fell(self, limit: float) -> bool:
        """Below the history by more than its noise (at least 5 %; never
        more asked than ``limit``, what ``slow_ratio`` asks of SM activity)."""
        # The bar lies between 1 - limit and 1 - min(limit, 5 %) whatever the
        # noise: outside that band the answer needs no noise, which is most
        # of the cost (this runs for every job GPU on every sample).
        if self.ratio >= 1.0 - min(limit, _MIN_DROP):
            return False
        if self.ratio < 1.0 - limit:
            return True
        return self.ratio < 1.0 - min(limit, max(_MIN_DROP, self.noise))

    def fell_clearly(self) -> bool:
        """Below the history by twice its noise (at least 10 %). Unlike
        :meth:`fell`, never capped at ``slow_ratio``: a verdict taken on one
        look at the data must stand out from the history's own spread, and
        where that spread is wide (a rhythm aliased by its sampling: a
        1.9 s exchange every 11 s, caught whole or in part by 1 s samples
        2 s apart, moves 33 s window means by 25-70 %, cross-check seed
        3031) a fall past ``slow_ratio`` is no such verdict."""
        return self.ratio < 1.0 - 2.0 * max(_MIN_DROP, self.noise)

    def rose(self) -> bool:
        """Above the history by more than its noise (2-5 %): a few windows of
        a changed mix already in the history must not hide it."""
        # As in fell(): the bar lies in [1.02, 1.05] whatever the noise.
        if self.ratio <= 1.0 + 0.02:
            return False
        if self.ratio > 1.0 + 0.05:
            return True
        return self.ratio > 1.0 + min(0.05, max(0.02, self.noise))


_MIN_CHUNKS = 4
"""Fewest earlier windows a throughput or work change is measured against."""
_HISTORY_CHUNKS = 8
"""Earlier windows a throughput or work change is measured against where the
history holds them (fewer, down to ``_MIN_CHUNKS``, where it does not)."""


def _whole_windows(series: Sequence[Series], now: float, width: float) -> int:
    """How many whole ``width`` windows before the latest one every series'
    history covers."""
    have = math.inf
    for x in series:
        first = x.first_ts()
        if first is None:
            return 0
        have = min(have, (now - width - first) // width)
    return 0 if not math.isfinite(have) else max(0, int(have))


_Summed = Callable[[Sequence[Series], float, float, int], tuple[float, list[float]] | None]
"""Reads the latest and the earlier window means of series, summed over them
(:meth:`HistoryMirrors.summed_means`, or :func:`_summed` over another reader)."""


def _without_lowest(vals: Sequence[float]) -> float:
    """The mean of ``vals`` without its two lowest values (its lowest where
    it holds under four). A pause shorter than two samples, too short for
    any sample to read idle (a 6 s evaluation at 5 s spacing), lowers the
    two samples it straddles; a slowdown lowers every sample."""
    if len(vals) < 4:
        return (sum(vals) - min(vals)) / (len(vals) - 1)
    low = sorted(vals)[:2]
    return (sum(vals) - low[0] - low[1]) / (len(vals) - 2)


def _change(
    summed: _Summed,
    series: Sequence[Series],
    now: float,
    width: float,
    chunks: int,
    *,
    floor: float = 0.0,
) -> _Change | None:
    """The summed mean of ``series`` over the latest ``width`` against the
    ``chunks`` windows before it (read by ``summed``, on the spans of
    :func:`signals.chunk_means`); None without the data or below ``floor``.
    Earlier windows a collector gap left without data (NaN) are left out;
    with fewer than ``_MIN_CHUNKS`` left there is no history to judge by."""
    if not series:
        return None
    found = summed(series, now, width, chunks)
    if found is None:
        return None
    recent, history = found
    if any(map(math.isnan, history)):
        history = [h for h in history if not math.isnan(h)]
        if len(history) < _MIN_CHUNKS:
            return None
    base = sig.median(history)
    if base <= floor or base <= 0:
        return None
    return _Change(recent / base, history, base)


def _summed(
    chunk_means: Callable[[Series, float, float, int], list[float] | None],
    series: Sequence[Series],
    now: float,
    width: float,
    chunks: int,
) -> tuple[float, list[float]] | None:
    """The latest and the earlier window means of ``series`` (each read by
    ``chunk_means``), summed over them as :func:`summed_window_means` does."""
    return summed_window_means(chunk_means(x, now, width, chunks) for x in series)


def _with_verdict(inc: Incident, attr: Attribution, missing: tuple[str, ...]) -> Incident:
    """``inc`` with the verdict of ``attr``: cause, culprit, confidence, its
    ten strongest pieces of evidence, and the families the node lacks."""
    return replace(
        inc,
        cause=attr.cause,
        culprit=attr.culprit,
        confidence=attr.confidence,
        evidence=attr.evidence[:10],
        missing=missing,
    )


def _same_culprit(inc: Incident, attr: Attribution) -> bool:
    """Whether a new verdict names the culprit of an incident, directly or
    through its evidence: both ends of a flapping link (the NIC port and its
    switch port) report it, and which end reads stronger can change from one
    flap to the next."""
    if inc.culprit.key == attr.culprit.key:
        return True
    old = {e.culprit.key for e in inc.evidence if e.cause == inc.cause}
    new = {e.culprit.key for e in attr.evidence if e.cause == attr.cause}
    return attr.culprit.key in old or inc.culprit.key in new


def _culprit_faded(attr: Attribution, inc: Incident) -> bool:
    """Whether a new verdict of the incident's cause names another culprit
    only because the named one's own evidence faded (weaker than when it
    was named) while the other's did not grow: the named fault ended and
    the slowdown's window lags behind. A port congested alongside all along
    (the other job's, on a node whose ports no job grouping could tell
    apart), already weighed against the named one, does not take the
    incident over then; one whose congestion rose since does."""

    def best(evidence: Sequence[Evidence], culprit: Culprit) -> float:
        named = (e for e in evidence if e.cause == inc.cause and e.culprit == culprit)
        return max((e.score for e in named), default=0.0)

    return (
        attr.culprit.key != inc.culprit.key
        and best(attr.evidence, inc.culprit) < best(inc.evidence, inc.culprit)
        and best(attr.evidence, attr.culprit) <= best(inc.evidence, attr.culprit)
    )


def _spare(groups: list[list[GpuState]], ratio: float) -> dict[str, list[int]]:
    """Per GPU its job's count of GPUs that may still turn out not slow
    before the job cannot reach ``ratio`` (one counter per job, shared by
    its GPUs); empty where a GPU is in two jobs' lists."""
    out: dict[str, list[int]] = {}
    for grp in groups:
        left = [len(grp) - max(1, math.ceil(ratio * len(grp)))]
        for g in grp:
            if g.gpu in out:
                return {}
            out[g.gpu] = left
    return out


# Evidence that records a discrete event (an XID, a link-down event or link
# state), not a level a sample may read high once: the timed families, less
# the storage probe, whose failure is our own write timing out (a heavy
# checkpoint on the same path can do that) rather than a fault of its own.
_DISCRETE = TIMED_FAMILIES - {sig.ST_PROBE_FAIL}


def _discrete(attr: Attribution, strong: float) -> bool:
    """Whether ``attr`` names a halting cause on the strength of a discrete
    event (strong on its own)."""
    return (
        attr.cause.halts
        and attr.score >= strong
        and any(
            e.cause == attr.cause and e.family in _DISCRETE and e.score >= strong
            for e in attr.evidence
        )
    )


def _cause_score(evidence: Sequence[Evidence], cause: str) -> float:
    """The strongest evidence score of ``cause``."""
    return max((e.score for e in evidence if e.cause == cause), default=0.0)


def _gpu_order(g: str) -> tuple[int, str]:
    return (len(g), g)
