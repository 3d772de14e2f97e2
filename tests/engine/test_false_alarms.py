"""False alarms: idle bits of different origins must not add up to a stall.

The background evaluation (bench/engine_eval.py) found stalls opened as
``unknown`` where a strong straggler (GPUs wait ~3 s of every ~8 s) met an
evaluation dip: wait, 1 s of work, dip, 1 s of work, wait = 10 s of episode
with no 10 s of continuous idleness. A stall without evidence must be one
unbroken job-level run of ``min_duration`` (stalls-and-anchors.md §6: runs).
"""

from __future__ import annotations

from fabricwatch.engine.scenarios import Injection, Scenario

from .conftest import run


def straggler_with_dips(offset: int, *extra: Injection) -> Scenario:
    inj = [Injection("straggler", 20, 300, magnitude=0.9)]
    inj += [Injection("eval_dip", 100 + offset + 40 * j, 3) for j in range(5)]
    return Scenario(duration=330, injections=[*inj, *extra], seed=4)


def test_straggler_waits_next_to_eval_dips_are_not_a_stall() -> None:
    # Offset 0 opened an "unknown" stall before the fix; the others vary the phase.
    for offset in (0, 3, 5, 7):
        incidents = run(straggler_with_dips(offset))
        assert incidents == [], (offset, [i.summary for i in incidents])


def test_a_real_hang_during_a_straggler_is_still_found() -> None:
    sc = straggler_with_dips(0, Injection("unknown", 300, 14))
    incidents = run(sc)
    assert [i.cause for i in incidents] == ["unknown"], [i.summary for i in incidents]
    assert abs(incidents[0].onset - (sc.start_ts + 300)) <= 3.0
