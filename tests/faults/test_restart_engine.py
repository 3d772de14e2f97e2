"""Restart during a live fault: a restored incident is continued by its
stall, never falsely resolved (issue 17, item 1), over the engine and a real
incident database."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.engine import Engine, EngineSettings, IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.testing.sim_scenarios import Injection, Scenario, new_store, run_live


def _run_after_restart(
    db: IncidentDB, sc: Scenario, settings: EngineSettings
) -> list[tuple[float, IncidentTransition]]:
    store = new_store()
    engine = Engine(settings, store, "node1", db)
    out: list[tuple[float, IncidentTransition]] = []
    for t, batches in sc.steps():
        for coll, rs in batches:
            store.ingest(coll, rs, now=t)
        out.extend((t - sc.start_ts, tr) for tr in engine.tick(t, t))
    return out


@pytest.mark.parametrize(
    ("fault", "down"),
    [("pfc_storm", 5), ("pfc_storm", 40), ("checkpoint_write", 5), ("gpu_fault", 20)],
)
def test_restart_while_the_fault_holds_keeps_the_incident_open(
    tmp_path: Path, fault: str, down: int
) -> None:
    settings = EngineSettings()
    db = IncidentDB.in_state_dir(tmp_path)
    before = Scenario(duration=240, injections=[Injection(fault, 200, 200)], seed=3)
    trs = run_live(before, settings, db=db)
    kinds = [t.kind for t in trs]
    assert kinds[0] == "opened" and "resolved" not in kinds, kinds
    key = trs[0].incident.key
    hold_until = 120  # the fault goes on this long after the restart
    after = Scenario(
        duration=hold_until + 100,
        injections=[Injection(fault, 0, hold_until)],
        seed=4,
        start_ts=before.start_ts + before.duration + down,
    )
    seen = _run_after_restart(db, after, settings)
    resolved = [t for t, tr in seen if tr.kind == "resolved" and tr.incident.key == key]
    assert resolved, "the restored incident never resolved after the fault ended"
    # Resolved only after the fault ended plus end_after and resolve_hold: no false all-clear.
    assert resolved[0] >= hold_until - 1 + settings.resolve_hold
    assert not [tr for _, tr in seen if tr.kind == "opened"], "the stall paged twice"
    doc = db.get(key)
    assert doc is not None and doc["state"] == "resolved"
    # The stall after the restart counted as lost GPU-seconds of that incident.
    assert doc["gpu_seconds_lost"] > trs[0].incident.gpu_seconds + 60


def test_fault_cleared_while_down_resolves_after_the_hold(tmp_path: Path) -> None:
    settings = EngineSettings()
    db = IncidentDB.in_state_dir(tmp_path)
    before = Scenario(duration=240, injections=[Injection("pfc_storm", 200, 200)], seed=3)
    trs = run_live(before, settings, db=db)
    key = trs[0].incident.key
    quiet = Scenario(duration=150, seed=4, start_ts=before.start_ts + 300)
    seen = _run_after_restart(db, quiet, settings)
    resolved = [t for t, tr in seen if tr.kind == "resolved" and tr.incident.key == key]
    assert resolved and resolved[0] <= settings.resolve_hold + 5
    assert not [tr for _, tr in seen if tr.kind == "opened"]
