"""A slowdown that is a stall's leading edge, a stale slowdown onset, a lagging culprit.

At 5-30 s spacing a sample is a window average: the sample in which the
GPUs stall reads as a deep drop of work, and the slowdown check opened an
``ecn_congestion`` slowdown on it a sample before the stall path saw an idle
sample, named after whatever fabric burst held then (an ECN burst on a port,
the other job's congestion on a node shared by two jobs). The stall opened a
second incident with the right cause; the first kept the wrong one. The
stall now continues that slowdown incident with its own verdict.

And after a stall, the slowdown check kept the GPUs it last found slow (and
since when) from before the stall: the next slowdown, of the other job, was
dated back to before that stall and named after the congestion that had
gone on all along.

Each plan below is one the robustness sweep (``bench/engine_eval.py``) got
wrong before, replayed through the real replay path.
"""

from __future__ import annotations

import pytest

from fabricwatch.engine import tracegen as tg
from fabricwatch.engine.incidents import Incident

from .conftest import replay_plan


def _near(plan: tg.Plan, inc: Incident, t: tg.Truth) -> bool:
    """The match rule of bench/engine_eval.py: the incident overlaps
    [onset - 1 sample, end + 2 samples] on the fault's GPUs."""
    sp = plan.spacing
    end = inc.ended_at or inc.updated_at
    return inc.onset <= t.end + 2 * sp and end >= t.onset - sp and bool(set(inc.gpus) & set(t.gpus))


@pytest.mark.parametrize(
    ("seed", "variant", "spacing", "at"),
    [
        (90007, "two_jobs", 15.0, 1608.5),  # the other job's ECN (storage_latency)
        (777, "standard", 15.0, 4438.0),  # an ECN burst on one port (storage_latency)
        (784, "two_jobs", 5.0, 5103.8),  # the other job's ECN (checkpoint_write)
    ],
)
def test_a_stall_continues_the_slowdown_opened_on_its_first_sample(
    seed: int, variant: str, spacing: float, at: float
) -> None:
    plan, incidents = replay_plan(seed, variant, spacing)
    truth = next(t for t in plan.truth if abs(t.onset - tg.T0 - at) < 1.0)
    assert truth.kind == "stall"
    near = [inc for inc in incidents if _near(plan, inc, truth)]
    assert len(near) == 1, [(i.kind, i.cause, i.onset - tg.T0) for i in near]
    inc = near[0]
    assert (inc.kind, inc.cause) == ("stall", truth.cause)
    assert inc.culprit.key in truth.culprits


def test_a_slowdown_after_a_stall_is_not_dated_to_before_it() -> None:
    plan, incidents = replay_plan(90007, "two_jobs", 5.0)
    stall = next(t for t in plan.truth if t.cause == "storage_latency")
    near = [inc for inc in incidents if _near(plan, inc, stall)]
    assert [(inc.kind, inc.cause) for inc in near] == [("stall", "storage_latency")]
    # Nor anywhere else: every incident of the trace overlaps a true fault.
    for inc in incidents:
        assert any(_near(plan, inc, t) for t in plan.truth), (inc.cause, inc.onset - tg.T0)


@pytest.mark.parametrize(
    ("seed", "variant", "spacing"),
    [
        # Named the right port, whose congestion then ended while the
        # slowdown still read; the other job's port, congested alongside all
        # along, took the culprit over.
        (784, "two_jobs", 30.0),
        # Named a port with a burst at the onset; the culprit's congestion
        # rose after it: it takes the incident over.
        (777, "standard", 1.0),
    ],
)
def test_a_slowdown_culprit_changes_only_to_a_port_whose_congestion_rose(
    seed: int, variant: str, spacing: float
) -> None:
    """The throughput window lags the fault's end: while the slowdown still
    reads, the named culprit's marks fade. A port already weighed against it
    when it was named does not take the incident over then; a port whose
    congestion rose since does."""
    plan, incidents = replay_plan(seed, variant, spacing)
    truth = next(t for t in plan.truth if t.cause == "ecn_congestion")
    near = [inc for inc in incidents if _near(plan, inc, truth)]
    assert [(inc.kind, inc.cause) for inc in near] == [("slowdown", "ecn_congestion")]
    assert near[0].culprit.key in truth.culprits
