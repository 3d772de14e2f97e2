"""Running a scenario as the daemon would: store registration, live feed, flat readings."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_scenarios._sim import Scenario, Step

COLLECTOR_OF: Mapping[str, str] = {
    name: (
        "nvml"
        if name.startswith(("fabricwatch_gpu_",))
        else "rdma"
        if name.startswith("fabricwatch_nic_")
        else "switch"
        if name.startswith("fabricwatch_switch_")
        else "storage"
    )
    for name in sig.SIGNAL_SPECS
}
"""Which simulated collector owns each family (they register separately, as live)."""


def new_store(history: int = 600) -> SnapshotStore:
    """A snapshot store with every signal family registered by its simulated collector."""
    store = SnapshotStore(history=history)
    by_collector: dict[str, list[str]] = {}
    for name, coll in COLLECTOR_OF.items():
        by_collector.setdefault(coll, []).append(name)
    for coll, names in sorted(by_collector.items()):
        store.register(coll, [sig.SIGNAL_SPECS[nm] for nm in names])
    return store


def run_live(
    scenario: Scenario,
    settings: EngineSettings | None = None,
    *,
    node: str = "node1",
    db: IncidentDB | None = None,
    steps: Iterable[Step] | None = None,
) -> list[IncidentTransition]:
    """Feed a scenario through a snapshot store into an engine, as the daemon would.

    ``steps`` replaces ``scenario.steps()`` (a multi-node harness rewrites them:
    the job's key, symptoms spread from other nodes)."""
    settings = settings or EngineSettings()
    store = new_store()
    engine = Engine(settings, store, node, db)
    out: list[IncidentTransition] = []
    last_expire = -math.inf
    for t, batches in scenario.steps() if steps is None else steps:
        for coll, readings in batches:
            store.ingest(coll, readings, now=t)
        if t - last_expire >= 60:
            store.expire(t)
            last_expire = t
        out.extend(engine.tick(t, t))
    return out


def flatten(scenario: Scenario) -> Iterable[Reading]:
    """All readings of a scenario in time order (for writing replay files)."""
    for _, batches in scenario.steps():
        for _, readings in batches:
            yield from readings
