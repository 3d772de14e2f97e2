"""Misses the independent cross-check (bench/engine_crosscheck.py) found, one
test per mechanism, on the generator's own trace where that is the smallest
reproduction (``--dump SEED:SCENARIO:VARIANT:SPACING`` writes it) and on a
hand-built node where the mechanism is simple enough to state by itself.

The generator (bench/crosscheck_traces.py) was written from issue #16 without
reading the engine, so these traces carry assumptions the engine's own
simulator does not.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from bench import crosscheck_traces as gen
from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import Incident
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Mapper, Sample
from fabricwatch.engine.replay_openmetrics import parse_openmetrics
from fabricwatch.engine.settings import EngineSettings
from tests.engine.test_mechanisms import T0, Extra, from_text, node, replay


def _replay_trace(
    seed: int, scenario: str, variant: str, spacing: float
) -> tuple[gen.Trace, list[Incident]]:
    trace = gen.generate(seed, scenario, variant, spacing)
    mapper = Mapper()
    parse_openmetrics(io.StringIO(trace.text), mapper, source=f"{scenario}.om")
    res = run_replay(mapper.finish())
    return trace, [tr.incident for tr in res.incidents()]


def _verdicts(incs: list[Incident]) -> list[tuple[str, str]]:
    return [(i.cause, i.culprit.key) for i in incs]


def _only_the_true_stall(trace: gen.Trace, incs: list[Incident]) -> None:
    """The trace's one stall, with its cause and culprit, is the only incident."""
    (truth,) = trace.truth
    assert [(i.kind, i.cause, i.culprit.key) for i in incs] == [
        ("stall", truth.cause, truth.culprits[0])
    ], [i.summary for i in incs]


# 2 + missing families: an XID before the onset window on a node without SM activity


def test_xid_before_the_window_on_a_node_without_sm_activity_is_the_cause() -> None:
    # dcgm-exporter without SM_ACTIVE: GPU 1 reports XID 119 and stops
    # drawing working power; its job-mates run on for a compute phase. The
    # XID is older than the onset window, so "not seen working since" must
    # be read from the GPU's own power.
    trace, incs = _replay_trace(23010, "xid", "ramp", 1.0)
    (truth,) = trace.truth
    missing = trace.params["missing"]
    assert isinstance(missing, list) and "sm_active" in missing
    assert _verdicts(incs) == [("gpu_fault", truth.culprits[0])], [i.summary for i in incs]


def _no_sm(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if s[1] != sig.GPU_SM]


def test_xid_long_before_on_a_gpu_whose_power_fell_is_the_cause_without_sm() -> None:
    def xid(t: float, out: list[Sample]) -> None:
        out.append((T0 + t + 0.2, sig.GPU_XID, ("5", "48"), 1.0 if t >= 1935 else 0.0))

    samples = [
        (
            ts,
            fam,
            labels,
            90.0 if fam == sig.GPU_POWER and labels == ("5",) and ts > T0 + 1935 else v,
        )
        for ts, fam, labels, v in _no_sm(
            node(15.0, 3600, (2000, 2300), stalled=range(4, 8), extra=xid)
        )
    ]
    incs = replay(samples)
    assert _verdicts(incs) == [("gpu_fault", "gpu:5")], [i.summary for i in incs]


def test_xid_on_a_gpu_whose_power_went_on_does_not_explain_a_later_stall_without_sm() -> None:
    def xid(t: float, out: list[Sample]) -> None:
        out.append((T0 + t + 0.2, sig.GPU_XID, ("5", "48"), 1.0 if t >= 1935 else 0.0))

    incs = replay(_no_sm(node(15.0, 3600, (2000, 2300), stalled=range(4, 8), extra=xid)))
    assert [i.cause for i in incs] == ["unknown"], [i.summary for i in incs]


# 8. Concurrent causes: a fault that began after the GPUs were waiting


def test_a_link_flap_a_minute_into_a_hang_at_30_s_does_not_become_its_cause() -> None:
    # The cross-check's hang with a concurrent link flap at 30 s spacing:
    # nothing explains the hang at its onset, and the flap two samples
    # later must stay secondary instead of deciding by default.
    trace, incs = _replay_trace(11073, "hang", "concurrent", 30.0)
    assert trace.params["second_cause"] == "link_flap"
    assert [i.cause for i in incs] == ["unknown"], [i.summary for i in incs]
    assert "after the onset" in incs[0].summary


def _link_flap_at(at: float, spacing: float) -> Callable[[float, list[Sample]], None]:
    def flap(t: float, out: list[Sample]) -> None:
        ts = T0 + t + 0.3
        out.append((ts, sig.NIC_LINK_DOWNED, ("mlx5_2", "1"), 1.0 if t >= at else 0.0))
        out.append((ts, sig.NIC_LINK_UP, ("mlx5_2", "1"), 0.0 if at <= t < at + spacing else 1.0))

    return flap


def test_a_link_flap_inside_a_hang_is_secondary_at_every_spacing() -> None:
    for spacing in (1.0, 5.0, 15.0, 30.0):
        onset = 2000.0
        at = onset + 3 * spacing
        incs = replay(
            node(spacing, 3600, (onset, onset + 12 * spacing), extra=_link_flap_at(at, spacing))
        )
        assert [i.cause for i in incs] == ["unknown"], (spacing, [i.summary for i in incs])


def test_a_link_down_just_before_a_stall_is_still_its_cause() -> None:
    # The counterpart: the link went down during the last compute phase.
    for spacing in (1.0, 5.0, 15.0, 30.0):
        onset = 2000.0
        incs = replay(
            node(
                spacing,
                3600,
                (onset, onset + 12 * spacing),
                extra=_link_flap_at(onset - 0.5, 12 * spacing),
            )
        )
        assert _verdicts(incs) == [("link_down", "nic:mlx5_2:1")], (
            spacing,
            [i.summary for i in incs],
        )


