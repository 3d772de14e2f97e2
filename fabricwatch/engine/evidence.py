"""Evidence scorers: one per signal family, each comparing the stall onset
window with that series' own robust baseline and with absolute thresholds.

A scorer returns zero or more :class:`Evidence` values with a score in 0-1 and
a sentence for people. Absent families simply produce nothing; which groups
were absent is reported separately (:func:`missing_groups`) so attribution can
lower its confidence instead of guessing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from fabricwatch.engine import signals as sig
from fabricwatch.engine.causes import Cause
from fabricwatch.engine.port_jobs import PortJobs, PortKey, port_key
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.signals import Window, mad, median, sustained, window
from fabricwatch.store import Series, SnapshotStore

# XIDs that mean the GPU itself failed (NVIDIA XID catalogue): double-bit ECC,
# fallen off the bus, row-remap failure, contained/uncontained ECC, GSP errors.
HARDWARE_XIDS = frozenset({48, 61, 62, 63, 64, 69, 79, 92, 94, 95, 119, 120, 140})
NVLINK_XIDS = frozenset({74})


@dataclass(frozen=True, slots=True)
class Culprit:
    """What the evidence points at.

    Attributes:
        key: stable identifier, e.g. ``switch:leaf1:swp12:3``, ``nic:mlx5_0:1``,
            ``gpu:3``, ``gpu:3:link:5``, ``storage:ckpt``; empty for none.
        kind: ``switch_port``, ``nic_port``, ``gpu``, ``nvlink``, ``storage_path`` or ``none``.
        labels: the series labels that identify it.
    """

    key: str
    kind: str
    labels: tuple[tuple[str, str], ...] = ()


NO_CULPRIT = Culprit("", "none")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One scored observation."""

    cause: Cause
    family: str
    culprit: Culprit
    score: float
    value: float
    baseline: float
    text: str
    # When the series first reached a quarter of the way from its baseline
    # up to ``value`` (halfway down to it)
    # (None: not known; treated as present at the onset). None, not NaN: NaN
    # is unequal to itself, so equal incidents would compare unequal (replay
    # --jobs checks its cuts by equality).
    since: float | None = None


