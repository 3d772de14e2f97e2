"""Job membership by co-activity where power is the only work signal
(issue 16, mechanism 4): a fast job's small power swings, in step on its
GPUs, set it apart from a slow job next to it; noise shared by no one does
not split a job."""

from __future__ import annotations

import math
from collections.abc import Callable

from fabricwatch.engine import signals as sig
from fabricwatch.engine.jobs import coactive_groups
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import new_store

T0 = 1_700_000_000.0


def _phase(t: float, period: float, comm: float) -> bool:
    """Whether ``t`` falls in the communication phase of a ``period`` s rhythm."""
    return (t % period) >= period - comm


def _power_store(duration: int, watts: Callable[[int, float], float]) -> list[str]:
    store = new_store()
    for k in range(1, duration + 1):
        t = float(k)
        rs = [Reading(sig.GPU_POWER, (str(g),), watts(g, t), ts=T0 + t) for g in range(8)]
        store.ingest("nvml", rs, now=T0 + t + 0.5)
    groups = coactive_groups(store, [str(g) for g in range(8)], T0, T0 + duration + 1)
    return sorted({",".join(sorted(v)) for v in groups.values()})


def test_a_fast_jobs_small_power_swings_still_set_it_apart() -> None:
    # Held-out seed 31344: power is the only work signal; job 1 (GPUs 0-3)
    # has an 8 s rhythm, job 2 (GPUs 4-7) a fast one whose 1 s power
    # averages move only ~4 %, in step on its four GPUs. Those small swings
    # are its rhythm (shared by its GPUs), not noise: two jobs, not one.
    def watts(g: int, t: float) -> float:
        if g < 4:
            return 300.0 if _phase(t, 8.0, 2.0) else 550.0
        beat = math.sin(2 * math.pi * t / 5.3) + 0.5 * math.sin(2 * math.pi * t / 2.9)
        return 480.0 * (1 + 0.03 * beat) + 2.0 * math.sin(13 * t + g)

    assert _power_store(120, watts) == ["0,1,2,3", "4,5,6,7"]


def test_gpus_with_only_noise_stay_one_job() -> None:
    # Flat work at 30 s averaging: nothing but noise, shared by no one.
    def watts(g: int, t: float) -> float:
        return 480.0 + 6.0 * math.sin(17.3 * t * (g + 1) + g)

    assert _power_store(120, watts) == ["0,1,2,3,4,5,6,7"]


def test_a_pair_short_of_shared_samples_does_not_join_two_jobs() -> None:
    # Cross-check seed 11015 (two_jobs, 5 s, after a collector gap): GPU 0
    # and GPU 5 shared under 8 sample times, every other pair across the
    # jobs was uncorrelated. That one pair without data merged the jobs,
    # and the second job's own rhythm read as the first's slowdown.
    def watts(g: int, t: float) -> float:
        if g < 4:
            return 300.0 if _phase(t, 8.0, 2.0) else 550.0
        return 320.0 if _phase(t, 11.0, 3.0) else 560.0

    store = new_store()
    for k in range(1, 121):
        t = float(k)
        # GPU 0 from 100 s on, GPU 5 on every third sample: 7 shared.
        gaps = {0: k < 100, 5: k % 3 != 0}
        gpus = [g for g in range(8) if not gaps.get(g, False)]
        rs = [Reading(sig.GPU_POWER, (str(g),), watts(g, t), ts=T0 + t) for g in gpus]
        store.ingest("nvml", rs, now=T0 + t + 0.5)
    groups = coactive_groups(store, [str(g) for g in range(8)], T0 + 60, T0 + 121)
    assert sorted({",".join(sorted(v)) for v in groups.values()}) == ["0,1,2,3", "4,5,6,7"]


def test_jobs_with_no_pair_of_shared_samples_are_one() -> None:
    # No pair across the two groups has shared sample times: nothing sets
    # them apart, so one job, as with no data at all.
    def watts(g: int, t: float) -> float:
        return 300.0 if _phase(t, 8.0 if g < 4 else 11.0, 2.0) else 550.0

    store = new_store()
    for k in range(1, 121):
        t = float(k)
        gpus = range(4) if k % 2 else range(4, 8)
        rs = [Reading(sig.GPU_POWER, (str(g),), watts(g, t), ts=T0 + t) for g in gpus]
        store.ingest("nvml", rs, now=T0 + t + 0.5)
    groups = coactive_groups(store, [str(g) for g in range(8)], T0, T0 + 121)
    assert sorted({",".join(sorted(v)) for v in groups.values()}) == ["0,1,2,3,4,5,6,7"]
