"""Replay stores only ENGINE_FAMILIES: it must cover everything the engine reads."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import MetricSpec
from fabricwatch.store import Series, SnapshotStore
from fabricwatch.testing.sim_scenarios import COLLECTOR_OF, Injection, Scenario, flatten, run_live


class SpyStore(SnapshotStore):
    """Records every family the engine looks up."""

    def __init__(self) -> None:
        super().__init__(history=600)
        self.read: set[str] = set()

    def get(self, name: str, labels: tuple[str, ...]) -> Series | None:
        self.read.add(name)
        return super().get(name, labels)

    def family(self, name: str) -> Sequence[Series]:
        self.read.add(name)
        return super().family(name)

    def __iter__(self) -> Iterator[Series]:
        self.read.add("<every family>")
        return super().__iter__()


def scenario() -> Scenario:
    # A stall (every scorer runs), a slowdown and a resolve.
    return Scenario(
        duration=300,
        injections=[
            Injection("unknown", 60, 30),
            Injection("ecn_congestion", 150, 60),
            Injection("gpu_fault", 240, 20, target=2, variant=4),
        ],
        seed=6,
    )


def test_engine_reads_only_engine_families() -> None:
    store = SpyStore()
    by_collector: dict[str, list[str]] = {}
    for name, coll in COLLECTOR_OF.items():
        by_collector.setdefault(coll, []).append(name)
    for coll, names in by_collector.items():
        store.register(coll, [sig.SIGNAL_SPECS[n] for n in names])
    engine = Engine(EngineSettings(), store, "n1")
    opened = 0
    for t, batches in scenario().steps():
        for coll, readings in batches:
            store.ingest(coll, readings, now=t)
        opened += sum(tr.kind == "opened" for tr in engine.tick(t, t))
        engine.readings()
    assert opened == 3
    assert store.read <= sig.ENGINE_FAMILIES, store.read - sig.ENGINE_FAMILIES
    # The NVLink throughput scorer reads the byte counters...
    assert {sig.NVLINK_TX, sig.NVLINK_RX} <= store.read
    # ...and what replay may skip (many of a node's samples) really is skipped.
    assert sig.NIC_RX_BYTES not in sig.ENGINE_FAMILIES
    assert sig.SW_RX_BYTES not in sig.ENGINE_FAMILIES


def test_replay_skips_unread_families_with_the_same_result() -> None:
    sc = scenario()
    buf = io.StringIO()
    write_openmetrics(flatten(sc), buf.write)
    mapper = Mapper()
    parse_openmetrics(io.StringIO(buf.getvalue()), mapper)
    samples = mapper.finish()
    res = run_replay(samples, node="n1")
    assert res.skipped == sum(s[1] not in sig.ENGINE_FAMILIES for s in samples) > 0
    assert res.readings + res.skipped == len(samples)
    live = run_live(sc, node="n1")
    assert [(t.kind, t.at, t.incident) for t in res.transitions] == [
        (t.kind, t.at, t.incident) for t in live
    ]


def test_collectors_export_engine_families_with_the_engines_label_order(
    tmp_path: Path,
) -> None:
    """The engine reads labels by position (``labels[0]`` is the GPU): a
    collector declaring an engine family with another kind, label order or
    counter width would be misread live while replay (which registers the
    engine's own specs) looked fine."""
    from dashboards.catalogue import declared_specs

    exported: dict[str, list[tuple[str, MetricSpec]]] = {}
    for collector, specs in declared_specs(tmp_path).items():
        for spec in specs:
            exported.setdefault(spec.name, []).append((collector, spec))
    for name in sorted(sig.ENGINE_FAMILIES):
        want = sig.SIGNAL_SPECS[name]
        assert exported.get(name), f"no collector exports {name}"
        for collector, spec in exported[name]:
            got = (spec.kind, spec.labels, spec.bits)
            assert got == (want.kind, want.labels, want.bits), (collector, name)