def _scraped_flap(at: float, lag: float, length: float, xid: float | None = None) -> Extra:
    """A link down from ``at`` for ``length`` s, scraped ``lag`` s after each
    GPU sample (the NIC exporter's offset); an XID on GPU 0 from ``xid``."""

    def faults(t: float, out: list[Sample]) -> None:
        if xid is not None:
            out.append((T0 + t + 0.1, sig.GPU_XID, ("0", "79"), 1.0 if t >= xid else 0.0))
        u = t + 0.1 + lag
        out.append((T0 + u, sig.NIC_LINK_DOWNED, ("mlx5_2", "1"), 1.0 if u >= at else 0.0))
        out.append(
            (T0 + u, sig.NIC_LINK_UP, ("mlx5_2", "1"), 0.0 if at <= u < at + length else 1.0)
        )

    return faults


def test_a_link_flap_inside_the_first_idle_sample_does_not_take_over_an_xid_stall() -> None:
    # Cross-check seed 16055 (xid, concurrent, 15 s): an XID stalled the
    # job; a link flapped inside the first idle SM sample and showed on the
    # link's next scrape, after the onset. The GPUs were already idle for
    # that whole sample (SM activity is its average), so the flap came
    # after they stopped: secondary, though it scores higher.
    for spacing in (5.0, 15.0, 30.0):
        onset = 2010.0  # on a sample boundary: the sample before it worked throughout
        faults = _scraped_flap(onset + 0.5 * spacing, 0.4 * spacing, spacing, xid=onset)
        incs = replay(node(spacing, 3600, (onset, onset + 12 * spacing), extra=faults))
        assert _verdicts(incs) == [("gpu_fault", "gpu:0")], (spacing, [i.summary for i in incs])
        late = [e.text for e in incs[0].evidence if e.cause == "link_down"]
        assert late and all(t.startswith("after the onset") for t in late), (spacing, late)


def test_a_link_down_inside_the_partial_sample_a_stall_is_dated_to_is_its_cause() -> None:
    # The job hangs 9 s into a 15 s sample (it reads 40 % of its work) as a
    # link goes down; its onset is dated back to that sample's end. The GPUs
    # were idle for part of that sample only, so the link, scraped after the
    # onset, can have stalled them: the cause, not secondary.
    spacing = 15.0
    hang = 2001.0  # inside the sample ending at 2010
    faults = _scraped_flap(hang + 0.5, 0.4 * spacing, 12 * spacing)
    incs = replay(node(spacing, 3600, (hang, hang + 12 * spacing), extra=faults))
    assert _verdicts(incs) == [("link_down", "nic:mlx5_2:1")], [i.summary for i in incs]


def test_a_link_flap_before_the_stall_scraped_late_is_still_its_cause() -> None:
    # The counterpart, with the same late NIC scrape: the link went down in
    # the last compute phase and shows on a scrape before the first idle
    # SM sample's time.
    for spacing in (5.0, 15.0, 30.0):
        onset = 2010.0
        faults = _scraped_flap(onset - 0.5, 0.4 * spacing, 12 * spacing)
        incs = replay(node(spacing, 3600, (onset, onset + 12 * spacing), extra=faults))
        assert _verdicts(incs) == [("link_down", "nic:mlx5_2:1")], (
            spacing,
            [i.summary for i in incs],
        )


# 5. One poll is not evidence: a slowdown opened by one GPU's low NVLink poll


def test_one_gpus_nvlink_poll_read_low_by_noisy_sampling_opens_no_slowdown() -> None:
    # 5 s samples with swapped and missing scrapes: near the end of the
    # trace one GPU's NVLink total reads low on one poll next to a shallow
    # dip. That poll alone is no NVLink fault, so no slowdown opens; the
    # PFC storm stall earlier in the trace is still found and attributed.
    trace, incs = _replay_trace(23019, "pfc_nic_tx", "noisy", 5.0)
    (truth,) = trace.truth
    assert [(i.kind, i.cause, i.culprit.key) for i in incs] == [
        ("stall", "pfc_storm", truth.culprits[0])
    ], [i.summary for i in incs]


# 11. Disk counters out of step: refreshed in alternate scrapes


def _alternating_disk(latency: Callable[[int], float]) -> list[Sample]:
    """node_exporter diskstats at 5 s whose write time refreshes on even
    scrapes and write count on odd ones: no interval has both deltas."""
    lines = []
    busy = ops = 0.0
    shown = [0.0, 0.0]
    for k in range(1, 721):
        n = 5 * 8e6 / 32768
        ops += n
        busy += n * latency(5 * k)
        if k % 2 == 0:
            shown[0] = busy
        else:
            shown[1] = ops
        ts = T0 + 5 * k + 0.3
        lines.append(f'node_disk_write_time_seconds_total{{device="nvme0n1"}} {shown[0]:.6f} {ts}')
        lines.append(f'node_disk_writes_completed_total{{device="nvme0n1"}} {shown[1]:.0f} {ts}')
    return from_text("\n".join(lines) + "\n")


def test_disk_counters_refreshing_in_alternate_scrapes_still_give_a_latency() -> None:
    disk = _alternating_disk(lambda t: 0.0002)
    lat = [v for _, fam, _, v in disk if fam == sig.ST_WRITE_LAT]
    assert len(lat) >= 300, len(lat)
    assert 0.0001 < sig.median(lat) < 0.0004, sig.median(lat)


def test_slow_nvme_with_counters_in_alternate_scrapes_is_slow_storage() -> None:
    disk = _alternating_disk(lambda t: 0.01 if 1960 <= t < 2300 else 0.0002)
    incs = replay(sorted([*node(5.0, 3600, (2000, 2300)), *disk], key=lambda s: s[0]))
    assert _verdicts(incs) == [("storage_latency", "storage:nvme0n1")], [i.summary for i in incs]


