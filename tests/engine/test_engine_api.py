"""The engine surface the daemon uses: settings, metrics, persistence, restore."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.engine import Engine, EngineSettings, IncidentDB
from fabricwatch.engine.causes import Cause
from fabricwatch.errors import ConfigError
from fabricwatch.readings import MetricKind
from fabricwatch.settings import build
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_scenarios import Injection, Scenario, new_store, run_live


def test_settings_are_strict() -> None:
    s = build(EngineSettings, {"min_duration": "10s", "cost_per_gpu_hour": 2.5}, prefix="engine")
    assert s.min_duration == 10.0 and s.cost_per_gpu_hour == 2.5
    with pytest.raises(ConfigError, match=r"engine\.min_durtion: unknown key"):
        build(EngineSettings, {"min_durtion": 1}, prefix="engine")
    with pytest.raises(ConfigError, match=r"engine\.pfc_storm_ratio"):
        build(EngineSettings, {"pfc_storm_ratio": 2}, prefix="engine")
    with pytest.raises(ConfigError, match="must not exceed min_duration"):
        build(EngineSettings, {"min_duration": 1, "min_duration_with_evidence": 3}, prefix="engine")


def _feed(sc: Scenario, engine: Engine, store: SnapshotStore) -> None:
    for t, batches in sc.steps():
        for coll, rs in batches:
            store.ingest(coll, rs, now=t)
        engine.tick(t, t)


def test_metrics_and_cost_through_a_store() -> None:
    sc = Scenario(duration=400, injections=[Injection("pfc_storm", 200, 60)], seed=2)
    store = new_store()
    engine = Engine(EngineSettings(cost_per_gpu_hour=3.6), store, "n1")
    names = {m.name: m for m in engine.metrics()}
    assert names["fabricwatch_stall_cost"].kind is MetricKind.COUNTER
    assert names["fabricwatch_gpu_stalled"].labels == ("gpu", "cause")
    # the pipeline registers and ingests the engine's own readings
    store.register("engine", engine.metrics())
    stalled_seen = False
    for t, batches in sc.steps():
        for coll, rs in batches:
            store.ingest(coll, rs, now=t)
        engine.tick(t, t)
        res = store.ingest("engine", engine.readings(), now=t)
        assert res.rejected == 0
        flag = store.get("fabricwatch_gpu_stalled", ("0", "pfc_storm"))
        if flag is not None and flag.value == 1.0:
            stalled_seen = True
    assert stalled_seen
    opened = store.get("fabricwatch_incidents_opened", ("pfc_storm",))
    secs = store.get("fabricwatch_stall_gpu_seconds", ("pfc_storm",))
    cost = store.get("fabricwatch_stall_cost", ("pfc_storm",))
    assert opened is not None and opened.value == 1.0
    assert secs is not None and 8 * 55 <= secs.value <= 8 * 62
    assert cost is not None and cost.value == pytest.approx(secs.value * 3.6 / 3600)
    assert store.get("fabricwatch_incidents_opened", ("link_down",)).value == 0.0  # type: ignore[union-attr]
    # After the stall every (gpu, cause) series reads 0: nothing lingers at 1.
    stalled = [r for r in engine.readings() if r.name.endswith("stalled")]
    assert {r.labels[1] for r in stalled} == {c for c in Cause if c.on_node}
    assert all(r.value == 0.0 for r in stalled)
    flag = store.get("fabricwatch_gpu_stalled", ("0", "pfc_storm"))
    assert flag is not None and flag.value == 0.0


def test_no_cost_metric_without_price() -> None:
    engine = Engine(EngineSettings(), new_store(), "n1")
    assert "fabricwatch_stall_cost" not in {m.name for m in engine.metrics()}


def test_transitions_are_persisted_before_returned(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    seen: list[str] = []

    def check(conn: object, tr: object) -> None:
        seen.append("hook")

    db.add_transition_hook(check)
    sc = Scenario(duration=360, injections=[Injection("checkpoint_write", 200, 40)], seed=3)
    trs = run_live(sc, db=db)
    assert [t.kind for t in trs] == ["opened", "resolved"]
    assert len(seen) == 2
    doc = db.get(trs[0].incident.key)
    assert doc is not None and doc["state"] == "resolved" and doc["cause"] == "checkpoint_write"


def test_incident_left_open_by_a_previous_run_resolves(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    sc = Scenario(duration=230, injections=[Injection("pfc_storm", 200, 100)], seed=3)
    trs = run_live(sc, db=db)
    assert [t.kind for t in trs] == ["opened"]
    key = trs[0].incident.key
    # restart: a fresh engine over a quiet node
    quiet = Scenario(duration=120, seed=4, start_ts=sc.start_ts + 300)
    store = new_store()
    engine = Engine(EngineSettings(), store, "node1", db)
    _feed(quiet, engine, store)
    doc = db.get(key)
    assert doc is not None and doc["state"] == "resolved"
