"""Replay stores only ENGINE_FAMILIES: it must cover everything the engine reads."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

from fabricwatch.engine import signals as sig
from fabricwatch.engine.core import Engine
from fabricwatch.engine.replay import Mapper, parse_openmetrics, run_replay, write_openmetrics
from fabricwatch.engine.scenarios import COLLECTOR_OF, Injection, Scenario, flatten, run_live
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.store import Series, SnapshotStore


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
    assert sig.NIC_TX_BYTES not in sig.ENGINE_FAMILIES
    assert sig.SW_TX_BYTES not in sig.ENGINE_FAMILIES


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