def test_a_latency_refreshed_every_other_scrape_is_read_past_its_partial_sample() -> None:
    # 10 s scrapes, disk latency every 20 s (write time and count refreshed
    # in alternate scrapes: cross-check seed 17032). The latency sample just
    # before the onset covers 20 s, mostly before the GPUs stopped: it is no
    # sample "after the onset", and the window reaches on to the second
    # that is, where latency is 20x its baseline (it read 9x on the first).
    onset = 2010.0

    def disk(t: float, out: list[Sample]) -> None:
        ts = t + 8.3  # node_exporter's scrape offset
        if round(t) % 20 != 10:  # at 2018.3, 2038.3, ...: around the first idle sample (2020.1)
            return
        slow = max(0.0, min(ts, 3600.0) - max(ts - 20.0, onset)) / 20.0
        out.append((T0 + ts, sig.ST_WRITE_LAT, ("nvme0n1",), 0.2e-3 * (1 + 19 * slow)))

    incs = replay(node(10.0, 3600, (onset, onset + 120.0), extra=disk))
    assert _verdicts(incs) == [("storage_latency", "storage:nvme0n1")], [i.summary for i in incs]


def test_the_generators_storms_and_latencies_after_a_sparse_sample_are_found() -> None:
    # 18036: a switch PFC storm at 10 s, a scrape missed and one served
    # stale at its onset; 17032: slow NVMe on a noisy node whose disk
    # counters refresh in alternate scrapes.
    for seed, scenario, variant in (
        (18036, "pfc_switch", "missing_family"),
        (17032, "slowstore_nvme", "noisy"),
    ):
        trace, incs = _replay_trace(seed, scenario, variant, 10.0)
        (truth,) = trace.truth
        assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_write_burst_scraped_just_before_a_one_poll_dip_opens_no_checkpoint() -> None:
    # 1 s samples: an evaluation pause with a background write burst on
    # another disk; node_exporter's scrape sees the burst before
    # dcgm-exporter's sees the idle GPUs. That is the exporters' offsets,
    # not a fault that came first: no incident on one idle poll.
    trace, incs = _replay_trace(101009, "nvlink_crc", "concurrent", 1.0)
    assert any("disk_burst" in c.what for c in trace.confounders)
    (truth,) = trace.truth
    assert _verdicts(incs) == [("nvlink_degraded", truth.culprits[0])], [i.summary for i in incs]


def test_gpus_idle_on_one_sample_each_at_different_samples_are_no_stall() -> None:
    # At 10 s spacing an evaluation pause shows on one sample of GPUs 0-6,
    # and noisy sampling swapped GPU 7's idle sample with its next one: no
    # GPU was idle on two samples, though the GPUs together were over 10 s.
    def pause(ts: float, fam: str, labels: tuple[str, ...], v: float) -> float:
        t = round(ts - T0 - 0.1)
        gpu = int(labels[0])
        hit = (t == 1000 and gpu < 7) or (t == 1010 and gpu == 7)
        if not hit or fam not in (sig.GPU_SM, sig.GPU_POWER):
            return v
        return 0.002 if fam == sig.GPU_SM else 81.0

    samples = [(ts, f, lab, pause(ts, f, lab, v)) for ts, f, lab, v in node(10.0, 1800)]
    assert [i.summary for i in replay(samples)] == []


def test_a_write_burst_over_gpus_idle_on_one_sample_each_opens_no_checkpoint() -> None:
    # 1 s samples: a 1.5 s evaluation pause with a write burst on a disk.
    # Half the GPUs' samples see the pause at one second, the others' (their
    # exporter's offset, a missed sample) at the next: each GPU was idle on
    # one sample, so the burst must not shorten a stall of two polls.
    total = {"bytes": 0.0, "ops": 0.0}

    def disk(t: float, out: list[Sample]) -> None:
        burst = 999.5 <= t <= 1001.5
        rate, size = (2.5e9, 1 << 20) if burst else (20e6, 32 << 10)
        total["bytes"] += rate
        total["ops"] += rate / size
        out.append((T0 + t + 0.3, sig.ST_WRITE_BYTES, ("nvme1n1",), total["bytes"]))
        out.append((T0 + t + 0.3, sig.ST_WRITE_OPS, ("nvme1n1",), total["ops"]))

    def pause(ts: float, fam: str, labels: tuple[str, ...], v: float) -> float:
        t = round(ts - T0 - 0.1)
        gpu = int(labels[0]) if fam in (sig.GPU_SM, sig.GPU_POWER) else -1
        hit = (t == 1000 and 0 <= gpu < 4) or (t == 1001 and gpu >= 4)
        if not hit:
            return v
        return 0.002 if fam == sig.GPU_SM else 81.0

    samples = [(ts, f, lab, pause(ts, f, lab, v)) for ts, f, lab, v in node(1.0, 1800, extra=disk)]
    assert [i.summary for i in replay(samples)] == []


def test_a_write_burst_while_work_slows_is_no_checkpoint_slowdown() -> None:
    # 10 s samples: the job's work dips for a while with a background write
    # burst on another disk. A checkpoint makes the job wait for its own
    # write (a stall); while the GPUs go on working slower the writer is
    # someone else's: no checkpoint_write slowdown.
    trace, incs = _replay_trace(23044, "none", "noisy", 10.0)
    assert not trace.truth
    assert [i.summary for i in incs] == []


def test_an_ecn_slowdown_is_found_on_a_node_replayed_minutes_before_it_at_15_s() -> None:
    # 15 s samples, the trace starts 8 minutes before an ECN slowdown: two
    # baseline windows of throughput history (10 minutes at 15 s) are not
    # there yet, the windows that are (four at least) make the baseline.
    trace, incs = _replay_trace(202053, "ecn_slow", "standard", 15.0)
    (truth,) = trace.truth
    assert truth.onset - trace.start < 600
    assert [(i.kind, i.cause, i.culprit.key) for i in incs] == [
        ("slowdown", "ecn_congestion", truth.culprits[0])
    ], [i.summary for i in incs]


# 10: a collector gap in the history the slowdown check reads