@dataclass(frozen=True, slots=True)
class ScoreContext:
    """Where and when to look: the store, the stall onset and now (monotonic).

    Attributes:
        spacing: the observed sample spacing (seconds) the windows scale with.
        tick: seconds between engine ticks (the daemon's tick).
        scope: the stalled GPUs; GPU-side evidence (XIDs, NVLink) counts only
            on them (empty: every GPU, as for a single job).
    """

    store: SnapshotStore
    settings: EngineSettings
    onset: float
    now: float
    spacing: float = 1.0
    scope: frozenset[str] = frozenset()
    min_samples: int = 2
    reach: float = 0.0  # > 0: the onset window reaches this far past the onset
    slowdown: bool = False
    peers: Mapping[str, frozenset[str]] | None = None
    tick: float = 1.0
    # Which job's port each port is (a node shared by two jobs); None: one job.
    ports: PortJobs | None = None
    # Where the baseline ends when not at the onset: an episode that continues
    # a resolving incident (the fault came back, or a slowdown re-detected in
    # its middle) is compared with the time before the incident, not with
    # the fault's own earlier samples.
    base_onset: float | None = None

    def same_job(self, a: str, b: str) -> bool:
        """Whether GPUs ``a`` and ``b`` are job-mates (unknown: yes)."""
        if not self.peers or a not in self.peers:
            return True
        return b in self.peers[a]

    def level(self, values: Sequence[float], *, lasting: bool = True) -> float:
        """The level a window held on ``min_samples`` samples (2: one poll is
        not evidence; 1 only where a second sample is checked separately).

        ``lasting``: also still there at the window's newest sample, while
        the GPUs wait (a fabric burst that coincided with the first idle
        polls and is gone is no cause). Checkpoint writes need not last: a
        node writes its shard and then waits for the other ranks' writes.
        """
        if self.min_samples < 2:
            return max(values)
        if self.slowdown:
            # A slowdown lasts its whole window: evidence must hold on more
            # than half of its samples (a burst inside it explains nothing).
            # The lower median, a level most samples held: the median of an
            # even count averages its middle two, and a 5 s burst straddling
            # two of four 10 s samples averaged with a quiet one read 7,651x
            # its baseline (cross-check seed 61038: an ECN "slowdown" of a
            # job whose traffic beat one step of its sampling low).
            return sorted(values)[(len(values) - 1) // 2]
        level = sustained(values)
        return min(level, values[-1]) if lasting else level

    def on_end(self) -> float:
        """End of the onset window: what was present at the onset, not what came
        later (a second fault while the GPUs already wait is no cause)."""
        reach = max(3.0 * self.tick, 2.0 * self.spacing, 5.0, self.reach)
        return min(self.now, self.onset + reach)

    def windows(self, s: Series) -> tuple[Window, Window]:
        """(onset window, baseline window) of one series."""
        st = self.settings
        lead = st.onset_lead
        if self.slowdown and self.reach > 0:
            # A slowdown is going on: its evidence is what the last
            # throughput window held (and must hold on half of it). The lead
            # before a stall's onset (the compute phase in flight) is no part
            # of a slowdown: a whole rhythm of it would fill half the window
            # with the time before the fault, and a second cause that begins
            # inside the slowdown (a link lost in the middle of an ECN
            # slowdown) would be all that is left to name. A slowdown found
            # from window means is dated to within a few samples, though:
            # the window reaches back up to three samples, so a burst of one
            # or two polls at the dated onset does not hold on "half" of a
            # window that starts with it.
            sample_s = max(self.tick, self.spacing)
            on = window(
                s, max(self.onset - min(lead, 3.0 * sample_s), self.now - self.reach), self.now
            )
            return on, self._base(s)
        end = self.on_end()
        sample_s = max(self.tick, self.spacing)
        on = window(s, self.onset - lead, min(self.now, self.onset + 10.0 * sample_s))
        # Up to the window's end, and on to the second sample at or after the
        # onset where a collector gap left fewer: whether evidence lasted is
        # decided on samples, not on a clock that ran while nothing came.
        # Half a sample of slack: the end is a whole number of samples after
        # the onset, and scrape jitter must not move a sample in and out of
        # the window from one re-score to the next (the observed spacing
        # itself jitters). A sample covers the interval since the one before
        # it (a rate, an average): one after a missed scrape, or of a series
        # refreshed every other scrape, covers two, mostly before the onset
        # (cross-check seeds 18036, a switch storm at 96 % read 16 % on the
        # sample after a missed one, and 17032, disk latency every 20 s).
        # It counts as after the onset where its interval's middle is no
        # more than a sample before it, as a regular sample's is.
        after = 0
        keep = 0
        slack = 0.5 * sample_s if sample_s > self.tick else 0.0
        prev = -math.inf
        for t in on.times:
            if t > end + slack and after >= 2 and not self._after_missed(on, t, prev, end + slack):
                break
            start = t - sample_s if prev == -math.inf else prev
            if t >= self.onset - 0.5 * sample_s and 0.5 * (start + t) >= self.onset - sample_s:
                after += 1
            prev = t
            keep += 1
        if keep < len(on.times):
            on = Window(on.values[:keep], on.times[:keep])
        return on, self._base(s)

    def _after_missed(self, on: Window, t: float, prev: float, end: float) -> bool:
        """Whether the sample at ``t`` follows a scrape missed inside the
        onset window (ending at ``end``): it holds the missed one's interval,
        so it is in the window too (a latency scrape missed at the window's
        end left one slow sample of two after the onset, the other an
        interval the dated onset only just reached: cross-check seed 67033,
        10 s, NFS 16x). Missed is judged against the series' own spacing: one
        refreshed every other scrape misses none (84002)."""
        if prev > end:
            return False
        gaps = [b - a for a, b in pairwise(on.times)]
        own = median(gaps) if len(gaps) > 1 else 0.0
        return t - prev > 1.5 * max(self.tick, self.spacing, own)

    def _base(self, s: Series) -> Window:
        """The baseline window of one series: before ``base_onset`` where set
        and still in the store's history, else before the onset."""
        st = self.settings
        for onset in (self.base_onset, self.onset):
            if onset is not None:
                base = window(s, onset - st.baseline_window, onset - st.onset_lead - 0.001)
                if base or onset == self.onset:
                    return base
        return Window((), ())

    def while_waiting(self, on: Window) -> Window:
        """The samples of an onset window measured while the GPUs waited: those
        ending later than half a sample before the onset (a rate or average
        stamped then covers part of the idle time). A write the GPUs waited
        for is written while they are idle; a background burst that ended
        as an evaluation dip began is a write nobody waited for."""
        sample_s = max(self.tick, self.spacing)
        start = self.onset - 0.5 * sample_s
        keep = [(t, v) for t, v in zip(on.times, on.values, strict=True) if t > start]
        return Window(tuple(v for _, v in keep), tuple(t for t, _ in keep))

    def in_scope(self, gpu: str) -> bool:
        """Whether evidence on ``gpu`` may explain this stall."""
        return not self.scope or gpu in self.scope

    def port(self, key: PortKey) -> str:
        """Whose port ``key`` is for this stall: ``own`` (or the node's only
        job's), ``other`` (another job's: never evidence) or ``shared``."""
        return "own" if self.ports is None else self.ports.verdict(key, self.scope)

    def peaks(
        self, family: str, *, lasting: bool = True
    ) -> Iterator[tuple[Series, float, float, float]]:
        """(series, sustained onset level, baseline, baseline MAD) of each series with data.

        The onset level is what the window held on two samples or more
        (:func:`~fabricwatch.engine.signals.sustained`): one poll is not evidence.
        """
        for s in self.store.family(family):
            on, base = self.windows(s)
            if on:
                b, m = _baseline(base)
                yield s, self.level(on.values, lasting=lasting), b, m


def _baseline(base: Window, default: float = 0.0) -> tuple[float, float]:
    """(baseline, spread) of a baseline window.

    The baseline is its lower tercile, not its median: a fault that ramps up
    over the last 20-60 s before the stall fills part of the window, and a
    median would follow it (the ramp would become normal).
    """
    if not base:
        return default, 0.0
    vals = sorted(base.values)
    b = vals[(len(vals) - 1) // 3]
    return b, mad(vals, b)


def _labels(s: Series) -> tuple[tuple[str, str], ...]:
    return tuple(zip(s.spec.labels, s.labels, strict=True))


def _switch_culprit(s: Series, with_prio: bool) -> Culprit:
    lm = s.label_map()
    key = f"switch:{lm['switch']}:{lm['port']}"
    if with_prio:
        key += f":{lm['priority']}"
    return Culprit(key, "switch_port", _labels(s))


def _nic_culprit(s: Series, with_prio: bool) -> Culprit:
    lm = s.label_map()
    key = f"nic:{lm['device']}:{lm['port']}"
    if with_prio:
        key += f":{lm['priority']}"
    return Culprit(key, "nic_port", _labels(s))


def _where(c: Culprit) -> str:
    lm = dict(c.labels)
    if c.kind == "switch_port":
        text = f"switch {lm.get('switch')} port {lm.get('port')}"
    elif c.kind == "nic_port":
        text = f"NIC {lm.get('device')} port {lm.get('port')}"
    elif c.kind == "storage_path":
        text = f"storage path {lm.get('path')}"
    elif c.kind == "nvlink":
        text = f"GPU {lm.get('gpu')} NVLink {lm.get('link')}"
    else:
        text = f"GPU {lm.get('gpu')}"
    if "priority" in lm:
        text += f" priority {lm['priority']}"
    if "direction" in lm:
        text += f" {lm['direction']}"
    return text


def _times(value: float, base: float) -> str:
    if base <= 0:
        return "from ~0"
    return f"{value / base:.0f}x its baseline"


def _new_events(s: Series, ctx: ScoreContext, on: Window) -> float:
    """Events a counter recorded in the onset window (rates x interval, plus a
    series that first appeared there: collectors often create an XID or
    failure series only when its first event happens)."""
    if on.values:
        total = 0.0
        prev_t = on.times[0] - 1.0
        for t, v in zip(on.times, on.values, strict=True):
            total += v * max(t - prev_t, 0.0)
            prev_t = t
        if total > 0:
            return total
    start = ctx.onset - ctx.settings.onset_lead
    if s.value > 0 and s.updated >= start:
        oldest = s.history[0].ts if s.history else s.updated
        # A series born after ``now`` (scoring an earlier moment) had no events yet.
        if start - 2 * ctx.settings.sample_max_age <= oldest <= ctx.now:
            # A slowdown's evidence is what its window held: events its
            # rates recorded before the window are older (a series born
            # with a rate, as replay's XID series start from a zero, shows
            # its first event where it happened). The XID of a stall 90 s
            # earlier was "new" in a slowdown after it (cross-check seed
            # 105040). A stall's own lead-up is another matter: an XID shortly
            # before the onset window is the fault that came first.
            if ctx.slowdown and any(v > 0 for v in window(s, oldest, start - 1e-3).values):
                return 0.0
            return s.value
    return 0.0


def score_pfc(ctx: ScoreContext) -> list[Evidence]:
    """PFC pause-time fraction (or frame rate against the continuous rate)."""
    st = ctx.settings
    out: list[Evidence] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for fam, frames, side in (
        (sig.SW_PFC_RATIO, sig.SW_PFC_FRAMES, "switch"),
        (sig.NIC_PFC_RATIO, sig.NIC_PFC_FRAMES, "nic"),
    ):
        candidates: list[tuple[Series, float, bool]] = [
            (s, 1.0, True) for s in ctx.store.family(fam)
        ]
        for ratio_series, _, _ in candidates:
            seen.add((side, ratio_series.labels))
        candidates += [
            (s, 1.0 / _continuous_frames(ctx, s, side), False)
            for s in ctx.store.family(frames)
            if (side, s.labels) not in seen
        ]
        for s, scale, exact in candidates:
            on, base = ctx.windows(s)
            if not on:
                continue
            peak = min(1.0, ctx.level(on.values) * scale)
            b, _ = _baseline(base)
            b = min(1.0, b * scale)
            culprit = (_switch_culprit if side == "switch" else _nic_culprit)(s, True)
            where = _where(culprit)
            if not exact and peak >= st.pfc_storm_ratio and peak < 10.0 * b:
                # Frames against a guessed speed: only a jump from its own
                # baseline is a storm (a busy fast port reads high all day).
                continue
            if peak >= st.pfc_storm_ratio:
                score = 0.9 + 0.09 * min(
                    1.0, (peak - st.pfc_storm_ratio) / (1.0 - st.pfc_storm_ratio + 1e-9)
                )
                if b >= 0.5 * st.pfc_storm_ratio:
                    score -= 0.3  # chronically paused: not what changed at the onset
                text = (
                    f"PFC pause storm on {where}: paused {peak:.0%} of the time ({_times(peak, b)})"
                )
                out.append(Evidence(Cause.PFC_STORM, s.spec.name, culprit, score, peak, b, text))
            elif peak >= 0.5 * st.pfc_storm_ratio and peak >= 3 * b:
                text = f"heavy PFC pausing on {where}: {peak:.0%} of the time ({_times(peak, b)})"
                out.append(Evidence(Cause.PFC_STORM, s.spec.name, culprit, 0.6, peak, b, text))
            elif (
                peak >= 0.1
                and peak >= 3 * b + 0.05
                and (top := min(1.0, max(on.values) * scale)) >= st.pfc_storm_ratio
                and top >= 10.0 * b
            ):
                # Shown on two samples and a storm on one: at 30-60 s a storm
                # that began late in the onset's sample reads a few per cent
                # there, and the window ends a sample later (cross-check seed
                # 53064: 12 %, then 92 %). Strong on one, as storage latency
                # and :meth:`Engine._strong` take it.
                text = (
                    f"PFC pause storm on {where}: paused {top:.0%} of the time on one sample, "
                    f"{peak:.0%} on two ({_times(top, b)})"
                )
                out.append(Evidence(Cause.PFC_STORM, s.spec.name, culprit, 0.6, peak, b, text))
            elif peak >= 0.1 and peak >= 3 * b + 0.05:
                text = f"PFC pausing rose on {where}: {peak:.0%} of the time ({_times(peak, b)})"
                out.append(
                    Evidence(Cause.ECN_CONGESTION, s.spec.name, culprit, 0.45, peak, b, text)
                )
    return out


def _continuous_frames(ctx: ScoreContext, s: Series, side: str) -> float:
    """Pause frames/s that hold a priority paused on this port: one pause
    quantum is 512 bit times and a frame pauses for at most 65535 quanta, so
    speed / (65535 x 512) (745/s at 25G, 5960/s at 200G). The port's speed
    comes from its speed series when there is one (switch ports: ifHighSpeed or
    ifSpeed; host ports: the RDMA link rate);
    otherwise ``pfc_continuous_frames`` (the slowest common RoCE speed, 25G)."""
    family = sig.SW_SPEED if side == "switch" else sig.NIC_RATE
    speed = ctx.store.get(family, s.labels[:2])
    if speed is not None and speed.value > 0:
        return speed.value * 8.0 / (65535.0 * 512.0)
    return ctx.settings.pfc_continuous_frames


_ECN_FAMILIES = (
    (sig.NIC_ECN, "ECN-marked RoCE packets"),
    (sig.NIC_CNP_SENT, "CNPs sent"),
    (sig.NIC_CNP_HANDLED, "CNPs handled (rate cuts)"),
    (sig.SW_ECN, "ECN-marked packets"),
)


def score_congestion(ctx: ScoreContext) -> list[Evidence]:
    """ECN marks, CNPs and transmit wait against their baselines.

    During congestion every port of the job handles CNPs (the reaction-point
    side) and the scores of all of them saturate, so they would tie. The
    culprit is the port whose *received* marks (notification-point side:
    ECN-marked packets, CNPs sent) stand out both from its own baseline and
    from the other ports of the family; where two ports stand out alike, the
    evidence names both and scores lower (lower confidence), instead of
    letting the port name decide.
    """
    st = ctx.settings
    out: list[Evidence] = []
    for fam, what in _ECN_FAMILIES:
        side = "switch" if fam == sig.SW_ECN else "nic"
        # The stalled job's ports (and shared ones): the other job's
        # congestion is neither a culprit nor the peer a culprit stands out from.
        rows = [r for r in ctx.peaks(fam) if ctx.port(port_key(side, r[0])) != "other"]
        hits: list[tuple[float, Evidence]] = []
        for s, peak, b, m in rows:
            if peak < max(st.ecn_min_rate, 3.0 * b, b + 4.0 * m):
                continue
            ratio = peak / max(b, 1.0)
            others = [p for o, p, _, _ in rows if o is not s]
            standout = peak / max(median(others) if others else 0.0, b, 1.0)
            score = 0.7 + 0.1 * min(1.0, math.log10(max(ratio, 1.0)) / 3.0)
            if fam != sig.NIC_CNP_HANDLED:
                score += 0.06 * min(1.0, math.log10(max(standout, 1.0)))
            culprit = _switch_culprit(s, False) if fam == sig.SW_ECN else _nic_culprit(s, False)
            text = f"{what} on {_where(culprit)}: {peak:,.0f}/s ({_times(peak, b)})"
            hits.append(
                (standout, Evidence(Cause.ECN_CONGESTION, fam, culprit, score, peak, b, text))
            )
        hits.sort(key=lambda h: -h[0])
        if len(hits) >= 2 and fam != sig.NIC_CNP_HANDLED and hits[0][0] < 1.5 * hits[1][0]:
            top, second = hits[0][1], hits[1][1]
            text = (
                f"{what} on {_where(top.culprit)} and {_where(second.culprit)} alike "
                f"({top.value:,.0f}/s and {second.value:,.0f}/s): no single culprit port"
            )
            hits[0] = (hits[0][0], replace(top, score=top.score - 0.1, text=text))
        out.extend(e for _, e in hits)
    for s, peak, b, _ in ctx.peaks(sig.NIC_XMIT_WAIT):
        if peak >= 0.2 and peak >= 3.0 * b + 0.05:
            culprit = _nic_culprit(s, False)
            text = (
                f"{_where(culprit)} waited to transmit {peak:.0%} of the time ({_times(peak, b)})"
            )
            out.append(Evidence(Cause.ECN_CONGESTION, s.spec.name, culprit, 0.7, peak, b, text))
    return out


def score_links(ctx: ScoreContext) -> list[Evidence]:
    """Ports that went down (or counted link-down events) around the onset."""
    out: list[Evidence] = []
    for fam in (sig.NIC_LINK_UP, sig.SW_PORT_UP):
        for s in ctx.store.family(fam):
            on, base = ctx.windows(s)
            if not on or not base:
                continue
            low = min(on.values)
            b = median(base.values)
            if low < 0.5 <= b:
                culprit = (
                    _nic_culprit(s, False) if fam == sig.NIC_LINK_UP else _switch_culprit(s, False)
                )
                text = f"link down on {_where(culprit)}"
                out.append(Evidence(Cause.LINK_DOWN, fam, culprit, 0.95, low, b, text))
    for s in ctx.store.family(sig.NIC_LINK_DOWNED):
        on, _ = ctx.windows(s)
        events = _new_events(s, ctx, on)
        if events > 0:
            culprit = _nic_culprit(s, False)
            text = f"{max(1, round(events))} link-down event(s) on {_where(culprit)}"
            out.append(Evidence(Cause.LINK_DOWN, s.spec.name, culprit, 0.9, events, 0.0, text))
    return out


def _nvlink_culprit(s: Series) -> Culprit:
    lm = s.label_map()
    if lm["link"] == "total":  # dcgm-exporter's per-GPU fields
        return Culprit(f"gpu:{lm['gpu']}", "gpu", (("gpu", lm["gpu"]),))
    return Culprit(
        f"gpu:{lm['gpu']}:link:{lm['link']}",
        "nvlink",
        (("gpu", lm["gpu"]), ("link", lm["link"])),
    )


def score_nvlink(ctx: ScoreContext) -> list[Evidence]:
    """NVLink links going down and error bursts."""
    out: list[Evidence] = []
    for s in ctx.store.family(sig.NVLINK_UP):
        if not ctx.in_scope(s.labels[0]):
            continue
        on, base = ctx.windows(s)
        if not on or not base:
            continue
        low = min(on.values)
        b = median(base.values)
        if low < 0.5 <= b:
            culprit = _nvlink_culprit(s)
            out.append(
                Evidence(
                    Cause.NVLINK_DEGRADED,
                    s.spec.name,
                    culprit,
                    0.95,
                    low,
                    b,
                    f"{_where(culprit)} went down",
                )
            )
    for s, peak, b, m in ctx.peaks(sig.NVLINK_ERRORS):
        if not ctx.in_scope(s.labels[0]):
            continue  # the other job's GPU
        if peak >= 10.0 and peak >= 10.0 * (b + 1.0) and peak >= b + 4 * m:
            culprit = _nvlink_culprit(s)
            kind = s.label_map().get("type", "")
            text = (
                f"NVLink {kind} error burst on {_where(culprit)}: {peak:,.0f}/s ({_times(peak, b)})"
            )
            out.append(Evidence(Cause.NVLINK_DEGRADED, s.spec.name, culprit, 0.85, peak, b, text))
    return out


def _level(values: Sequence[float], trim: float = 0.1) -> float:
    """Trimmed mean: robust to a stray sample, but unlike a median it does not
    jump between the levels of a bimodal window (work / straggler waits /
    an evaluation phase), which would make one GPU's baseline differ from
    its peers' by chance."""
    v = sorted(values)
    k = int(len(v) * trim)
    kept = v[k : len(v) - k] or v
    return sum(kept) / len(kept)


def _fresh_rates(
    s: Series, lo: float, hi: float, tick: float
) -> list[tuple[tuple[int, int], float]]:
    """((start poll, end poll), rate) of the rates ending in [lo, hi] and
    measured from no earlier than one tick before ``lo``: a rate after
    missing samples is the average over the gap, and from further back it
    mixes in a time before the window (a GPU idle then and busy now reads
    half-busy, not collapsed)."""
    w = window(s, lo - 3 * tick, hi)
    return [
        ((round(t0 / tick), round(t1 / tick)), v)
        for (t0, t1), v in zip(pairwise(w.times), w.values[1:], strict=True)
        if t1 >= lo and t0 >= lo - tick
    ]


def _work_kept(ctx: ScoreContext, gpu: str, lo: float, hi: float) -> bool:
    """Whether ``gpu`` kept computing in [lo, hi] (SM activity, else power).

    Unknown (no work series, or no baseline) counts as kept: the peer test
    alone then decides.
    """
    st = ctx.settings
    for fam in (sig.GPU_SM, sig.GPU_POWER):
        s = ctx.store.get(fam, (gpu,))
        if s is None:
            continue
        pre = window(s, lo, hi)
        base = window(s, ctx.onset - st.baseline_window, ctx.onset - st.onset_lead - 0.001)
        if not pre or not base:
            continue
        return _level(pre.values) >= 0.5 * _level(base.values)
    return True


def _collapsed(
    ctx: ScoreContext,
    fam: str,
    *,
    lo: float,
    hi: float,
    sample_s: float,
    found: dict[tuple[str, str], list[tuple[Series, float, float, float, int]]],
) -> None:
    """Add to ``found`` the links of ``fam`` collapsed on every poll in
    [lo, hi] while their job-mates' links were not: (series, ratio to its
    baseline, level, baseline, polls that showed it) by (family, GPU).

    A link with fewer than two polls there (a missing sample) is judged on
    its last two, the one before ``lo`` included: one poll is not evidence
    (a swapped sample reads low once), and the poll before shows whether
    the collapse was already there.
    """
    st = ctx.settings
    limit = st.nvlink_collapse_ratio
    # Per measured interval (rates as shares of their own baseline): a
    # link is compared with the other GPUs' links over *the same
    # interval*, so a drop every GPU shares (a slowdown starting, a
    # straggler wait) cancels out whichever samples happen to be missing.
    polls: dict[tuple[int, int], list[tuple[str, float]]] = {}
    rows: list[tuple[Series, float, list[tuple[tuple[int, int], float]]]] = []
    for s in ctx.store.family(fam):
        if not ctx.in_scope(s.labels[0]):
            continue  # peers are the stalled job's GPUs, not another job's
        base = window(s, ctx.onset - st.baseline_window, ctx.onset - st.onset_lead - 0.001)
        if len(base.values) < 3:
            continue
        b = _level(base.values)
        if b < st.nvlink_min_bytes:
            continue  # a link that carries nothing cannot collapse
        ext = [(span, v / b) for span, v in _fresh_rates(s, lo - sample_s, hi, sample_s)]
        for poll, ratio in ext:
            polls.setdefault(poll, []).append((s.labels[0], ratio))
        pre = [(span, v / b) for span, v in _fresh_rates(s, lo, hi, sample_s)]
        if len(pre) < 2:
            pre = ext[-2:]
        if pre:
            rows.append((s, b, pre))
    for s, b, pre in rows:
        if any(ratio > limit for _, ratio in pre):
            continue  # collapsed on every poll before the onset, or not at all
        gpu = s.labels[0]
        matched = 0
        for poll, ratio in pre:
            peers = [r for g, r in polls[poll] if g != gpu and ctx.same_job(gpu, g)]
            if not peers:
                continue  # no peer measured this interval (or a lone GPU)
            peer = median(peers)
            # A third of the peers or more collapsed with it: a phase of
            # the job (an evaluation dip, half the node in another
            # rhythm), not one GPU's links.
            together = 3 * sum(r <= limit for r in peers) >= len(peers)
            if peer < 1.0 - limit or ratio > 0.6 * peer or together:
                matched = 0  # the peers fell too (node-wide) or no standout
                break
            matched += 1
        if matched == 1:
            # Shown on one poll only, a collapsed link is still down on the
            # first sample after the onset (every link is, in a stall). One
            # that read its usual traffic there was two samples swapped, the
            # stall's partial one moved before the onset (cross-check seed
            # 16013, a hang at 20 s named nvlink_degraded).
            after = _fresh_rates(s, hi, ctx.now, sample_s)
            if after and after[0][1] / b > limit:
                continue
        if matched:
            ratio = _level([r for _, r in pre])
            found.setdefault((fam, gpu), []).append((s, ratio, ratio * b, b, matched))


# Score of a collapse seen on one poll: (stall, slowdown). A stall's counts
# after min_duration; a slowdown's is below min_evidence, listed only.
_ONE_POLL_COLLAPSE = {False: 0.6, True: 0.4}


def score_nvlink_throughput(ctx: ScoreContext) -> list[Evidence]:
    """One GPU's NVLink traffic collapsing before the stall while its peers' does not.

    Once a job stalls every GPU's NVLink traffic is ~0, whatever the cause
    (a checkpoint, a pause storm): that says nothing. What points at NVLink
    is a link (or a GPU's total, as dcgm-exporter reports it) that fell to
    ``nvlink_collapse_ratio`` of its own baseline or less on the polls
    *before* the stall onset, while the other GPUs' links still carried
    their usual traffic and its own GPU still computed (a GPU that stopped
    computing stops talking: that is a GPU fault, not a link).
    """
    st = ctx.settings
    # The last polls before the onset: earlier ones may predate the fault.
    sample_s = max(ctx.tick, ctx.spacing)
    lo = ctx.onset - min(st.onset_lead, 2.5 * sample_s)
    hi = min(ctx.now, ctx.onset - 1e-3)
    if hi < lo:
        return []
    found: dict[tuple[str, str], list[tuple[Series, float, float, float, int]]] = {}
    for fam in (sig.NVLINK_TX, sig.NVLINK_RX):
        _collapsed(ctx, fam, lo=lo, hi=hi, sample_s=sample_s, found=found)
    out: list[Evidence] = []
    kept: dict[str, bool] = {}
    for (fam, gpu), hits in sorted(found.items()):
        if gpu not in kept:
            kept[gpu] = _work_kept(ctx, gpu, lo, hi)
        if not kept[gpu]:
            continue
        direction = "transmit" if fam == sig.NVLINK_TX else "receive"
        links = sorted({s.labels[1] for s, *_ in hits})
        ratio = max(r for _, r, _, _, _ in hits)
        level = sum(lv for _, _, lv, _, _ in hits)
        b = sum(bb for _, _, _, bb, _ in hits)
        polls = max(n for *_, n in hits)
        if len(links) == 1 and links[0] != "total":
            culprit = _nvlink_culprit(hits[0][0])
        else:
            culprit = Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),))
        # ~0 scores higher than a halving; either is strong next to busy peers.
        depth = min(1.0, max(0.0, (st.nvlink_collapse_ratio - ratio) / st.nvlink_collapse_ratio))
        # One poll is not evidence: shown on one poll only, the collapse
        # still counts once the stall lasted ``min_duration``, but is not
        # strong enough to shorten it. A slowdown has no such wait: it is
        # opened only by its evidence, and one GPU's poll read low by a
        # swapped or missing scrape next to a dated onset would open one.
        score = 0.8 + 0.06 * depth if polls >= 2 else _ONE_POLL_COLLAPSE[ctx.slowdown]
        what = "NVLink" if links == ["total"] else f"NVLink {', '.join(links)}"
        text = (
            f"GPU {gpu} {what} {direction} collapsed to {ratio:.0%} of its baseline "
            f"({level / 1e9:,.1f} of {b / 1e9:,.1f} GB/s) before the stall while other GPUs' "
            f"links kept their traffic"
        )
        if polls < 2:
            text += " (on one poll)"
        out.append(Evidence(Cause.NVLINK_DEGRADED, fam, culprit, score, level, b, text))
    return out


