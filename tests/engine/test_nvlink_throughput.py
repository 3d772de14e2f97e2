"""NVLink throughput collapse: one GPU's link standing out is evidence, a
node-wide collapse (every stall looks like that) is not."""

from __future__ import annotations

import pytest

from fabricwatch.engine import Engine
from fabricwatch.engine import signals as sig
from fabricwatch.engine.evidence import ScoreContext, score_nvlink_throughput
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.readings import Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.testing.sim_scenarios import (
    Injection,
    NodeSpec,
    Scenario,
    new_store,
    nvlink_collapse_lead,
    run_live,
)

from .conftest import final_incidents

NVLINK_BYTES = (sig.NVLINK_TX, sig.NVLINK_RX)


def collapse(
    *, seed: int, magnitude: float, links: int = 1, variant: int = 3, **kw: object
) -> Scenario:
    return Scenario(
        duration=300,
        injections=[
            Injection("nvlink_degraded", 200, 40, magnitude=magnitude, target=5, variant=variant)
        ],
        seed=seed,
        node=NodeSpec(links_per_gpu=links),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("seed", "magnitude", "links", "variant", "culprit"),
    [
        (3, 0.0, 1, 3, "gpu:5:link:0"),  # -60 %
        (4, 0.5, 1, 7, "gpu:5:link:0"),
        (5, 1.0, 1, 3, "gpu:5:link:0"),  # ~0
        (6, 0.3, 4, 3, "gpu:5:link:3"),  # one of four links
        (7, 0.9, 4, 7, "gpu:5:link:3"),
    ],
)
def test_collapse_without_link_down_or_errors_is_nvlink(
    seed: int, magnitude: float, links: int, variant: int, culprit: str
) -> None:
    sc = collapse(seed=seed, magnitude=magnitude, links=links, variant=variant)
    truth = sc.truth()[0]
    trs = run_live(sc)
    incidents = final_incidents(trs)
    assert len(incidents) == 1, [i.summary for i in incidents]
    inc = incidents[0]
    assert inc.cause == "nvlink_degraded", inc.summary
    assert inc.culprit.key == culprit
    assert culprit in truth.culprits
    # Only the throughput families speak: no link-down, error burst or XID.
    assert {e.family for e in inc.evidence if e.cause == "nvlink_degraded"} <= set(NVLINK_BYTES)
    assert "before the stall" in inc.evidence[0].text
    assert abs(inc.onset - truth.onset) <= 2.0
    opened = next(t for t in trs if t.kind == "opened")
    assert opened.at - truth.onset <= 2.0
    assert opened.incident.cause == "nvlink_degraded"


def test_truth_onset_is_the_hang_after_the_collapse() -> None:
    sc = collapse(seed=1, magnitude=1.0)
    assert nvlink_collapse_lead(sc.injections[0]) == 5
    assert sc.truth()[0].onset == sc.start_ts + 205
    assert nvlink_collapse_lead(Injection("nvlink_degraded", 0, 10, variant=2)) == 0


def test_collapse_found_with_power_as_the_work_signal() -> None:
    sc = collapse(seed=8, magnitude=0.6, families_off=frozenset({"sm"}))
    [inc] = final_incidents(run_live(sc))
    assert (inc.cause, inc.culprit.key) == ("nvlink_degraded", "gpu:5:link:0")


@pytest.mark.parametrize("cause", ["checkpoint_write", "pfc_storm", "storage_latency", "unknown"])
@pytest.mark.parametrize("seed", [21, 22, 23])
def test_node_wide_collapse_of_a_stall_is_no_nvlink_evidence(cause: str, seed: int) -> None:
    # Every GPU's NVLink goes to ~0 in these stalls: nothing may point at NVLink.
    sc = Scenario(
        duration=300,
        injections=[Injection(cause, 200, 40, magnitude=0.5, variant=seed % 2)],
        seed=seed,
        node=NodeSpec(links_per_gpu=2),
    )
    incidents = final_incidents(run_live(sc))
    assert [i.cause for i in incidents] == [cause]
    assert not [e for e in incidents[0].evidence if e.family in NVLINK_BYTES]