def test_a_collector_gap_in_the_history_does_not_hide_a_later_slowdown() -> None:
    # dcgm-exporter missed 54 s four minutes before an ECN slowdown at 10 s
    # spacing: the throughput windows over the gap hold under two samples.
    # Those windows have no mean and are left out; before, one of them
    # made the whole history unreadable for the ten windows it spans.
    trace, incs = _replay_trace(12038, "ecn_slow", "standard", 10.0)
    (truth,) = trace.truth
    assert str(trace.params["gap"]).startswith("DCGM_")
    assert [(i.kind, i.cause) for i in incs] == [("slowdown", "ecn_congestion")], [
        i.summary for i in incs
    ]
    assert incs[0].culprit.key == truth.culprits[0]


# 10 + 9: a slowdown on a node with neither NVLink nor ECN counters


def test_without_nvlink_counters_the_exchange_is_read_from_the_roce_ports() -> None:
    # dcgm-exporter without NVLink bandwidth, node_exporter without ECN/CNP
    # counters: the all-reduce slowed 1.5x while SM activity barely moved.
    # The job's RoCE port throughput shows the exchange slowing; nothing
    # says why, so it is an unknown slowdown that names what is not read.
    trace, incs = _replay_trace(22038, "ecn_slow", "missing_family", 10.0)
    missing = trace.params["missing"]
    assert isinstance(missing, list) and {"ib_ecn", "nvlink_bw"} <= set(missing)
    assert [(i.kind, i.cause) for i in incs] == [("slowdown", "unknown")], [i.summary for i in incs]
    assert "no ECN/CNP counters" in incs[0].summary


# 5: an evaluation pause with a write burst on another disk is no checkpoint


def _pause_with_burst(
    spacing: float, pause: tuple[float, float], disk: str = "nvme1n1", *, flagged: bool = False
) -> list[Sample]:
    """8 GPUs at ``spacing``, idle inside ``pause``, while ``disk`` writes
    2.5 GB/s in 1 MiB requests (its background: 20 MB/s in 32 KiB);
    ``flagged``: ``disk`` is a configured checkpoint path, whose bursts the
    storage collector flags."""
    total = {"bytes": 0.0, "ops": 0.0}

    def burst(t: float, out: list[Sample]) -> None:
        lo = t - spacing
        inside = max(0.0, min(t, pause[1]) - max(lo, pause[0]))
        written = 2.5e9 * inside + 20e6 * (spacing - inside)
        total["bytes"] += written
        total["ops"] += 2.5e9 * inside / (1 << 20) + 20e6 * (spacing - inside) / (32 << 10)
        out.append((T0 + t + 0.3, sig.ST_WRITE_BYTES, (disk,), total["bytes"]))
        out.append((T0 + t + 0.3, sig.ST_WRITE_OPS, (disk,), total["ops"]))
        if flagged:
            out.append((T0 + t + 0.3, sig.ST_WRITE_BURST, (disk,), float(inside > 0)))

    return node(spacing, 3600, pause, extra=burst)


def test_an_evaluation_pause_with_a_write_burst_opens_no_checkpoint_at_any_spacing() -> None:
    # A pause of 1.9 samples reads idle on two of them: at 1 s the pause
    # nearly covers two samples; at 5 s the first is the partial sample it
    # began in, dated back. A checkpoint of three samples is a stall the
    # truth counts; two are a dip (cross-check seeds 2026006 at 1 s, 12025
    # and 12026 at 5 s opened checkpoint_write on them). A pause is shorter
    # than min_duration (an idle period of 10 s or more is a stall whatever
    # its cause), so at 15-30 s it is a part of one sample.
    min_duration = EngineSettings().min_duration
    for spacing in (1.0, 5.0, 15.0, 30.0):
        start = 2000.0 + 0.05 * spacing
        length = min(1.9 * spacing, 0.95 * min_duration)
        samples = _pause_with_burst(spacing, (start, start + length))
        assert [i.summary for i in replay(samples)] == [], spacing


def test_a_checkpoint_of_three_samples_opens_on_its_third() -> None:
    for spacing in (1.0, 5.0, 15.0, 30.0):
        start = 2000.0 + 0.05 * spacing
        samples = _pause_with_burst(spacing, (start, start + 4.5 * spacing), disk="nvme0n1")
        res = run_replay(samples)
        opened = [tr for tr in res.transitions if tr.kind == "opened"]
        assert [(tr.incident.cause, tr.incident.culprit.key) for tr in opened] == [
            ("checkpoint_write", "storage:nvme0n1")
        ], spacing
        # On the tick after the third idle sample (the first reads 95 %
        # idle), not later: no sample more than the dip it must outlast.
        # Where two samples are min_duration already (15-30 s), on the second.
        latency = (opened[0].at - T0 - start) / spacing
        assert latency < 3.5, spacing
        # Past the second idle sample's tick (2.0-2.3 samples after the start).
        assert latency > 2.5 or spacing >= EngineSettings().min_duration, spacing


def test_the_generators_evaluation_pauses_with_write_bursts_open_no_checkpoint() -> None:
    for seed, scenario, variant, spacing in (
        (2026006, "pfc_switch", "missing_family", 1.0),
        (12025, "xid", "standard", 5.0),
        (12026, "link_down", "two_jobs", 5.0),
    ):
        trace, incs = _replay_trace(seed, scenario, variant, spacing)
        assert any(c.what == "eval_pause+disk_burst" for c in trace.confounders)
        (truth,) = trace.truth
        assert [i.cause for i in incs] == [truth.cause], [i.summary for i in incs]


def test_a_burst_on_a_configured_checkpoint_path_opens_on_the_second_sample() -> None:
    # The storage collector watches the paths checkpoints are written to:
    # a burst flagged there is the job's own write, no other disk's.
    samples = _pause_with_burst(1.0, (2000.05, 2004.55), disk="ckpt", flagged=True)
    opened = [tr for tr in run_replay(samples).transitions if tr.kind == "opened"]
    assert [(tr.incident.cause, tr.incident.culprit.key) for tr in opened] == [
        ("checkpoint_write", "storage:ckpt")
    ]
    assert opened[0].at - T0 - 2000.05 < 2.5