def score_gpu(ctx: ScoreContext, job_gpus: Mapping[str, float]) -> list[Evidence]:
    """XID events, GPUs marked unhealthy and job GPUs whose telemetry vanished."""
    return [
        *_score_xids(ctx),
        *_score_lost_after_xid(ctx),
        *_score_unhealthy(ctx),
        *_score_vanished(ctx, job_gpus),
    ]


def _score_lost_after_xid(ctx: ScoreContext) -> list[Evidence]:
    """A hardware XID before the onset window on a GPU of the stalled job that
    has not been seen working since.

    A GPU lost to a hardware fault stops its own work at once; its job-mates
    run on until their next collective waits for it, which can be longer
    than the onset window reaches back (long compute phases, buffers
    draining, a sample or more of delay). The XID still explains the stall
    when the GPU never worked again after it: its SM activity stopped
    reporting or stayed idle from the XID to the onset. A GPU that went on
    working after its XID was not lost by it.
    """
    st = ctx.settings
    sample_s = max(ctx.tick, ctx.spacing)
    out: list[Evidence] = []
    for s in ctx.store.family(sig.GPU_XID):
        gpu, xid_text = s.labels
        if not ctx.in_scope(gpu) or not xid_text.isdigit() or int(xid_text) not in HARDWARE_XIDS:
            continue
        on, _ = ctx.windows(s)
        if _new_events(s, ctx, on) > 0:
            continue  # in the onset window: _score_xids has it
        before = window(s, ctx.onset - st.baseline_window, ctx.onset - st.onset_lead)
        at = next((t for t, v in zip(before.times, before.values, strict=True) if v > 0), None)
        if at is None or not _not_working_since(ctx, gpu, at, sample_s):
            continue
        out.append(
            Evidence(
                Cause.GPU_FAULT,
                s.spec.name,
                Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),)),
                0.75,
                float(xid_text),
                0.0,
                f"XID {xid_text} (GPU hardware error) on GPU {gpu} {ctx.onset - at:.0f} s before "
                "the stall; not seen working since",
            )
        )
    return out


