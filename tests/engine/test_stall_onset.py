"""A stall's onset is the sample it began in, at 1 s as at 5-30 s.

SM activity is a mean over the sample interval (GPM and dcgm-exporter's
profiling fields): a GPU that hangs half-way through an interval reads at
under half its normal work in that sample and idle from the next. The stall
began inside the partial sample; dated to the first idle one it starts a
sample late, and the evidence window (one iteration plus one sample before
the onset) misses a fault that came a few seconds before the GPUs stopped
(held-out seed 4263, ramp, 1 s: an XID 4 s before the first idle sample
read as ``unknown``).
"""

from __future__ import annotations

from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Sample

T0 = 1_700_000_000.0


def _hang(spacing: float, partial: float | None) -> list[Sample]:
    """8 GPUs at 0.8 SM activity, hung from sample 100 to 140 (``partial``:
    the work of sample 100, the one the hang began in), an XID on GPU 2 from
    sample 98."""
    out: list[Sample] = []
    for k in range(1, 200):
        ts = T0 + k * spacing + 0.1
        for g in range(8):
            sm = 0.8
            if k == 100 and partial is not None:
                sm = partial
            elif 100 <= k < 140:
                sm = 0.003
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
        out.append((ts + 0.2, sig.GPU_XID, ("2", "79"), 1.0 if k >= 98 else 0.0))
    out.sort(key=lambda s: s[0])
    return out


def _onsets(samples: list[Sample]) -> list[tuple[str, float]]:
    incs = [tr.incident for tr in run_replay(samples).incidents()]
    return [(i.cause, round(i.onset - T0, 1)) for i in incs]


def test_a_hang_that_began_inside_a_1_s_sample_dates_from_it() -> None:
    assert _onsets(_hang(1.0, partial=0.3)) == [("gpu_fault", 100.1)]


def test_a_sample_at_more_than_half_the_work_is_no_part_of_the_stall() -> None:
    # Worked more than half of it: the stall began at the next sample (or in
    # its last moments, which the next sample holds).
    assert _onsets(_hang(1.0, partial=0.6)) == [("gpu_fault", 101.1)]


def test_a_partial_and_one_idle_sample_with_a_write_burst_are_no_checkpoint_stall() -> None:
    # The partial sample dates the onset; it is no poll of the fast path. A
    # 1.5 s dip seen as one partial and one idle sample, with a write burst
    # around it, opened a checkpoint_write stall (held-out 31351,
    # concurrent, 1 s) when the partial sample counted as the first poll.
    out: list[Sample] = []
    total = 0.0
    for k in range(1, 200):
        ts = T0 + k + 0.1
        for g in range(8):
            sm = {100: 0.3, 101: 0.003}.get(k, 0.8)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
        total += 2e9 if 99 <= k < 103 else 5e6
        out.append((ts + 0.3, sig.ST_WRITE_BYTES, ("ckpt",), total))
    out.sort(key=lambda s: s[0])
    assert _onsets(out) == []
