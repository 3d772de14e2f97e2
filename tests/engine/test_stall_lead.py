"""The evidence window of a stall that began inside a sample (issue 16, mechanism 2).

SM activity is a mean over each sample's interval: a stall that begins
halfway through a 1 s sample reads as one partial sample (under half the
GPU's normal work) before the first idle one. At the tick's pace the stall
is dated at the first idle sample (a partial one is no poll of the fast
path), so it is a sample older than its dated onset; the evidence window
reaches back one iteration of the job's rhythm plus one sample from where
it began, not from where it was dated. Dated a sample late, the window
missed an XID that came two seconds before the GPUs stopped (held-out
tracegen plan 4263, ramp, 1 s: gpu_fault read as unknown).
"""

from __future__ import annotations

import math

from fabricwatch.engine import signals as sig
from fabricwatch.engine.incidents import Incident
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Sample

T0 = 1_700_000_000.0


def _node(stall_from: float, stall_to: float, xid_at: float | None) -> list[Sample]:
    """8 GPUs sampled every second (SM activity as the mean over the second
    before each sample, ~0.8 at work), idle from ``stall_from`` to
    ``stall_to``; GPU 3 logs XID 79 in the sample at ``xid_at`` (an XID
    counter as replay maps dcgm-exporter's last-XID gauge: zero one sample
    before, one event at it)."""
    out: list[Sample] = []
    for k in range(1, 1201):
        t = float(k)
        ts = T0 + t + 0.1
        busy = 1.0 - max(0.0, min(t, stall_to) - max(t - 1.0, stall_from))
        for g in range(8):
            sm = 0.002 + 0.8 * busy + 0.01 * math.sin(7 * t + g)
            out.append((ts, sig.GPU_SM, (str(g),), sm))
            out.append((ts, sig.GPU_MEM, (str(g),), 60e9))
            out.append((ts, sig.GPU_POWER, (str(g),), 80 + 600 * sm))
        if xid_at is not None and t in (xid_at - 1.0, xid_at):
            out.append((ts + 0.1, sig.GPU_XID, ("3", "79"), 1.0 if t == xid_at else 0.0))
    out.sort(key=lambda s: s[0])
    return out


def _incidents(samples: list[Sample]) -> list[Incident]:
    return [tr.incident for tr in run_replay(samples).incidents()]


def test_an_xid_two_seconds_before_a_stall_that_began_mid_sample_is_the_cause() -> None:
    # The GPUs stop at 1000.5 s: the sample at 1001 reads half their work,
    # the one at 1002 is the first idle one. The XID shows from 998 s, two
    # seconds and a half before they stopped.
    incs = _incidents(_node(1000.5, 1060.0, 998.0))
    assert [(i.kind, i.cause) for i in incs] == [("stall", "gpu_fault")], [i.summary for i in incs]
    # Dated at the first idle sample, as before.
    assert abs(incs[0].onset - (T0 + 1002.1)) <= 0.5


def test_an_xid_long_before_a_stall_is_no_evidence() -> None:
    # The window reaches back one sample more, not without bound: an XID
    # twenty seconds before the GPUs stopped explains nothing.
    incs = _incidents(_node(1000.5, 1060.0, 980.0))
    assert [(i.kind, i.cause) for i in incs] == [("stall", "unknown")], [i.summary for i in incs]
