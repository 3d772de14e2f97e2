"""The evidence window of a slowdown found from window means.

A slowdown is dated to within a few samples of its onset; a window that
starts exactly at the dated onset let a one- or two-poll ECN burst there
hold on "half" of it and name an ``ecn_congestion`` slowdown where there was
none (held-out tracegen plans at 5 s spacing; the onset-only window of the
merged engine opened one each). The window reaches back up to three samples.
"""

from __future__ import annotations

import pytest

from fabricwatch.engine import tracegen as tg

from .conftest import replay_plan


@pytest.mark.parametrize(("seed", "variant"), [(90021, "ramp"), (90035, "noisy")])
def test_no_slowdown_from_a_short_burst_at_its_dated_onset(seed: int, variant: str) -> None:
    spacing = 5.0
    plan, incidents = replay_plan(seed, variant, spacing)
    spans = [(inc.onset, inc.ended_at or inc.updated_at, inc.cause) for inc in incidents]
    assert spans, "the trace's faults open incidents"
    for onset, end, cause in spans:
        # Every incident overlaps a true fault (the match rule of bench/engine_eval.py).
        assert any(onset <= t.end + 2 * spacing and end >= t.onset - spacing for t in plan.truth), (
            f"false alarm: {cause} at {onset - tg.T0:.1f} s"
        )
