"""The detector state replay --jobs cuts through has a bounded history: a
detector started later holds, once warmed up, the very same state."""

from __future__ import annotations

import math
import random

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.stall import BASELINE_EPOCH, StallDetector
from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import new_store


@pytest.mark.parametrize("seed", range(4))
def test_a_detector_started_later_holds_the_same_baselines(seed: int) -> None:
    rnd = random.Random(seed)
    settings = EngineSettings()
    early, late = new_store(), new_store()
    first, second = StallDetector(settings), StallDetector(settings)
    start = 1_700_000_000.5 + rnd.randint(0, 300)
    join = 400 + rnd.randint(0, 400)  # the second detector starts this many ticks later
    warm = math.ceil(2 * BASELINE_EPOCH + settings.arm_after) + 5
    level = 0.8
    compared = 0
    slow_ticks = 0
    for k in range(join + warm + 1200):
        t = start + k
        if rnd.random() < 0.01:
            level = rnd.uniform(0.3, 0.9)  # phases: evaluation dips, slow spells
        rows = []
        for gpu in ("0", "1"):
            if rnd.random() < 0.1:
                continue  # a missing sample
            sm = max(0.0, level + rnd.gauss(0.0, 0.05))
            rows += [
                Reading(sig.GPU_SM, (gpu,), sm, ts=t - 0.2),
                Reading(sig.GPU_PROCS, (gpu,), 1.0, ts=t - 0.2),
            ]
        early.ingest("nvml", rows, now=t)
        first.observe(early, t, 1.0)
        if k >= join:
            late.ingest("nvml", rows, now=t)
            second.observe(late, t, 1.0)
        if k >= join + warm:
            for gpu in ("0", "1"):
                a, b = first.gpus[gpu], second.gpus[gpu]
                assert (a.baseline, a.next_baseline, a.slow, a.armed) == (
                    b.baseline,
                    b.next_baseline,
                    b.slow,
                    b.armed,
                ), f"GPU {gpu} differs {k - join} ticks after the second detector started"
                compared += 1
                slow_ticks += a.slow
    assert compared > 2000
    assert slow_ticks > 0, "the phases should have made the GPUs slow at times"
