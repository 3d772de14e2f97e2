"""The stall detector reuses series handles only while the store holds them."""

from __future__ import annotations

from fabricwatch.engine import signals as sig
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.engine.stall import StallDetector
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_scenarios import new_store


def feed(store: SnapshotStore, t: float, gpus: dict[str, float]) -> None:
    rs = []
    for gpu, sm in gpus.items():
        rs.append(Reading(sig.GPU_SM, (gpu,), sm, ts=t))
        rs.append(Reading(sig.GPU_PROCS, (gpu,), 1.0, ts=t))
    store.ingest("nvml", rs, now=t)


def work(det: StallDetector) -> dict[str, float | None]:
    return {g: st.work for g, st in det.gpus.items()}


def test_replaced_series_and_new_gpus_are_picked_up() -> None:
    store = new_store()
    det = StallDetector(EngineSettings())
    t = 0.0
    for _ in range(20):
        t += 1.0
        feed(store, t, {"0": 0.8, "1": 0.8})
        det.observe(store, t, 1.0)
    assert det.gpus["0"].armed
    assert [st.idle for st in det.gpus.values()] == [False, False]
    # Every series goes stale and is dropped; GPU 0 comes back idle (new
    # series objects), GPU 2 appears.
    t += 400.0
    assert store.expire(t) > 0
    feed(store, t, {"0": 0.0, "2": 0.7})
    det.observe(store, t, 1.0)
    assert work(det) == {"0": 0.0, "1": 0.8, "2": 0.7}  # GPU 1: no data, state kept
    assert [st.idle for st in det.gpus.values()] == [True, False, False]
    # Same set of series as the last tick: values still flow through.
    t += 1.0
    feed(store, t, {"0": 0.9, "2": 0.0})
    det.observe(store, t, 1.0)
    assert work(det) == {"0": 0.9, "1": 0.8, "2": 0.0}
