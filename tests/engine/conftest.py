"""Helpers for the engine tests."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from fabricwatch.engine.incidents import Incident, IncidentTransition
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.testing.sim_scenarios import Injection, Scenario, TruthIncident, run_live


def final_incidents(transitions: Sequence[IncidentTransition]) -> list[Incident]:
    """The latest revision of each incident, by onset."""
    latest: dict[str, Incident] = {}
    for tr in transitions:
        latest[tr.incident.key] = tr.incident
    return sorted(latest.values(), key=lambda i: i.onset)


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