def _not_working_since(ctx: ScoreContext, gpu: str, at: float, sample_s: float) -> bool:
    """Whether ``gpu``'s SM activity stopped reporting or stayed idle from a
    sample after ``at`` to the onset (while other GPUs' SM activity reports)."""
    sm = ctx.store.get(sig.GPU_SM, (gpu,))
    if sm is None:
        # Its series expired while other GPUs' report: it stopped reporting.
        if any(True for _ in ctx.store.family(sig.GPU_SM)):
            return True
        return _power_fell_since(ctx, gpu, at, sample_s)
    since = window(sm, at + 0.5 * sample_s, ctx.onset)
    return all(v < ctx.settings.idle_sm_ratio for v in since.values)


def _power_fell_since(ctx: ScoreContext, gpu: str, at: float, sample_s: float) -> bool:
    """On a node without SM activity (dcgm-exporter's default fields): whether
    ``gpu``'s power stayed under half its own working level before ``at``
    from a sample after it to the onset. Power keeps some draw when a GPU
    stops (a spinning kernel, the idle floor), so the level is the GPU's
    own, not an absolute one; one stray sample (a swapped scrape) is allowed
    where there are three or more."""
    power = ctx.store.get(sig.GPU_POWER, (gpu,))
    if power is None:
        return False
    before = window(power, at - ctx.settings.baseline_window, at - 0.5 * sample_s)
    since = window(power, at + 0.5 * sample_s, ctx.onset)
    if not before or not since:
        return False
    vals = sorted(since.values)
    high = vals[-2] if len(vals) >= 3 else vals[-1]
    return high < 0.5 * _level(before.values)


