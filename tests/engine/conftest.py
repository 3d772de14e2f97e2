"""Helpers for the engine tests."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from fabricwatch.engine import tracegen as tg
from fabricwatch.engine.incidents import Incident, IncidentTransition
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.testing.sim_scenarios import Injection, Scenario, TruthIncident, run_live


def final_incidents(transitions: Sequence[IncidentTransition]) -> list[Incident]:
    """The latest revision of each incident, by onset."""
    latest: dict[str, Incident] = {}
    for tr in transitions:
        latest[tr.incident.key] = tr.incident
    return sorted(latest.values(), key=lambda i: i.onset)


def replay_plan(seed: int, variant: str, spacing: float) -> tuple[tg.Plan, list[Incident]]:
    """One 2 h plan of the robustness sweep (``bench/engine_eval.py``, which
    gives each plan's seed, variant and spacing) replayed through the real
    replay path: the plan with its truth, and the latest revision of each
    incident."""
    plan = tg.plan_for(seed, spacing, variant, hours=2.0)
    buf = io.StringIO()
    tg.generate(plan, buf.write)
    mapper = Mapper()
    parse_openmetrics(io.StringIO(buf.getvalue()), mapper, source=f"plan-{seed}")
    res = run_replay(mapper.finish(), EngineSettings(), node=f"node{seed}")
    return plan, final_incidents(res.transitions)


def one_fault(
    what: str,
    *,
    variant: int = 0,
    duration: float = 60.0,
    seed: int = 3,
    magnitude: float = 0.5,
    **kw: object,
) -> tuple[Scenario, TruthIncident]:
    """A 360 s scenario with one fault at t=200 s."""
    sc = Scenario(
        duration=360,
        injections=[Injection(what, 200, duration, magnitude=magnitude, target=3, variant=variant)],
        seed=seed,
        **kw,  # type: ignore[arg-type]
    )
    return sc, sc.truth()[0]


@pytest.fixture
def settings() -> EngineSettings:
    return EngineSettings()


def run(sc: Scenario, settings: EngineSettings | None = None) -> list[Incident]:
    return final_incidents(run_live(sc, settings))