def test_healthy_and_confounders_with_many_links_stay_quiet() -> None:
    sc = Scenario(
        duration=900,
        injections=[
            Injection("eval_dip", 200, 3),
            Injection("eval_phase", 400, 120, magnitude=0.4),
            Injection("collector_gap", 600, 5, target=0),
            Injection("job_restart", 700, 120),
        ],
        seed=31,
        node=NodeSpec(links_per_gpu=4),
    )
    assert run_live(sc) == []


# -- the scorer on hand-made stores ----------------------------------------


def _feed(
    store: SnapshotStore,
    gpus: int,
    rate: dict[str, float],
    sm: dict[str, float],
    *,
    seconds: range,
    link: str = "0",
) -> None:
    totals: dict[str, float] = {}
    for k in seconds:
        rs: list[Reading] = []
        for i in range(gpus):
            g = str(i)
            totals[g] = totals.get(g, 0.0) + rate.get(g, rate["*"]) * (k >= 1)
            rs.append(Reading(sig.NVLINK_TX, (g, link), totals[g], ts=float(k)))
            rs.append(Reading(sig.GPU_SM, (g,), sm.get(g, sm["*"]), ts=float(k)))
        store.ingest("nvml", rs, now=float(k))


def _score(store: SnapshotStore, onset: float) -> list[str]:
    ctx = ScoreContext(store, EngineSettings(), onset, onset + 2)
    return [e.culprit.key for e in score_nvlink_throughput(ctx)]


def test_scorer_one_link_vs_whole_node() -> None:
    busy = {"*": 20e9}
    store = new_store()
    _feed(store, 4, busy, {"*": 0.8}, seconds=range(100))
    _feed(store, 4, {"*": 20e9, "2": 0.0}, {"*": 0.8}, seconds=range(100, 103))
    _feed(store, 4, {"*": 0.0}, {"*": 0.0}, seconds=range(103, 106))
    assert _score(store, 103.0) == ["gpu:2:link:0"]

    # Every GPU's traffic fell before the SM stall: a node-wide change.
    store = new_store()
    _feed(store, 4, busy, {"*": 0.8}, seconds=range(100))
    _feed(store, 4, {"*": 0.0}, {"*": 0.8}, seconds=range(100, 106))
    assert _score(store, 103.0) == []

    # The GPU itself stopped computing: a GPU fault, not its link.
    store = new_store()
    _feed(store, 4, busy, {"*": 0.8}, seconds=range(100))
    _feed(store, 4, {"*": 20e9, "2": 0.0}, {"*": 0.8, "2": 0.0}, seconds=range(100, 103))
    assert _score(store, 103.0) == []

    # A lone GPU has no peers to stand out from.
    store = new_store()
    _feed(store, 1, busy, {"*": 0.8}, seconds=range(100))
    _feed(store, 1, {"*": 0.0}, {"*": 0.8}, seconds=range(100, 103))
    assert _score(store, 103.0) == []

    # Links that carried (almost) nothing cannot collapse.
    store = new_store()
    _feed(store, 4, {"*": 1e6}, {"*": 0.8}, seconds=range(100))
    _feed(store, 4, {"*": 1e6, "2": 0.0}, {"*": 0.8}, seconds=range(100, 103))
    assert _score(store, 103.0) == []


def test_scorer_gpu_total_as_dcgm_reports_it() -> None:
    # dcgm-exporter gives one NVLink total per GPU (replay maps it to link="total").
    store = new_store()
    _feed(store, 8, {"*": 90e9}, {"*": 0.7}, seconds=range(100), link="total")
    _feed(store, 8, {"*": 90e9, "6": 30e9}, {"*": 0.7}, seconds=range(100, 103), link="total")
    ctx = ScoreContext(store, EngineSettings(), 103.0, 104.0)
    [ev] = score_nvlink_throughput(ctx)
    assert (ev.cause, ev.culprit.key, ev.culprit.kind) == ("nvlink_degraded", "gpu:6", "gpu")
    assert ev.score >= EngineSettings().strong_evidence
    assert "GPU 6 NVLink transmit collapsed to 33%" in ev.text