def _score_xids(ctx: ScoreContext) -> list[Evidence]:
    """XID events on the stalled job's GPUs: NVLink, hardware or application."""
    out: list[Evidence] = []
    for s in ctx.store.family(sig.GPU_XID):
        if not ctx.in_scope(s.labels[0]):
            continue
        on, _ = ctx.windows(s)
        events = _new_events(s, ctx, on)
        if events <= 0:
            continue
        gpu, xid_text = s.labels
        try:
            xid = int(xid_text)
        except ValueError:
            xid = -1
        culprit = Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),))
        if xid in NVLINK_XIDS:
            out.append(
                Evidence(
                    Cause.NVLINK_DEGRADED,
                    s.spec.name,
                    culprit,
                    0.9,
                    float(xid),
                    0.0,
                    f"XID {xid} (NVLink error) on GPU {gpu}",
                )
            )
        elif xid in HARDWARE_XIDS:
            out.append(
                Evidence(
                    Cause.GPU_FAULT,
                    s.spec.name,
                    culprit,
                    0.9,
                    float(xid),
                    0.0,
                    f"XID {xid} (GPU hardware error) on GPU {gpu}",
                )
            )
        else:
            # Application XIDs (13, 31, 43, 45...) usually follow a crash; weak.
            out.append(
                Evidence(
                    Cause.GPU_FAULT,
                    s.spec.name,
                    culprit,
                    0.4,
                    float(xid),
                    0.0,
                    f"XID {xid} on GPU {gpu}",
                )
            )
    return out


