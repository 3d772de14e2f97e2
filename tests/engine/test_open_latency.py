"""How soon a stall opens (issue 16: median latency <= 2 samples at every spacing).

A sample is a mean over its interval, for a GPU's work as for a port's
pause-time fraction: a fault that begins inside a sample reads there only
for the part after it began. The fast path opens once the evidence of one
halting cause showed on two samples and was strong on one of them; holding
it to the strong level on both waited a whole sample for what the second
sample shows whole (a pause storm beginning mid-sample opened a poll late at
1 s and 5 s, seeds 90000 standard, 90007 two_jobs and 90028 missing of the
sweep). One poll is still no evidence.
"""

from __future__ import annotations

import math

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Sample

from .conftest import replay_plan

T0 = 1_700_000_000.0


def _share(lo: float, hi: float, start: float, end: float) -> float:
    """Share of the interval [lo, hi) inside [start, end)."""
    return max(0.0, min(hi, end) - max(lo, start)) / (hi - lo)


def _node(
    spacing: float,
    *,
    idle: tuple[float, float],
    storm: tuple[float, float],
    storm_samples: frozenset[int] | None = None,
) -> list[Sample]:
    """8 GPUs and one NIC port sampled every ``spacing`` s for 30 min, each
    sample the mean over the interval before it: SM activity ~0.8 at work,
    idle over ``idle``; the port paused 97 % of the time over ``storm``
    (only in the samples numbered ``storm_samples``, where given)."""
    out: list[Sample] = []
    k = 1
    while k * spacing <= 1800:
        hi = k * spacing
        lo = hi - spacing
        ts = T0 + hi + 0.1
        busy = 1.0 - _share(lo, hi, *idle)
        for g in range(8):
            sm = 0.002 + 0.8 * busy + 0.01 * math.sin(7 * hi + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        paused = _share(lo, hi, *storm) if storm_samples is None or k in storm_samples else 0.0
        out.append((ts + 0.2, sig.NIC_PFC_RATIO, ("mlx5_2", "1", "3", "rx"), 0.001 + 0.97 * paused))
        k += 1
    out.sort(key=lambda s: s[0])
    return out


def _opened(samples: list[Sample]) -> list[IncidentTransition]:
    return [tr for tr in run_replay(samples).transitions if tr.kind == "opened"]


@pytest.mark.parametrize(
    ("spacing", "begins", "first_idle"),
    [
        # 1 s: the storm and the stall begin half a second into the sample
        # at 1001 (half its work, half paused); the sample at 1002 is the
        # first idle one and fully paused.
        (1.0, 1000.5, 1002.0),
        # 5 s: they begin 2 s into the sample at 1005 (60 % of its work,
        # paused 60 % of it); the sample at 1010 is the first idle one.
        (5.0, 1002.0, 1010.0),
    ],
)
def test_a_storm_that_began_inside_the_stalled_sample_opens_on_the_first_idle_poll(
    spacing: float, begins: float, first_idle: float
) -> None:
    opened = _opened(_node(spacing, idle=(begins, begins + 120), storm=(begins, begins + 120)))
    assert [(tr.incident.kind, tr.incident.cause) for tr in opened] == [("stall", "pfc_storm")]
    assert opened[0].incident.culprit.key.startswith("nic:mlx5_2:1")
    # Opened on the tick that first saw the first idle sample, not a poll later.
    assert opened[0].at - (T0 + first_idle) < 1.0, opened[0].at - T0


def test_a_storm_beginning_with_the_stall_is_refined_in_the_same_incident() -> None:
    # Opened on the partial sample's evidence (heavy pausing, then a storm),
    # the verdict is refined on the re-score: one incident, updated.
    trs = run_replay(_node(1.0, idle=(1000.5, 1120.5), storm=(1000.5, 1120.5))).transitions
    keys = {tr.incident.key for tr in trs}
    assert len(keys) == 1, [tr.incident.summary for tr in trs]
    assert [tr.kind for tr in trs][:2] == ["opened", "updated"]
    assert trs[-1].incident.cause == "pfc_storm"
    assert trs[-1].incident.confidence > trs[0].incident.confidence


def test_a_dip_with_a_storm_on_one_sample_opens_nothing() -> None:
    # One poll is no evidence: a 1.5 s dip (a partial and one idle sample)
    # with pausing that shows strong on one sample only is no pfc_storm.
    samples = _node(
        1.0, idle=(1000.5, 1002.0), storm=(1001.0, 1002.0), storm_samples=frozenset({1002})
    )
    assert _opened(samples) == []


def test_a_dip_with_a_storm_that_showed_only_before_it_opens_nothing() -> None:
    # Pausing on the samples before a dip that is gone by its idle sample
    # is no evidence that lasted: nothing opens.
    samples = _node(1.0, idle=(1000.5, 1002.0), storm=(998.0, 1001.0))
    assert _opened(samples) == []


def _hang(
    *, xid_at: float | None = None, late_from: int | None = None, idle_from: float = 1001.0
) -> list[Sample]:
    """8 GPUs of one job sampled every second (interval means), hung from
    ``idle_from`` for 2 min; GPU 3's last-XID series reads 79 from the
    sample at ``xid_at``; from sample ``late_from`` on the scrapes come 30 ms
    early (scrape jitter)."""
    out: list[Sample] = []
    for k in range(1, 1801):
        t = float(k)
        ts = T0 + t + (0.07 if late_from is not None and k >= late_from else 0.1)
        busy = 1.0 - _share(t - 1.0, t, idle_from, idle_from + 120.0)
        for g in range(8):
            sm = 0.002 + 0.8 * busy + 0.01 * math.sin(7 * t + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        if xid_at is not None and t >= xid_at - 1.0:
            out.append((ts + 0.1, sig.GPU_XID, ("3", "79"), 1.0 if t == xid_at else 0.0))
    out.sort(key=lambda s: s[0])
    return out


def test_an_xid_in_the_interval_the_gpus_stopped_in_opens_on_the_first_idle_poll() -> None:
    # The GPUs stop at 1001.0 (the sample at 1001 is all work, the one at
    # 1002 the first idle one) and the XID shows in the same sample: a
    # discrete event is evidence without a second sample (mechanism 5).
    opened = _opened(_hang(xid_at=1002.0))
    assert [(tr.incident.cause, tr.incident.culprit.key) for tr in opened] == [
        ("gpu_fault", "gpu:3")
    ]
    assert opened[0].at - (T0 + 1002.1) < 1.0, opened[0].at - T0


def test_a_hang_without_evidence_still_waits_for_min_duration() -> None:
    opened = _opened(_hang())
    assert [tr.incident.cause for tr in opened] == ["unknown"]
    assert opened[0].at - (T0 + 1002.1) >= 10.0 - 0.2, opened[0].at - T0


def test_scrape_jitter_does_not_cost_a_poll() -> None:
    # The hang's first idle sample is at 1002.1; from 1012 on the scrapes
    # come 30 ms early, so the eleventh idle sample is 9.97 s after the
    # first: it has lasted min_duration (10 s) all the same.
    opened = _opened(_hang(late_from=1012))
    assert [tr.incident.cause for tr in opened] == ["unknown"]
    assert opened[0].at < T0 + 1013.0, opened[0].at - T0


def _two_jobs(*, lost_at: float) -> list[Sample]:
    """A node shared by two jobs without process data: GPUs 0-3 iterate
    every 4 s, GPUs 4-7 every 6 s (their own rhythms, uncorrelated). GPU 4
    logs XID 79 in the sample at ``lost_at`` and reports nothing after it
    (fallen off the bus); its job-mates 5-7 hang from that second on."""
    out: list[Sample] = []
    for k in range(1, 1801):
        t = float(k)
        ts = T0 + t + 0.1
        for g in range(8):
            if g == 4 and t > lost_at:
                continue
            period = 4 if g < 4 else 6
            sm = 0.8 if (t % period) < period / 2 else 0.3
            if g >= 4 and t > lost_at:
                sm = 0.002
            sm += 0.01 * math.sin(7 * t + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        if t >= lost_at - 1.0 and t <= lost_at:
            out.append((ts + 0.1, sig.GPU_XID, ("4", "79"), 1.0 if t == lost_at else 0.0))
    out.sort(key=lambda s: s[0])
    return out


def test_a_job_of_four_stalls_when_three_hang_and_the_fourth_fell_off_the_bus() -> None:
    # Three of the job's four GPUs idle (the fourth silent) are a stall of
    # that job, though only three of the node's eight: counted per job. The
    # silent GPU's XID explains it from the first idle poll.
    opened = _opened(_two_jobs(lost_at=1000.0))
    assert [(tr.incident.kind, tr.incident.cause, tr.incident.culprit.key) for tr in opened] == [
        ("stall", "gpu_fault", "gpu:4")
    ], [tr.incident.summary for tr in opened]
    assert set(opened[0].incident.gpus) <= {"4", "5", "6", "7"}
    assert opened[0].at - (T0 + 1001.1) < 1.0, opened[0].at - T0


def test_the_tail_of_a_slowdown_is_no_second_slowdown() -> None:
    # Sweep plan 90014 (concurrent, 1 s): an ECN slowdown with a link lost
    # inside it. As the job recovered, its throughput window still held the
    # slowdown, the check found the GPUs slow once more, dated half a
    # window back into the ended slowdown, and a second incident opened on
    # the link (the secondary cause) at once. It is one incident.
    plan, incidents = replay_plan(90014, "concurrent", 1.0)
    truth = next(t for t in plan.truth if t.cause == "ecn_congestion")
    near = [
        i for i in incidents if i.onset <= truth.end + 2 and (i.ended_at or 1e18) >= truth.onset
    ]
    assert [(i.kind, i.cause) for i in near] == [("slowdown", "ecn_congestion")], [
        i.summary for i in near
    ]


def _checkpoint(
    begins: float, *, idle_for: float = 120.0, burst_samples: frozenset[int] | None = None
) -> list[Sample]:
    """8 GPUs sampled every second (interval means) idle for ``idle_for``
    from ``begins`` while the node writes a checkpoint to nvme0n1 in 1 MiB
    requests (3 GB/s against 15 MB/s of small writes; only in the samples
    numbered ``burst_samples``, where given), counters stamped 0.3 s after
    the GPUs' samples."""
    out: list[Sample] = []
    written = writes = 0.0
    for k in range(1, 1801):
        t = float(k)
        ts = T0 + t + 0.1
        share = _share(t - 1.0, t, begins, begins + idle_for)
        for g in range(8):
            sm = 0.002 + 0.8 * (1.0 - share) + 0.01 * math.sin(7 * t + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        burst = share if burst_samples is None or k in burst_samples else 0.0
        written += 15e6 * (1.0 + 0.1 * math.sin(3 * t)) + 3e9 * burst
        writes += 15e6 / 65536 + 3e9 * burst / 1048576
        out.append((ts + 0.3, sig.ST_WRITE_BYTES, ("nvme0n1",), written))
        out.append((ts + 0.3, sig.ST_WRITE_OPS, ("nvme0n1",), writes))
    out.sort(key=lambda s: s[0])
    return out


def test_a_dip_beginning_inside_a_sample_with_a_burst_across_it_opens_nothing() -> None:
    # Sweep plan 31351 (concurrent, 1 s), seen when the sample before the
    # first idle one was counted as the stall's first poll wherever it read
    # under half the GPUs' work: a 1.75 s evaluation dip beginning inside a
    # sample (a partial and one idle sample) with a background burst of 1 MiB
    # writes on both opened checkpoint_write. A stall seen idle on one
    # sample is one poll, however low the sample before it read.
    assert _opened(_checkpoint(1000.25, idle_for=1.75)) == []


def test_a_dip_inside_a_sample_with_a_one_sample_burst_opens_nothing() -> None:
    # The same dip with the burst on its idle sample only.
    samples = _checkpoint(1000.25, idle_for=1.75, burst_samples=frozenset({1002}))
    assert _opened(samples) == []
