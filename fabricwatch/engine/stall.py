"""Per-GPU stall detection: job gate, best available work signal, hysteresis.

A GPU counts as *stalled* when it belongs to a running job (compute
processes, significant memory, or recent activity), has worked in that job
long enough to rule out job start-up (``arm_after``), and its best available
work signal (SM activity, else power against its limit or observed peak, else
utilization) is near zero. NVML utilization is last on purpose: a hung
collective keeps it near 100 %. A GPU is *slow* when its smoothed work falls
below ``slow_ratio`` of its own running baseline.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from operator import is_

from fabricwatch.engine import signals as sig
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.store import Series, SnapshotStore

_SMOOTH = 3
BASELINE_EPOCH = 240.0
"""Seconds of sample time per epoch of the slow baseline (see ``GpuState.baseline``)."""
_BOARD_IDLE_MAX = 0.5
"""Highest share of a GPU's observed peak draw that the device class's board
power makes idle. The board power is the highest limit of the class, not
this GPU's: an H100 capped at 400 W peaks at 340 W, and a quarter of its
700 W board read 52 % of that peak as idle, so samples that were part
exchange (at 60 % of the peak) and part evaluation pause read idle too and
a 1.7 s pause stood idle on three 1 s samples (cross-check seed 93011). A
GPU at half its own peak is working; a hang draws a little above idle."""


@dataclass(slots=True)
class GpuState:
    """What the detector knows about one GPU (read-only outside this module)."""

    gpu: str
    in_job: bool = False
    job: str = ""
    armed: bool = False
    active_for: float = 0.0
    idle: bool = False
    idle_since: float = 0.0
    last_active: float = -math.inf
    work: float | None = None
    signal: str = ""
    peak_power: float = 0.0
    # The work baseline is the EWMA seeded in the previous epoch of
    # BASELINE_EPOCH seconds (on the absolute clock), ``next_baseline`` the one
    # seeded in this epoch: the baseline depends on at most two epochs of
    # samples, so a detector started that much earlier or later on the same
    # samples (a replay --jobs span) holds exactly the same baseline.
    baseline: float | None = None
    next_baseline: float | None = None
    epoch: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=_SMOOTH))
    slow: bool = False
    slow_since: float = 0.0
    last_sample: float = -math.inf
    # Whether the idleness began inside the sample before the first idle one
    # (that sample read under half the GPU's normal work): the stall is older
    # than its dated onset by up to a sample.
    began_inside: bool = False
    # Seconds ``idle_since`` was dated back before the first idle sample
    # (slower than the tick; 0: not): to the sample before it, idle for
    # part of its interval only, or by the scrape window an SM sample of
    # a slow-refresh exporter averages over.
    dated_back: float = 0.0

    @property
    def stalled(self) -> bool:
        """Idle while armed in a running job."""
        return self.in_job and self.armed and self.idle

    def lost_work(self) -> float:
        """Share of this GPU's normal work not being done (0-1)."""
        if self.stalled:
            return 1.0
        if not (self.in_job and self.armed and self.slow) or not self.baseline:
            return 0.0
        smooth = sum(self.recent) / len(self.recent) if self.recent else self.baseline
        return max(0.0, min(1.0, 1.0 - smooth / self.baseline))


_GPU_FAMILIES = (
    sig.GPU_SM,
    sig.GPU_POWER,
    sig.GPU_UTIL,
    sig.GPU_PROCS,
    sig.GPU_MEM,
    sig.GPU_HEALTHY,
    sig.GPU_POWER_LIMIT,
    sig.GPU_INFO,
)
# Order of the per-GPU series handles in StallDetector._handles.
_PROCS, _MEM, _HEALTHY, _SM, _POWER, _UTIL, _LIMIT = range(7)
_Handles = tuple[Series | None, ...]