def test_a_beat_of_a_slow_rhythm_with_an_ecn_burst_is_no_slowdown() -> None:
    # 11015 (two_jobs, 5 s): the second job's power beat 20 % low while its
    # traffic held, with an ECN burst on its port; only the checkpoint is real.
    trace, incs = _replay_trace(11015, "checkpoint_nvme", "two_jobs", 5.0)
    assert any(c.what == "ecn_burst_other" for c in trace.confounders)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


# 1 + slow refresh: dcgm-exporter collecting every third scrape


def _slow_dcgm(spacing: float, stall: tuple[float, float], *, scraped: bool) -> list[Sample]:
    """``node`` with the GPU series as replay keeps them from an exporter
    refreshing every third scrape (held repeats dropped), and, where
    ``scraped``, a NIC port counter on every scrape."""
    out: list[Sample] = []
    for s in node(spacing, 3600, stall):
        k = round((s[0] - T0 - 0.1) / spacing)
        if k % 3 == 0:
            out.append(s)
        if scraped and s[1] == sig.GPU_SM and s[2] == ("0",):
            out.append((s[0], sig.NIC_TX_BYTES, ("mlx5_0", "1"), 5e9 * k * spacing))
    return sorted(out, key=lambda s: s[0])


def test_a_hang_seen_on_one_refresh_of_slow_dcgm_data_is_an_incident() -> None:
    # 15 s scrapes, GPU metrics refreshed every 45 s: a 50 s hang (over
    # three scrapes) reads idle on one refresh only. That sample averages
    # a whole scrape's window (15 s, over min_duration): a stall as seen.
    incs = replay(_slow_dcgm(15.0, (2000, 2050), scraped=True))
    assert [i.cause for i in incs] == ["unknown"], [i.summary for i in incs]
    # Dated to the start of the idle sample's window, not to the refresh before it.
    assert incs[0].onset - T0 == pytest.approx(2010.1)


def test_without_node_counters_the_scrape_is_unknown_and_one_refresh_is_not_relied_on() -> None:
    # No NIC, storage or switch counters to read the scrape spacing off: the
    # idle refresh's window could be as short as any, so one is no stall.
    assert [i.summary for i in replay(_slow_dcgm(15.0, (2000, 2050), scraped=False))] == []


def test_one_idle_sample_at_the_scrapes_own_pace_is_still_no_stall() -> None:
    # The same 15 s idle window where every scrape is new: its next sample
    # is one window away, so one idle sample is not relied on.
    samples = [
        (ts, f, lab, 0.002 if f == sig.GPU_SM and round(ts - T0 - 0.1) == 2025 else v)
        for ts, f, lab, v in node(15.0, 3600)
    ]
    assert [i.summary for i in replay(samples)] == []


def test_a_checkpoint_seen_on_one_refresh_of_slow_dcgm_data_is_found() -> None:
    # 12045: dcgm every 3 scrapes at 15 s; a 74 s checkpoint write covers one
    # refresh's scrape window, the disk's burst four of its own samples.
    trace, incs = _replay_trace(12045, "checkpoint_nvme", "standard", 15.0)
    assert trace.params["slow_refresh"] == "dcgm every 3 scrapes"
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_nvlink_errors_refreshed_with_the_stall_name_it_when_the_gpus_resume() -> None:
    # 14054: the CRC counter, refreshed with the rest of dcgm-exporter every
    # 45 s, shows the burst on the one refresh inside the stall and again on
    # the one that comes as the GPUs resume; only the second makes it two.
    for seed, scenario, variant in ((14054, "nvlink_crc", "noisy"), (18054, "nvlink_crc", "ramp")):
        trace, incs = _replay_trace(seed, scenario, variant, 15.0)
        (truth,) = trace.truth
        assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_no_unknown_slowdown_from_a_pause_inside_its_window_without_ecn() -> None:
    # Nodes without ECN/CNP counters and no fault: 12029 (5 s) has a 5.6 s
    # evaluation pause on two samples of a 30 s window, 20059 (15 s) one of
    # 5.7 s in a 60 s window of a 12 s iteration aliased by the samples.
    # Each window's work fell by 5-15 %, nearly all of it in its lowest
    # sample: no slower exchange, so no unknown slowdown.
    for seed, spacing in ((12029, 5.0), (20059, 15.0)):
        trace, incs = _replay_trace(seed, "none", "missing_family", spacing)
        assert trace.truth == [] and "ib_ecn" in str(trace.params["missing"])
        assert [i.summary for i in incs] == []


def test_no_unknown_slowdown_from_a_gauge_window_straying_with_the_phase() -> None:
    # 5 s, no ECN counters, NVLink bandwidth a gauge whose samples catch the
    # rhythm by phase. 132029: a 1.7 s evaluation pause in a 6.4 s rhythm,
    # and the next 45 s window, its lowest samples left out, read 7 % less
    # traffic than a history whose windows agreed within 2 %. 96023: a 2.7 s
    # pause left a window 18 % short, inside the 25 % its samples' spread
    # allows; the real slowdown three minutes later (44 % less) is found.
    trace, incs = _replay_trace(132029, "none", "missing_family", 5.0)
    assert trace.truth == [] and "ib_ecn" in str(trace.params["missing"])
    assert [i.summary for i in incs] == []
    trace, incs = _replay_trace(96023, "ecn_slow", "missing_family", 5.0)
    (truth,) = trace.truth
    assert [(i.kind, i.cause) for i in incs] == [("slowdown", "unknown")], [i.summary for i in incs]
    assert truth.onset - 60 <= incs[0].onset <= truth.end