@pytest.mark.parametrize("seed", [2, 6, 8, 10])
def test_straggler_waits_in_an_evaluation_phase_are_not_a_collapsed_link(seed: int) -> None:
    # Found by engine_eval's background (seed 100005): GPUs idle together
    # every few seconds, and with samples missing one GPU's baseline median
    # or its gap-spanning rate made it look collapsed next to its peers.
    sc = Scenario(
        duration=330,
        injections=[
            Injection("straggler", 100, 230, magnitude=0.38),
            Injection("eval_phase", 174, 109, magnitude=0.19),
            Injection("eval_dip", 228, 2),
        ],
        seed=seed,
    )
    assert run_live(sc) == []


def test_half_the_gpus_falling_together_is_a_phase_not_a_link() -> None:
    # Found by engine_eval on held-out seed 31337 (concurrent variant): before
    # an evaluation dip half of the node's GPUs were in their compute phase
    # (NVLink at a third of its mean) while the other half still talked;
    # each "collapsed" GPU stood out from a peer median set by the other half.
    store = new_store()
    _feed(store, 8, {"*": 20e9}, {"*": 0.8}, seconds=range(100), link="total")
    low = {"*": 20e9, **{str(g): 6e9 for g in range(4)}}
    _feed(store, 8, low, {"*": 0.8}, seconds=range(100, 103), link="total")
    assert _score(store, 103.0) == []
    # One GPU alone at that level is still its links.
    store = new_store()
    _feed(store, 8, {"*": 20e9}, {"*": 0.8}, seconds=range(100), link="total")
    _feed(store, 8, {"*": 20e9, "1": 6e9}, {"*": 0.8}, seconds=range(100, 103), link="total")
    assert _score(store, 103.0) == ["gpu:1"]


def test_links_by_gpu_follow_the_family_as_links_come_and_go() -> None:
    """The slowdown check's grouping of per-link NVLink series by GPU is kept
    between checks: regrouped when a link appears, expires or comes back as
    a new series, never a stale group."""
    store = new_store()
    engine = Engine(EngineSettings(), store, "n1")

    def feed(t: float, links: dict[str, list[str]]) -> None:
        rows = [
            Reading(sig.NVLINK_TX, (gpu, link), 1e9 * t, t)
            for gpu, names in links.items()
            for link in names
        ]
        store.ingest("nvml", rows, now=t)

    def grouped() -> dict[str, list[tuple[str, ...]]]:
        return {g: [x.labels for x in xs] for g, xs in engine._links_by_gpu().items()}

    feed(100.0, {"0": ["0", "1"], "1": ["0"]})
    assert grouped() == {"0": [("0", "0"), ("0", "1")], "1": [("1", "0")]}
    assert engine._links_by_gpu() is engine._links_by_gpu()  # unchanged family: kept
    feed(101.0, {"0": ["0", "1"], "1": ["0", "1"]})
    assert grouped()["1"] == [("1", "0"), ("1", "1")]
    # GPU 0's links go silent and expire; GPU 1's stay.
    for t in range(102, 500, 50):
        feed(float(t), {"1": ["0", "1"]})
        store.expire(float(t))
    assert grouped() == {"1": [("1", "0"), ("1", "1")]}
    before = engine._links_by_gpu()["1"]
    # Link 1 of GPU 1 expires and comes back: a new series object under the same labels.
    for t in range(500, 900, 50):
        feed(float(t), {"1": ["0"]})
        store.expire(float(t))
    feed(900.0, {"1": ["0", "1"]})
    after = engine._links_by_gpu()["1"]
    assert [x.labels for x in after] == [("1", "0"), ("1", "1")]
    assert after[1] is not before[1] and after[1] is store.get(sig.NVLINK_TX, ("1", "1"))