class StallDetector:
    """Classifies every GPU on each tick from the snapshot store.

    ``tick`` is the seconds between :meth:`observe` calls (the daemon's
    tick): the baselines follow work with time constants in seconds.

    The series it reads each tick are looked up once and reused for as long
    as the store holds exactly the same series objects of the GPU families
    (checked by identity each tick, which is cheap), so a tick costs a few
    attribute reads per GPU rather than a dictionary walk per family.
    """

    def __init__(self, settings: EngineSettings, tick: float = 1.0) -> None:
        self._s = settings
        self._tick = tick
        self.gpus: dict[str, GpuState] = {}
        self._seen: tuple[Series, ...] = ()
        self._spacing = 1.0
        # The node's scrape spacing (NaN where unknown): the shortest window
        # an exporter's SM-activity sample averages over.
        self._window = math.nan
        self._order: list[tuple[GpuState, _Handles]] = []
        # The node's idle draw: the lowest power of a GPU seen idle by a rule
        # that does not depend on it (SM activity, or power under
        # idle_power_ratio of its reference; not "no job": a GPU's job gate
        # may not be known yet while it works).
        self._idle_draw = math.inf
        # Power limits of the GPUs' device class (by model), where none is exported.
        self._board: dict[str, float] = {}

    def _refresh(self, store: SnapshotStore) -> None:
        """(Re)build the GPU list and series handles when the families changed."""
        current: list[Series] = []
        for fam in _GPU_FAMILIES:
            current.extend(store.family(fam))
        seen = self._seen
        if len(current) == len(seen) and all(map(is_, current, seen)):
            return
        self._seen = tuple(current)
        board = ((i.labels[0], sig.board_power(i.labels[2])) for i in store.family(sig.GPU_INFO))
        self._board = {gpu: w for gpu, w in board if w}
        names: set[str] = set()
        for fam in (sig.GPU_SM, sig.GPU_POWER, sig.GPU_UTIL, sig.GPU_PROCS):
            for series in store.family(fam):
                names.add(series.labels[0])
        order: list[tuple[GpuState, _Handles]] = []
        for gpu in sorted(names, key=lambda g: (len(g), g)):
            st = self.gpus.get(gpu)
            if st is None:
                st = self.gpus[gpu] = GpuState(gpu)
            key = (gpu,)
            handles = (
                store.get(sig.GPU_PROCS, key),
                store.get(sig.GPU_MEM, key),
                store.get(sig.GPU_HEALTHY, key),
                store.get(sig.GPU_SM, key),
                store.get(sig.GPU_POWER, key),
                store.get(sig.GPU_UTIL, key),
                store.get(sig.GPU_POWER_LIMIT, key),
            )
            order.append((st, handles))
        self._order = order

    def _jobs(self, store: SnapshotStore, now: float) -> dict[str, str]:
        jobs: dict[str, str] = {}
        age = self._s.sample_max_age * 10
        for s in store.family(sig.GPU_JOB):
            if now - s.updated <= age and s.value > 0:
                jobs[s.labels[0]] = s.labels[1]
        return jobs

    def observe(self, store: SnapshotStore, now: float, dt: float) -> None:
        """Update every GPU's state from the store's current values."""
        s = self._s
        self._refresh(store)
        age = s.sample_max_age
        jobs = self._jobs(store, now)
        for st, h in self._order:
            procs = h[_PROCS]
            mem = h[_MEM]
            if procs is not None and now - procs.updated <= age:
                in_job = procs.value > 0
            elif mem is not None and now - mem.updated <= age:
                in_job = mem.value > s.job_memory_bytes
            elif procs is not None and now - procs.updated <= s.activity_window:
                # Gate data briefly missing: keep what we knew.
                in_job = st.in_job
            else:
                in_job = now - st.last_active <= s.activity_window
            job = jobs.get(st.gpu, st.job if in_job else "")
            if not in_job or job != st.job:
                st.armed = False
                st.active_for = 0.0
                st.baseline = st.next_baseline = None
                st.slow = False
            st.in_job = in_job
            st.job = job
            self._work(h, st, now)
            if st.work is None:
                continue
            if not st.idle:
                st.last_active = st.last_sample
                if in_job:
                    st.active_for += dt
                    if st.active_for >= s.arm_after:
                        st.armed = True
            self._slow(st, now)

    def _work(self, h: _Handles, st: GpuState, now: float) -> None:
        s = self._s
        age = s.sample_max_age
        healthy = h[_HEALTHY]
        sm = h[_SM]
        power = h[_POWER]
        util = h[_UTIL]
        work: float
        threshold: float
        ts: float
        if power is not None and now - power.updated <= age:
            # The observed peak is the reference where no limit is exported:
            # tracked while SM activity is the signal too, so a GPU whose SM
            # field vanishes is not compared with its idle draw.
            st.peak_power = max(st.peak_power, power.value)
        if healthy is not None and now - healthy.updated <= age and healthy.value < 0.5:
            work, threshold, ts, signal = 0.0, 1.0, healthy.updated, "healthy"
        elif sm is not None and now - sm.updated <= age:
            work, threshold, ts, signal = sm.value, s.idle_sm_ratio, sm.updated, "sm_active"
            if work < s.idle_sm_ratio and power is not None and now - power.updated <= age:
                self._idle_draw = min(self._idle_draw, power.value)
        elif power is not None and now - power.updated <= age:
            limit = h[_LIMIT]
            ref = limit.value if limit is not None and limit.value > 0 else st.peak_power
            if ref <= 0:
                st.work = None
                return
            work = min(1.0, power.value / ref)
            if work < s.idle_power_ratio:
                self._idle_draw = min(self._idle_draw, power.value)
            threshold = self._power_threshold(ref)
            if ref == st.peak_power and st.gpu in self._board:
                # No limit: idle_power_ratio of the device class's board power
                # is idle too (what the limit gives live), on the peak's scale,
                # but never half the GPU's own peak or more (_BOARD_IDLE_MAX).
                board = s.idle_power_ratio * self._board[st.gpu] / ref
                threshold = max(threshold, min(_BOARD_IDLE_MAX, board))
            ts, signal = power.updated, "power"
        elif util is not None and now - util.updated <= age:
            work, threshold, ts, signal = util.value, s.idle_util_ratio, util.updated, "utilization"
        else:
            st.work = None  # nothing current: hold the previous classification
            return
        if ts <= st.last_sample and signal == st.signal:
            return  # no new sample since the last tick
        before = st.recent[-1] if st.recent and signal == st.signal else None
        before_ts = st.last_sample
        st.signal = signal
        st.work = work
        st.last_sample = ts
        idle = work < threshold + s.hysteresis if st.idle else work < threshold
        if st.idle and not idle:
            # Smoothing mixes no idle samples into the work level: a GPU
            # coming back from a stall is not slow.
            st.recent.clear()
        if idle and not st.idle:
            st.idle_since = ts
            # A sample is an average over its interval: one at under half the
            # GPU's normal work, just before the first idle one, had the
            # stall start inside it. Slower than the tick, the onset is dated
            # there; at the tick's pace it stays at the first idle sample (a
            # poll sooner is not worth a partial one), and only the evidence
            # reaches back (see ``began_inside``).
            sp = self._spacing
            base = st.baseline
            st.began_inside = (
                before is not None
                and base is not None
                and base > 0
                and before < 0.5 * base
                and ts - before_ts <= 1.5 * sp
            )
            st.dated_back = 0.0
            if st.began_inside and sp > 2 * self._tick:
                st.dated_back = ts - before_ts
                st.idle_since = before_ts
                st.began_inside = False
            elif signal == "sm_active" and min(sp, ts - before_ts) > 1.5 * self._window:
                # An exporter that refreshes SM activity slower than it is
                # scraped (dcgm-exporter's own interval): an idle sample
                # averages at least one scrape's window, and its next one
                # may come after the stall has ended, so that window is
                # part of the stall as seen. At the scrape's pace the next
                # sample is one window away and one idle sample is not
                # relied on.
                st.dated_back = self._window
                st.idle_since = ts - self._window
        st.idle = idle
        st.recent.append(work)

    def _power_threshold(self, ref: float) -> float:
        """The idle threshold of power as a share of ``ref`` (the limit, or the
        observed peak): ``idle_power_ratio`` until the node's idle draw is
        known, then "power above idle" (``idle_power_above_idle`` of the
        range between the idle draw and ``ref``) where that is higher. The observed peak of a job
        whose rhythm is faster than the power average sits well below the
        limit, and against it the draw of hung kernels, a quarter above
        idle, reads as a quarter of the peak."""
        s = self._s
        floor = self._idle_draw
        if not 0.0 <= floor < ref:
            return s.idle_power_ratio
        # Never below the plain rule: the lowest draw seen may be a GPU out of
        # a job in a deeper power state than one holding a hung context.
        return max(s.idle_power_ratio, (floor + s.idle_power_above_idle * (ref - floor)) / ref)

    def _slow(self, st: GpuState, now: float) -> None:
        s = self._s
        epoch = math.floor(now / BASELINE_EPOCH)
        if epoch != st.epoch:
            # After a gap of more than an epoch, no baseline of the last two.
            st.baseline = st.next_baseline if epoch == st.epoch + 1 else None
            st.next_baseline = None
            st.epoch = epoch
        if not st.armed or st.idle or st.work is None:
            st.slow = False
            return
        smooth = sum(st.recent) / len(st.recent)
        if st.baseline is None:
            st.baseline = smooth
        if st.next_baseline is None:
            st.next_baseline = smooth
        slow = smooth < s.slow_ratio * st.baseline
        if slow and not st.slow:
            st.slow_since = st.last_sample
        st.slow = slow
        st.baseline = self._follow(st.baseline, st.work, slow=slow)
        # The next baseline follows by its own judgement of slowness, so it
        # owes nothing to the epochs before its own.
        nxt = st.next_baseline
        st.next_baseline = self._follow(nxt, st.work, slow=smooth < s.slow_ratio * nxt)

    def _follow(self, baseline: float, work: float, *, slow: bool) -> float:
        """One tick of a baseline: it follows normal work quickly and slow
        phases only slowly, so a long evaluation phase eventually becomes the
        new normal (at the latest two epochs after it began)."""
        alpha = self._tick / (600.0 if slow else 60.0)
        return baseline + alpha * (work - baseline)

    def retune(self, settings: EngineSettings, spacing: float, window: float = math.nan) -> None:
        """Use ``settings`` (the engine's, scaled to the observed ``spacing``)
        from now on; ``window``: the node's scrape spacing, where known."""
        self._s = settings
        self._spacing = spacing
        self._window = window

    def spacing(self) -> float:
        """Observed sample spacing of the GPUs' work signals (median over GPUs;
        NaN before two samples)."""
        found: list[float] = []
        for _, h in self._order:
            for idx in (_SM, _POWER, _UTIL):
                series = h[idx]
                if series is not None:
                    sp = sig.spacing(series)
                    if not math.isnan(sp):
                        found.append(sp)
                        break
        return sig.median(found) if found else math.nan

    def stalled(self) -> list[GpuState]:
        """GPUs stalled now."""
        return [g for g in self.gpus.values() if g.stalled]

    def job_gpus(self) -> list[GpuState]:
        """GPUs armed in a running job."""
        return [g for g in self.gpus.values() if g.in_job and g.armed]
