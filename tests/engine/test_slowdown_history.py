"""How much history a throughput drop is judged against.

A shallow slowdown is found where a job's communication throughput over the
latest window falls below the earlier windows by more than their spread
(3 MADs). With four earlier windows the spread is itself mostly noise: a
job whose iteration is long against the window (a few exchanges per window)
read a spread of 40-120 % and a 30-40 % drop under heavy ECN marking went
unseen (seed 31344 of the sweep, ``two_jobs`` at 5 s: the second job's
all-reduce slowed for 60 s, no incident). Eight earlier windows where the
history holds them (two baseline windows, as before, where they are more).
"""

from __future__ import annotations

from fabricwatch.engine import tracegen as tg

from .conftest import replay_plan


def test_a_shallow_slowdown_of_a_job_with_a_noisy_history_is_found() -> None:
    spacing = 5.0
    plan, incidents = replay_plan(31344, "two_jobs", spacing)
    truth = next(
        t for t in plan.truth if t.cause == "ecn_congestion" and abs(t.onset - tg.T0 - 4351) < 1
    )
    found = [
        inc
        for inc in incidents
        if inc.onset <= truth.end + 2 * spacing
        and (inc.ended_at or inc.updated_at) >= truth.onset - spacing
        and set(inc.gpus) & set(truth.gpus)
    ]
    assert [(inc.kind, inc.cause, inc.culprit.key) for inc in found] == [
        ("slowdown", "ecn_congestion", truth.culprits[0])
    ]
    # Only the slowed job's GPUs.
    assert set(found[0].gpus) <= set(truth.gpus)