def test_the_throughput_window_holds_whole_iterations_of_the_rhythm() -> None:
    # 19002 (ramp, 1 s, power only): a 5.3 s iteration in a 30 s window is
    # 5.7 iterations, and the part one it cuts made the window's NVLink mean
    # beat 6 % under its history while storage latency ramped up before the
    # stall: a "slowdown" of a steady job, attributed to that latency. The
    # window is six whole iterations: only the stall is left.
    trace, incs = _replay_trace(19002, "slowstore_nvme", "ramp", 1.0)
    _only_the_true_stall(trace, incs)


@pytest.mark.parametrize(
    ("seed", "variant", "spacing"),
    [(13038, "two_jobs", 10.0), (11053, "two_jobs", 15.0), (11068, "ramp", 30.0)],
)
def test_a_slowdown_shorter_than_four_aliased_rhythms_is_found(
    seed: int, variant: str, spacing: float
) -> None:
    # Power only, sampled slower than the job iterates (1-3 s): the samples
    # alias the rhythm into a beat of 30-40 s, which is a real period of
    # the sampled series, so the throughput window holds whole ones of it.
    # Four of them made the window 150-200 s at 10-30 s samples: longer
    # than the 80-180 s slowdowns, and on a node replayed from 8 minutes
    # before (13038) more than the history held for its baseline windows.
    # The window is whole beats over the usual four samples (30 s at least).
    trace, incs = _replay_trace(seed, "ecn_slow", variant, spacing)
    (truth,) = trace.truth
    assert "sm_active" in str(trace.params["missing"])
    periods = trace.params["periods"]
    assert isinstance(periods, list) and max(periods) < spacing
    assert [(i.kind, i.cause, i.culprit.key) for i in incs] == [
        ("slowdown", "ecn_congestion", truth.culprits[0])
    ], [i.summary for i in incs]


def test_a_throughput_window_mostly_in_a_collector_gap_is_no_slowdown() -> None:
    # 42010 (missing_family, 1 s): dcgm-exporter missed 35 s just after a
    # 1.4 s evaluation pause. The 44 s window then held 9 samples, two of
    # them in the pause, and the steady job read 15 % slower (a "gpu_fault
    # slowdown": GPU 7 stopped reporting, in the gap). A window needs half
    # its samples to stand for it; only the later XID stall is an incident.
    trace, incs = _replay_trace(42010, "xid", "missing_family", 1.0)
    assert str(trace.params["gap"]).startswith("DCGM_")
    assert any(c.what == "eval_pause" for c in trace.confounders)
    _only_the_true_stall(trace, incs)


def test_an_xid_stall_at_60_s_keeps_its_cause_past_five_minutes() -> None:
    # 60 s samples (the top of the live collectors' range): the stalls last
    # 5-8 minutes, longer than the store keeps a series no sample refreshed.
    for seed, variant in ((14010, "standard"), (12010, "missing_family")):
        trace, incs = _replay_trace(seed, "xid", variant, 60.0)
        (truth,) = trace.truth
        assert truth.end - truth.onset > 300
        assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_stall_episode_whose_gpus_all_resumed_ends_when_the_job_stalls_on_others() -> None:
    # 16000 (missing_family, 60 s, power only, noisy): GPU 5's samples
    # either side of a missed one swapped, so it read idle a minute before
    # the job's checkpoint and worked on the sample where the seven others
    # went idle. That one-GPU episode (its co-activity group of one) went on
    # as the job's, dated a sample early, and the checkpoint's onset window
    # ended before the burst's second sample: unknown.
    trace, incs = _replay_trace(16000, "checkpoint_nvme", "missing_family", 60.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]
    assert abs(incs[0].onset - truth.onset) <= 60.0


def test_slow_storage_whose_first_sample_after_the_onset_is_partial_is_named() -> None:
    # 60 s samples, write latency 13x its baseline (NFS, 45003) and 16x (NVMe,
    # noisy, 21002): the onset window holds two samples after the onset, and
    # the first is partly before it (9.8x for 45003). Held at half the
    # ratio on two samples and at the full ratio on one is slow storage.
    for seed, scenario, variant in (
        (45003, "slowstore_nfs", "standard"),
        (21002, "slowstore_nvme", "noisy"),
    ):
        trace, incs = _replay_trace(seed, scenario, variant, 60.0)
        (truth,) = trace.truth
        assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_swapped_nvlink_sample_before_a_hang_is_no_collapsed_link() -> None:
    # 16013 (noisy, 20 s, two jobs): GPU 1's NVLink samples either side of
    # the hang's onset swapped, so its partial sample (26 % of its traffic)
    # came before the onset and its usual traffic after it. Shown on one
    # poll, a collapsed link is still down after the onset; this one was
    # not: the hang has no cause the node can see.
    trace, incs = _replay_trace(16013, "hang", "noisy", 20.0)
    (truth,) = trace.truth
    assert truth.cause == "unknown"
    assert [i.cause for i in incs] == ["unknown"], [i.summary for i in incs]


