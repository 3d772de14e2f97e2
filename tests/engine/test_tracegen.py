"""The sweep's trace generator (:mod:`fabricwatch.engine.tracegen`) keeps its
ground truth consistent with what it writes."""

from __future__ import annotations

from fabricwatch.engine import tracegen as tg


def _event(start: float, duration: float) -> tg._Event:
    return tg._Event("link_down", 0, start, duration, 0, 1.0)


def test_a_job_restart_is_moved_clear_of_every_fault() -> None:
    # A restart releases the job's memory: its GPUs are in no job, so a
    # fault around it stalls nothing the truth may call a stall (sweep plans
    # 31379 slow_refresh 15 s and 90035 noisy 30 s drew one into a fault).
    events = [_event(1000.0, 300.0), _event(3000.0, 100.0)]
    assert tg._clear_of(events, 200.0, 7200.0) == 200.0  # clear already: kept
    for start in (900.0, 1100.0, 1650.0, 2900.0, 3300.0):
        moved = tg._clear_of(events, start, 7200.0)
        for ev in events:
            assert moved + 60.0 < ev.start - 120.0 or moved > ev.start + ev.duration + 400.0
    # Into the longest stretch without a fault: after the last one here.
    assert tg._clear_of(events, 1100.0, 7200.0) > 3500.0