def _score_unhealthy(ctx: ScoreContext) -> list[Evidence]:
    """GPUs the collector marked unhealthy (lost) around the onset."""
    out: list[Evidence] = []
    for s in ctx.store.family(sig.GPU_HEALTHY):
        if not ctx.in_scope(s.labels[0]):
            continue
        on, base = ctx.windows(s)
        if not on:
            continue
        low = min(on.values)
        b = median(base.values) if base else 1.0
        if low < 0.5 <= b:
            gpu = s.labels[0]
            out.append(
                Evidence(
                    Cause.GPU_FAULT,
                    s.spec.name,
                    Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),)),
                    0.95,
                    low,
                    b,
                    f"GPU {gpu} reported unhealthy (lost)",
                )
            )
    return out


def _score_vanished(ctx: ScoreContext, job_gpus: Mapping[str, float]) -> list[Evidence]:
    """Job GPUs whose telemetry stopped while the others' continued
    (``job_gpus``: each job GPU's newest work sample, which outlives its
    series in the store)."""
    st = ctx.settings
    out: list[Evidence] = []
    # Telemetry collapse: one job GPU stops reporting while the others continue.
    fresh: list[Series] = []
    vanished: list[tuple[str, float]] = []
    for gpu, last in job_gpus.items():
        if not ctx.in_scope(gpu):
            continue
        if ctx.now - last > 3 * st.sample_max_age and last >= ctx.onset - st.baseline_window:
            vanished.append((gpu, last))
        elif ctx.now - last <= st.sample_max_age:
            gs = ctx.store.get(sig.GPU_POWER, (gpu,)) or ctx.store.get(sig.GPU_SM, (gpu,))
            if gs is not None:
                fresh.append(gs)
    if not vanished or not fresh:
        return out
    for gpu, last in vanished:
        # The others must have gone on reporting after it fell silent: where
        # every GPU's exporter paused (a dcgm-exporter gap) and the first
        # scrape after it missed this one, all came back but one (cross-check
        # seed 60011, a 57 s gap at 1 s).
        if not any(window(p, last + 1e-3, last + 3 * st.sample_max_age) for p in fresh):
            continue
        out.append(
            Evidence(
                Cause.GPU_FAULT,
                sig.GPU_POWER,
                Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),)),
                0.7,
                0.0,
                1.0,
                f"GPU {gpu} stopped reporting telemetry",
            )
        )
    return out


def _latency_floor(path: str, st: EngineSettings) -> float:
    """The write latency below which a device class is never slow storage.

    Local NVMe sits at 0.1-0.3 ms, so a few milliseconds is already 10-100x
    its normal; SAS/SATA/virtio disks (``sd*``, ``vd*``, ``xvd*``, ``hd*``)
    at a few ms; NFS and other remote paths (and paths of unknown class) keep
    ``storage_latency_min``. A remote export (``host:/path``, ``//host/share``)
    is remote whatever its last component is called (``nas:/vol/sda``).
    """
    if ":" in path or path.startswith("//"):
        return st.storage_latency_min
    name = path.rsplit("/", 1)[-1]
    if name.startswith("nvme"):
        return st.storage_latency_min_nvme
    if name.startswith(("sd", "vd", "xvd", "hd")):
        return st.storage_latency_min_disk
    return st.storage_latency_min


@dataclass(frozen=True, slots=True)
class _Requests:
    """Bytes per write request of a storage path: while the GPUs waited, and
    usually (its baseline). A checkpoint writes large sequential buffers
    (merged to ~1 MiB); slow storage slows the small writes a node always
    makes. ``seen`` is False where the path has no write counts (the
    family is optional): then nothing is known and nothing is judged."""

    size: float = math.nan
    base: float = math.nan
    seen: bool = True

    @property
    def known(self) -> bool:
        return self.size > 0 and self.base > 0

    @property
    def ratio(self) -> float:
        """The request size while waiting over the usual one (NaN: unknown)."""
        return self.size / self.base if self.known else math.nan

    def large(self, st: EngineSettings) -> bool:
        """A bulk writer's requests: large outright, or several times the usual."""
        return self.known and (
            self.size >= st.storage_large_request_bytes or self.ratio >= st.storage_request_ratio
        )

    def text(self) -> str:
        if not self.seen:
            return "request size not seen: no write counts for this path"
        if not self.known:
            return "request size unknown: no writes completed while the GPUs waited"
        return f"{_bytes_text(self.size)} per write, {self.ratio:.1f}x its usual"


def _bytes_text(n: float) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n / 1024:.0f} KiB"


def _per_write(written: Window, writes: Window) -> list[tuple[float, float]]:
    """(bytes/s, writes/s) of the samples both series have (one diskstats line
    or one mountstats block gives both, so they share their timestamps)."""
    ops = dict(zip(writes.times, writes.values, strict=True))
    return [
        (v, ops[t]) for t, v in zip(written.times, written.values, strict=True) if ops.get(t, 0) > 0
    ]


def _requests(ctx: ScoreContext, path: str) -> _Requests:
    """Request sizes of ``path``: over the samples taken while the GPUs waited,
    the bytes of all its writes over their count (what was written, in
    what pieces); usually, the median of its baseline samples' sizes (a
    background burst of other writes does not move it)."""
    written = ctx.store.get(sig.ST_WRITE_BYTES, (path,))
    writes = ctx.store.get(sig.ST_WRITE_OPS, (path,))
    if written is None or writes is None:
        return _Requests(seen=writes is not None)
    (on_b, base_b), (on_o, base_o) = ctx.windows(written), ctx.windows(writes)
    if not ctx.slowdown:
        on_b, on_o = ctx.while_waiting(on_b), ctx.while_waiting(on_o)
    now = _per_write(on_b, on_o)
    usual = [v / n for v, n in _per_write(base_b, base_o)]
    ops = sum(n for _, n in now)
    size = sum(v for v, _ in now) / ops if ops > 0 else math.nan
    return _Requests(size, median(usual) if usual else math.nan)