def test_a_burst_present_at_the_onset_is_dated_there_as_its_peak_grows() -> None:
    # 12052 (two_jobs, 15 s): ECN marks on the culprit port read 62,000/s at
    # the onset and 175,000/s a sample later. Dated from halfway to that
    # peak, the marks "first showed" a sample after the onset, behind the
    # rate cuts they caused on the job's other ports, which took the culprit.
    trace, incs = _replay_trace(12052, "ecn_stall", "two_jobs", 15.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_pause_straddling_two_coarse_samples_is_no_slowdown() -> None:
    # An evaluation pause of 6-7 s at 5 and 10 s spacing, on nodes without
    # ECN counters (the "exchange slowed" rule decides there): no sample
    # reads idle, the two it straddles read low, and at 5 s the window's SM
    # mean read 17 % low, 11 % without its lowest sample. Without its two
    # lowest samples the window is as usual. The real slowdown (60023) and
    # the checkpoint stall (60030) stay found.
    for seed, scenario, spacing in ((60023, "ecn_slow", 5.0), (60030, "checkpoint_nvme", 10.0)):
        trace, incs = _replay_trace(seed, scenario, "missing_family", spacing)
        assert any(c.what.startswith("eval_pause") for c in trace.confounders)
        (truth,) = trace.truth
        assert [(i.kind, i.cause) for i in incs] == [(truth.kind, truth.cause)], [
            i.summary for i in incs
        ]


def test_a_burst_on_a_jobs_port_inside_a_throughput_window_is_no_slowdown() -> None:
    # 56037 (two jobs, 10 s): a 7 s ECN burst on the second job's port cut
    # that job's 40 s NVLink mean by 7 %, past a history whose four windows
    # had no spread, and the burst named it an ECN slowdown. The fall held
    # on two samples; without them the window is as usual.
    trace, incs = _replay_trace(56037, "ecn_stall", "two_jobs", 10.0)
    assert any(c.what == "ecn_burst_other" for c in trace.confounders)
    _only_the_true_stall(trace, incs)


def test_work_low_for_less_than_an_iteration_of_its_rhythm_is_no_slowdown() -> None:
    # 52035 (two jobs, 10 s, no SM activity): the second job's 9.3 s rhythm,
    # its power sampled every 10 s, beats with a 62 s period; its samples
    # read below slow_ratio on two samples of one beat, 10 s after a 6 s CNP
    # burst on its port, whose tail still held half the evidence window: an
    # "ECN slowdown". Low work must outlast an iteration of the rhythm.
    trace, incs = _replay_trace(52035, "pfc_nic_rx", "two_jobs", 10.0)
    assert any(c.what == "ecn_burst_other" for c in trace.confounders)
    _only_the_true_stall(trace, incs)


def test_a_gpu_late_back_from_an_exporter_gap_has_not_stopped_reporting() -> None:
    # 60011 (noisy, 1 s, two jobs): dcgm-exporter missed 57 s; the first
    # scrapes after it missed GPU 5's samples (noisy sampling), so the others
    # were fresh again and GPU 5 still silent: "GPU 5 stopped reporting
    # telemetry", a gpu_fault slowdown of the second job. They had all
    # stopped together.
    trace, incs = _replay_trace(60011, "link_down", "noisy", 1.0)
    assert str(trace.params["gap"]).startswith("DCGM_")
    _only_the_true_stall(trace, incs)


def test_a_gpu_that_fell_off_the_bus_stays_the_cause_after_it_leaves_the_job() -> None:
    # 52010 (concurrent, 1 s, dcgm every 3 scrapes): GPU 1 hit XID 79 and
    # its telemetry stopped before dcgm-exporter exported the XID; the seven
    # others stalled a compute phase later. Its silence named the stall a GPU
    # fault until, a minute on, GPU 1 no longer counted as running a job (no
    # active sample within activity_window), and the stall fell to unknown.
    trace, incs = _replay_trace(52010, "xid", "concurrent", 1.0)
    (truth,) = trace.truth
    assert truth.end - truth.onset > 60
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_pfc_storm_whose_first_sample_after_the_onset_is_partial_is_named() -> None:
    # 53064 (noisy, 30 s, power only): a transmit storm at 92 % on the
    # culprit port began 3 s before the end of the NIC sample the onset fell
    # in, which read 12 %; the onset window ends a sample later, so the
    # storm held 92 % on one sample and was there on two: "PFC pausing rose"
    # (0.45, congestion-level) and the stall came out unknown.
    trace, incs = _replay_trace(53064, "pfc_nic_tx", "noisy", 30.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_link_down_first_seen_after_a_missed_scrape_is_dated_by_the_scrape_missed() -> None:
    # 66057 (15 s): the link flapped a second before the stall; the NIC
    # scrape after it was missed, so the link-down count first showed 30 s
    # after the sample before, past the bound by which an event must show
    # to have come before an onset dated on SM averages, and the stall came
    # out unknown. Seen a scrape late, it happened no later than the
    # missed scrape would have shown it.
    trace, incs = _replay_trace(66057, "link_flap", "standard", 15.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_each_job_of_a_two_job_node_keeps_its_own_rhythm() -> None:
    # 70009 (two jobs, 1 s, dcgm every 2 scrapes): jobs of 6.6 s and 2.8 s
    # iterations. One rhythm for the node, the median over all eight GPUs,
    # read 8.7 s: neither job's. The first job's throughput window, four of
    # those, cut its peaky NVLink cycle mid-iteration and its window means
    # beat by 30 %; after an NVLink stall GPU 2's link stayed degraded (its
    # traffic at 7 %, the job's work unchanged), and a beat of GPU 1 made
    # the pair a "slowdown" of a job that was not slower. Each job's window
    # is whole iterations of its own rhythm: only the stall is left.
    trace, incs = _replay_trace(70009, "nvlink_crc", "two_jobs", 1.0)
    periods = trace.params["periods"]
    assert isinstance(periods, list) and len(periods) == 2
    _only_the_true_stall(trace, incs)


def test_a_burst_straddling_two_of_four_window_samples_does_not_explain_a_slowdown() -> None:
    # 61038 (two jobs, 10 s, power only): the second job's NVLink traffic,
    # a 0.7 s rhythm averaged over 10 s samples, beat one step of its
    # sampling (5 %) low for a while; a 5 s ECN burst on that job's port
    # straddled two NIC samples of the 40 s throughput window, and the
    # median of four (the mean of its middle two, a burst sample and a
    # quiet one) read 7,651x the baseline: an "ECN slowdown" of a job that
    # was not slower. A slowdown's evidence must hold on more than half of
    # the window's samples; only the true slowdown of the first job is left.
    trace, incs = _replay_trace(61038, "ecn_slow", "two_jobs", 10.0)
    assert any(c.what == "ecn_burst_other" for c in trace.confounders)
    (truth,) = trace.truth
    assert [(i.kind, i.cause, sorted(i.gpus)) for i in incs] == [
        ("slowdown", truth.cause, [str(g) for g in truth.gpus])
    ], [i.summary for i in incs]


def test_a_sample_after_a_scrape_missed_at_the_onset_windows_end_belongs_to_it() -> None:
    # 67033 (noisy, 10 s, NFS 16x): the stall's onset, dated on SM averages,
    # made the latency sample ending a second before the fault one of the
    # two "after the onset"; the next was slow (52 ms) and the one after it
    # was never scraped. The sample that followed covered the missed one's
    # interval, which began inside the onset window, so it is in the window:
    # slow on two samples, the stall is slow storage, not unknown.
    trace, incs = _replay_trace(67033, "slowstore_nfs", "concurrent", 10.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_a_series_refreshed_every_other_scrape_has_no_missed_scrapes() -> None:
    # 84002 (noisy, 1 s, disk write time and count in alternate scrapes): the
    # latency comes every 2 s, 3 s after a missed scrape; judged against the
    # 1 s scrape every sample followed a "missed" one, and the window took in
    # a sample past its end that read the slow NVMe at 5x (a half-refreshed
    # pair of counters) as the stall's evidence faded: unknown. Missed is
    # judged against the series' own spacing.
    trace, incs = _replay_trace(84002, "slowstore_nvme", "concurrent", 1.0)
    assert "alternate scrapes" in str(trace.params["slow_refresh"])
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_one_look_at_an_aliased_rhythm_past_slow_ratio_opens_no_slowdown() -> None:
    # 3031 (ramp, 1 s, dcgm every 2 scrapes, power only): an 11 s rhythm
    # whose 1.9 s exchange is caught whole, in part or not at all by 1 s
    # samples 2 s apart. Its 33 s throughput window means swung by 25-70 %
    # from one check to the next, and one check of them 25 % low (past
    # slow_ratio, inside the history's own 69 % spread) opened an "ECN
    # slowdown" a minute before the real one, on the CNPs of the ramp. A
    # verdict from one look must stand out from the history's spread.
    trace, incs = _replay_trace(3031, "ecn_slow", "ramp", 1.0)
    assert trace.params["ramp_s"] and trace.params.get("slow_refresh")
    (truth,) = trace.truth
    assert [(i.kind, i.cause) for i in incs] == [("slowdown", truth.cause)], [
        i.summary for i in incs
    ]
    assert abs(incs[0].onset - truth.onset) < 30.0


def test_a_pause_on_gpus_capped_below_their_board_power_is_no_checkpoint() -> None:
    # 93011 (1 s, power only, no limit exported): H100s capped at 400 W peak
    # at 336 W; a quarter of the class's 700 W board power is 52 % of that.
    # A 1.7 s evaluation pause inside an exchange (60 % of the peak) made
    # the samples on both sides of it, part exchange, read idle as well:
    # idle on three samples with a write burst on another disk, a 2 s
    # "checkpoint". Half its own peak is no idle draw for a GPU.
    trace, incs = _replay_trace(93011, "link_down", "concurrent", 1.0)
    assert any(c.what == "eval_pause+disk_burst" for c in trace.confounders)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


def test_the_xid_of_an_earlier_stall_is_no_new_event_of_a_later_slowdown() -> None:
    # 105040 (two jobs, 10 s, noisy): XID 63 on GPU 3 stalled its job for
    # 50 s. Replay's XID series starts from a zero, so its event shows as a
    # rate where it happened; the "series born near the onset" rule for
    # collectors that create the series at its first event still counted
    # the whole series as new 90 s later, and a beat of the two jobs'
    # 10.7 s rhythms at 10 s samples opened a gpu_fault slowdown on it.
    trace, incs = _replay_trace(105040, "xid", "noisy", 10.0)
    (truth,) = trace.truth
    assert _verdicts(incs) == [(truth.cause, truth.culprits[0])], [i.summary for i in incs]


@pytest.mark.parametrize(
    ("seed", "variant", "spacing"),
    [(112009, "two_jobs", 1.0), (117069, "concurrent", 30.0)],
)
def test_a_link_left_degraded_after_its_stall_opens_no_slowdown(
    seed: int, variant: str, spacing: float
) -> None:
    # After the NVLink stall the culprit's link stays at 0-40 % of its
    # traffic with thousands of CRC errors a second while the job runs on
    # at full speed. Measured against the job before the stall, that GPU
    # read slow on every window, and a beat of the rhythm on another GPU
    # (112009: 11 %) or a 5 % dip of every GPU (117069) made a "slowdown"
    # that the link's standing evidence explained: twice in 117069. The
    # fault was reported with the stall; the job after it is measured
    # against itself.
    trace, incs = _replay_trace(seed, "nvlink_crc", variant, spacing)
    _only_the_true_stall(trace, incs)


def test_a_link_left_degraded_after_its_stall_does_not_shorten_a_later_pause() -> None:
    # 130069 (held out; 30 s, power only): four minutes after GPU 6's NVLink
    # stall, its link still degraded, a 5.8 s evaluation pause read idle on
    # one sample, and the link's standing evidence (transmit at 31 % of its
    # baseline) let the fast path open a 29 s nvlink_degraded stall on it.
    # Evidence of a fault already reported came with no dip: a new stall it
    # explains must last min_duration.
    trace, incs = _replay_trace(130069, "nvlink_crc", "ramp", 30.0)
    assert any(c.what == "eval_pause+disk_burst" for c in trace.confounders)
    _only_the_true_stall(trace, incs)


def test_a_slowdown_whose_fault_then_stalls_the_job_is_one_incident() -> None:
    # 138003 (held out; 1 s, NFS write latency ramping up over a minute):
    # at 19x its baseline the latency slowed the job, the slowdown ended as
    # its throughput window lagged, and 20 s later the job stalled at 98x.
    # The same path's fault slowed the job and then stalled it: one
    # incident from its first slow sample, not a slowdown page and then a
    # stall page.
    trace, incs = _replay_trace(138003, "slowstore_nfs", "ramp", 1.0)
    assert trace.params["ramp_s"]
    _only_the_true_stall(trace, incs)
    assert incs[0].onset < trace.truth[0].onset  # from the first slow sample
