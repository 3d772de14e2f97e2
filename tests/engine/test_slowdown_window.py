"""The evidence window of a slowdown found from window means.

A slowdown is dated to within a few samples of its onset; a window that
starts exactly at the dated onset let a one- or two-poll ECN burst there
hold on "half" of it and name an ``ecn_congestion`` slowdown where there was
none (held-out tracegen plans at 5 s spacing; the onset-only window of the
merged engine opened one each). The window reaches back up to three samples.
"""

from __future__ import annotations

import io

import pytest

from fabricwatch.engine import tracegen as tg
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics
from fabricwatch.engine.settings import EngineSettings


@pytest.mark.parametrize(("seed", "variant"), [(90021, "ramp"), (90035, "noisy")])
def test_no_slowdown_from_a_short_burst_at_its_dated_onset(seed: int, variant: str) -> None:
    spacing = 5.0
    plan = tg.plan_for(seed, spacing, variant, hours=2.0)
    buf = io.StringIO()
    tg.generate(plan, buf.write)
    mapper = Mapper()
    parse_openmetrics(io.StringIO(buf.getvalue()), mapper, source=f"plan-{seed}")
    res = run_replay(mapper.finish(), EngineSettings(), node=f"node{seed}")
    spans: dict[str, tuple[float, float, str]] = {}
    for tr in res.transitions:
        inc = tr.incident
        spans[inc.key] = (inc.onset, inc.ended_at or inc.updated_at, inc.cause)
    assert spans, "the trace's faults open incidents"
    for onset, end, cause in spans.values():
        # Every incident overlaps a true fault (the match rule of bench/engine_eval.py).
        assert any(onset <= t.end + 2 * spacing and end >= t.onset - spacing for t in plan.truth), (
            f"false alarm: {cause} at {onset - tg.T0:.1f} s"
        )