def score_storage(ctx: ScoreContext) -> list[Evidence]:
    """Write latency, probe latency/failures and write-burst volume per path.

    Volume and request size tell the two storage causes apart: a checkpoint
    writes a lot (against the path's own baseline) in large requests, and
    each large request takes longer, so its latency rises with the request
    size; slow storage is latency far above what the requests' size
    explains, in the small requests the node always makes. Without write
    counts (an optional family) the evidence says so and volume and
    latency decide alone, as they did.
    """
    st = ctx.settings
    out: list[Evidence] = []
    reqs: dict[str, _Requests] = {}

    def path_culprit(ps: Series) -> Culprit:
        path = ps.labels[0]
        return Culprit(f"storage:{path}", "storage_path", (("path", path),))

    def requests(path: str) -> _Requests:
        if path not in reqs:
            reqs[path] = _requests(ctx, path)
        return reqs[path]

    volume = [
        (s, peak, b)
        for s, peak, b in _checkpoint_levels(ctx, sig.ST_WRITE_BYTES)
        if peak >= st.burst_min_bytes and peak >= st.burst_factor * b
    ]
    bursts = {s.labels[0] for s, _, _ in volume}

    for fam, what in ((sig.ST_WRITE_LAT, "write latency"), (sig.ST_PROBE_LAST, "probe latency")):
        for s, peak, b, _ in ctx.peaks(fam):
            ratio = peak / max(b, 1e-6)
            floor = _latency_floor(s.labels[0], st)
            if peak < floor or ratio < 0.5 * st.storage_latency_ratio:
                continue
            culprit = path_culprit(s)
            if ratio >= st.storage_latency_ratio:
                score = 0.85 + 0.1 * min(1.0, math.log10(ratio / st.storage_latency_ratio))
                text = f"{what} on {_where(culprit)}: {peak * 1000:,.2f} ms ({_times(peak, b)})"
            else:
                # Held at half the ratio on two samples, and at the full
                # ratio on one: the first sample after the onset is partly
                # before it (a 60 s sample of a 13x slowdown read 9.8x, the
                # next 13x: cross-check seed 45003). Shown on two and strong
                # on one, as :meth:`Engine._strong` takes it.
                on, _ = ctx.windows(s)
                top = max(on.values)
                if top / max(b, 1e-6) < st.storage_latency_ratio:
                    continue
                score = 0.6
                text = (
                    f"{what} rose on {_where(culprit)}: {peak * 1000:,.2f} ms on two samples, "
                    f"{top * 1000:,.2f} ms on one ({_times(top, b)})"
                )
            if fam == sig.ST_WRITE_LAT:
                req = requests(s.labels[0])
                score, text = _latency_vs_requests(
                    st, (score, text), ratio, req, burst=s.labels[0] in bursts
                )
            out.append(Evidence(Cause.STORAGE_LATENCY, fam, culprit, score, peak, b, text))
    out.extend(_probe_failures(ctx))
    for s, peak, b in volume:
        ratio = peak / max(b, 1.0)
        score = 0.85 + 0.1 * min(1.0, math.log10(max(ratio / st.burst_factor, 1.0)) / 2.0)
        culprit = path_culprit(s)
        text = f"write burst on {_where(culprit)}: {peak / 1e6:,.0f} MB/s ({_times(peak, b)})"
        req = requests(s.labels[0])
        if req.known and not req.large(st):
            # A lot of small writes is no checkpoint's large sequential
            # buffers: volume alone, too weak to shorten the wait for
            # min_duration.
            score = min(score, 0.6)
        text += f"; {req.text()}"
        out.append(Evidence(Cause.CHECKPOINT_WRITE, s.spec.name, culprit, score, peak, b, text))
    for s, level, _ in _checkpoint_levels(ctx, sig.ST_WRITE_BURST):
        if level >= 0.5:
            culprit = path_culprit(s)
            out.append(
                Evidence(
                    Cause.CHECKPOINT_WRITE,
                    s.spec.name,
                    culprit,
                    0.8,
                    1.0,
                    0.0,
                    f"write burst flagged on {_where(culprit)}",
                )
            )
    return out


def _probe_failures(ctx: ScoreContext) -> list[Evidence]:
    """Storage probes that failed (timed out, no space...) around the onset."""
    out: list[Evidence] = []
    for s in ctx.store.family(sig.ST_PROBE_FAIL):
        on, _ = ctx.windows(s)
        events = _new_events(s, ctx, on)
        if events > 0:
            path, reason = s.labels[0], s.labels[1] if len(s.labels) > 1 else "other"
            culprit = Culprit(f"storage:{path}", "storage_path", (("path", path),))
            out.append(
                Evidence(
                    Cause.STORAGE_LATENCY,
                    s.spec.name,
                    culprit,
                    0.9,
                    events,
                    0.0,
                    f"storage probe failed ({reason}) on {_where(culprit)}",
                )
            )
    return out


def _latency_vs_requests(
    st: EngineSettings, scored: tuple[float, str], ratio: float, req: _Requests, *, burst: bool
) -> tuple[float, str]:
    """Write-latency evidence weighed against the request size and volume.

    A write burst in large requests (a checkpoint) makes each write take
    longer in proportion to its size: only latency beyond that, by
    ``storage_latency_ratio``, is slow storage; less is the checkpoint's
    own, secondary evidence (below ``min_evidence``) that cannot turn it
    into ``storage_latency``.
    """
    score, text = scored
    if burst and req.large(st) and ratio < st.storage_latency_ratio * max(req.ratio, 1.0):
        return 0.45, f"{text}; explained by the write burst's larger requests ({req.text()})"
    return score, f"{text}; {req.text()}"


def _checkpoint_levels(ctx: ScoreContext, family: str) -> Iterator[tuple[Series, float, float]]:
    """(series, level while the GPUs waited, baseline) of a write-volume family.

    A checkpoint stall is the job waiting for its own write, so the burst is
    what the window held on the samples taken while the GPUs were idle
    (:meth:`ScoreContext.while_waiting`), on two of them or more (one poll is
    not evidence). It need not last: a node writes its shard and then waits
    for the other ranks' writes. A slowdown keeps its own window rule.
    """
    for s in ctx.store.family(family):
        on, base = ctx.windows(s)
        if not ctx.slowdown:
            on = ctx.while_waiting(on)
            if ctx.min_samples >= 2 and len(on.values) < 2:
                continue
        if on:
            yield s, ctx.level(on.values, lasting=False), _baseline(base)[0]


Scorer = Callable[[ScoreContext], list[Evidence]]
SCORERS: tuple[Scorer, ...] = (
    score_pfc,
    score_congestion,
    score_links,
    score_nvlink,
    score_nvlink_throughput,
    score_storage,
)


# Counters whose evidence is a count of events (any non-zero rate is one).
_EVENT_FAMILIES = frozenset({sig.NIC_LINK_DOWNED, sig.GPU_XID, sig.ST_PROBE_FAIL})
# Families whose evidence shows when the fault happens (events, link
# state): one that first showed well after a stall's onset began after it.
# A level can lag its fault (a write's latency is counted when it completes;
# a missing sample delays a rate), so a late level may still explain one.
TIMED_FAMILIES = _EVENT_FAMILIES | {sig.NIC_LINK_UP, sig.SW_PORT_UP}


def _first_seen(ctx: ScoreContext, e: Evidence) -> float | None:
    """When the series behind ``e`` first showed it: the first sample of its
    onset window a quarter of the way from the baseline up to the evidence
    level, or halfway down to it (None where
    the evidence is not one series' level, e.g. a GPU's links together)."""
    spec = sig.SIGNAL_SPECS.get(e.family)
    if spec is None or e.family in (sig.SW_PFC_FRAMES, sig.NIC_PFC_FRAMES):
        return None
    labels = dict(e.culprit.labels)
    try:
        key = tuple(labels[k] for k in spec.labels)
    except KeyError:
        return None
    s = ctx.store.get(e.family, key)
    if s is None:
        return None
    start = ctx.onset - ctx.settings.onset_lead
    if ctx.slowdown:
        # A slowdown is dated late and its window slides with it: evidence
        # shows from where it began holding, before the window when it held
        # from there on without a break (a storm starting inside shows later).
        on = window(s, ctx.onset - ctx.settings.baseline_window, ctx.now)
    else:
        on, _ = ctx.windows(s)
        start = -math.inf
    if e.family in _EVENT_FAMILIES:
        first = next(
            (
                i
                for i, (t, v) in enumerate(zip(on.times, on.values, strict=True))
                if v > 0 and t >= start
            ),
            None,
        )
        return None if first is None else _seen_by(s, on.times, first)
    up = e.value >= e.baseline
    # A rise is shown from a quarter of the way up: the level it is scored
    # at grows as the window takes in a burst's peak, and from halfway to
    # that peak a burst present at the onset read as first shown a sample
    # later, behind the rate cuts it caused on the other ports (cross-check
    # seed 12052: ECN marks on the culprit 62,000/s at the onset, 175,000/s
    # a sample on). A fall is shown from halfway down.
    mid = e.baseline + (0.25 if up else 0.5) * (e.value - e.baseline)
    hit = [(v >= mid) if up else (v <= mid) for v in on.values]
    first = next((i for i, t in enumerate(on.times) if t >= start and hit[i]), None)
    if first is None:
        return None
    while first > 0 and hit[first - 1]:
        first -= 1
    return _seen_by(s, on.times, first) if e.family in TIMED_FAMILIES else on.times[first]


def _seen_by(s: Series, times: Sequence[float], first: int) -> float:
    """When an event or link state change first seen on ``times[first]``
    would have shown: a sample later than the one before it, where a missed
    scrape came between (it happened in the longer interval, and is no
    later than its first half's sample would have shown it: cross-check
    seed 66057, link-down events first seen 30 s after the sample before,
    past the onset's bound, came a scrape before the stall)."""
    t = times[first]
    if first == 0:
        return t
    sp = sig.spacing(s)
    prev = times[first - 1]
    return min(t, prev + sp) if math.isfinite(sp) and t - prev > 1.5 * sp else t


def collect(ctx: ScoreContext, job_gpus: Mapping[str, float]) -> list[Evidence]:
    """Run every scorer (``job_gpus``: the job GPUs and the time of each
    one's newest work sample); evidence sorted by score, strongest first,
    each with the time it first showed (:attr:`Evidence.since`)."""
    out: list[Evidence] = []
    for scorer in SCORERS:
        out.extend(scorer(ctx))
    out.extend(score_gpu(ctx, job_gpus))
    out = [replace(e, since=_first_seen(ctx, e)) for e in _job_ports(ctx, out)]
    out.sort(key=lambda e: (-e.score, e.cause, e.culprit.key, e.family))
    return out


# What a port no job could be told apart on (a node shared by two jobs)
# loses: it may be either job's, so its evidence explains less.
_SHARED_PORT_PENALTY = 0.05
# Share of its usual traffic at or above which a port went on carrying it.
_FLOWING = 0.7


def _culprit_port(c: Culprit) -> PortKey | None:
    lm = dict(c.labels)
    if c.kind == "nic_port" and "device" in lm and "port" in lm:
        return ("nic", lm["device"], lm["port"])
    if c.kind == "switch_port" and "switch" in lm and "port" in lm:
        return ("switch", lm["switch"], lm["port"])
    return None


def _kept_flowing(ctx: ScoreContext, key: PortKey) -> bool:
    """Whether the port's traffic went on at its usual level (at least its
    usual low) on every sample wholly after the onset, while the stalled
    GPUs waited: their
    job's collectives stopped, so it carries another job's traffic (or a
    frontend network's), whatever the job grouping could tell. Judged on two
    such samples at least; a slowdown's traffic goes on by definition."""
    if ctx.slowdown or ctx.min_samples < 2:
        return False
    s = ctx.store.get(sig.NIC_TX_BYTES if key[0] == "nic" else sig.SW_TX_BYTES, key[1:])
    if s is None:
        return False
    # Three samples at least (the onset window is two at 15-30 s spacing),
    # every one taken while the GPUs still waited: re-scores run only then.
    sample_s = max(ctx.tick, ctx.spacing)
    end = min(ctx.now, max(ctx.on_end(), ctx.onset + 3.0 * sample_s))
    after = window(s, ctx.onset + sample_s, end)
    base = ctx._base(s)
    if len(after.values) < 2 or len(base.values) < 3:
        return False
    # Its usual low (the lower tercile: a communication rhythm's quiet
    # phase), held on every sample: one idle sample says it went quiet.
    usual, _ = _baseline(base)
    return usual > 0 and min(after.values) >= _FLOWING * usual


def _job_ports(ctx: ScoreContext, evidence: Sequence[Evidence]) -> list[Evidence]:
    """Evidence on the other job's ports dropped (it never explains this
    stall), and on ports whose traffic went on while the GPUs waited; on
    shared ports scored lower and said so."""
    out: list[Evidence] = []
    flowing: dict[PortKey, bool] = {}
    for e in evidence:
        key = _culprit_port(e.culprit)
        whose = "own" if key is None else ctx.port(key)
        if key is not None and whose != "other":
            if key not in flowing:
                flowing[key] = _kept_flowing(ctx, key)
            if flowing[key]:
                whose = "other"
        if whose == "other":
            continue
        if whose == "shared":
            text = f"{e.text} (a port neither job could be told apart on)"
            out.append(replace(e, score=e.score - _SHARED_PORT_PENALTY, text=text))
        else:
            out.append(e)
    return out


def missing_groups(store: SnapshotStore, now: float, max_age: float) -> list[str]:
    """Evidence groups with no current series (no switch access, no ECN counters...)."""
    missing: list[str] = []
    for group, families in sig.FAMILY_GROUPS.items():
        if group == "gpu_work":
            continue
        present = any(now - s.updated <= max_age * 4 for fam in families for s in store.family(fam))
        if not present:
            missing.append(group)
    return missing
