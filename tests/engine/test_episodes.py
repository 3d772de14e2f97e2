"""Real-episode shapes (stalls-and-anchors.md §3, §6, §7): the Zhejiang
16:07:52Z job stall and the Llama-2-7B checkpoint stalls, with the switch
counter artefacts of the real data. The 16:07 stall is documented as "likely
storage/checkpoint (unconfirmed)"; its expected cause is checkpoint_write."""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from datetime import UTC, datetime

import pytest

from fabricwatch.engine import signals as sig
from fabricwatch.testing.sim_scenarios import (
    CounterArtefacts,
    LlamaCheckpoints,
    ZhejiangJobStall,
    llama_checkpoint_stalls,
    run_live,
    zhejiang_job_stall,
)

from .conftest import final_incidents, run

STALL_AT = datetime(2024, 5, 23, 16, 7, 52, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_zhejiang_job_stall_is_one_checkpoint_incident(seed: int) -> None:
    sc = zhejiang_job_stall(seed)
    [truth] = sc.truth()
    assert truth.onset == STALL_AT
    assert truth.end - truth.onset == 28
    trs = run_live(sc)
    incidents = final_incidents(trs)
    assert len(incidents) == 1, [i.summary for i in incidents]
    inc = incidents[0]
    assert (inc.cause, inc.culprit.key) == ("checkpoint_write", "storage:ckpt"), inc.summary
    assert abs(inc.onset - truth.onset) <= 2.0
    # ~0, partial, ~0 again: the two idle phases are one incident.
    assert inc.episodes == 2
    assert len(inc.gpus) == 8
    assert "write burst" in inc.evidence[0].text
    assert not [e for e in inc.evidence if e.cause in ("pfc_storm", "ecn_congestion")]
    opened = next(t for t in trs if t.kind == "opened")
    assert opened.at - truth.onset <= 2.0


def test_zhejiang_shape_follows_its_parameters() -> None:
    shape = ZhejiangJobStall(first_idle_s=(20.0, 20.0), second_idle_s=(10.0, 10.0))
    [inj] = [i for i in zhejiang_job_stall(5, shape).injections if i.what == "checkpoint_write"]
    assert [sec for sec, _ in inj.profile] == [20.0, 4.0, 10.0]  # longer than 28 s now
    assert inj.duration == 34
    assert inj.level(21.0) == shape.partial_level
    assert inj.level(30.0) == 0.0
    # The burst keeps the documented ratio to the median (1.1-1.4 vs 0.07).
    sc = zhejiang_job_stall(5, shape)
    assert 1.1 / 0.07 <= inj.write_rate / sc.storage_base <= 1.4 / 0.07


@pytest.mark.parametrize("rank0", [True, False])
def test_llama_checkpoint_stalls_are_four_checkpoint_incidents(rank0: bool) -> None:
    shape = LlamaCheckpoints(spacing_s=600.0, rank0=rank0)
    assert [round(s, 1) for s in shape.stalls()] == [32.9, 33.3, 33.6, 34.0]
    sc = llama_checkpoint_stalls(7, shape)
    truths = sc.truth()
    incidents = run(sc)
    assert [i.cause for i in incidents] == ["checkpoint_write"] * 4, [i.summary for i in incidents]
    for inc, truth in zip(incidents, truths, strict=True):
        assert inc.culprit.key == "storage:ckpt"
        assert abs(inc.onset - truth.onset) <= 2.0
        assert inc.ended_at is not None
        assert abs((inc.ended_at - inc.onset) - (truth.end - truth.onset)) <= 3.0


def test_real_spacing_is_500_iterations() -> None:
    sc = llama_checkpoint_stalls(1)
    onsets = [t.onset for t in sc.truth()]
    assert [b - a for a, b in itertools.pairwise(onsets)] == [22_900.0] * 3


def _switch_rows(sc_seed: int) -> list[tuple[float, float]]:
    sc = zhejiang_job_stall(sc_seed)
    rows: list[tuple[float, float]] = []
    for _, batches in sc.steps():
        for coll, readings in batches:
            if coll == "switch":
                rows += [(r.ts or 0.0, r.value) for r in readings if r.name == sig.SW_RX_BYTES]
    return rows


def test_counter_artefacts_of_the_real_data() -> None:
    art = CounterArtefacts()
    sc = zhejiang_job_stall(4)
    gaps = [i for i in sc.injections if i.what == "collector_gap"]
    assert all(i.target == 2 for i in gaps)  # the switch collector
    assert sum(i.duration == 250 for i in gaps) == 1
    assert len(gaps) == 1 + round(art.short_gaps_per_hour * sc.duration / 3600)
    rows = _switch_rows(4)
    deltas = [(b[1] - a[1], b[0] - a[0]) for a, b in itertools.pairwise(rows)]
    adjacent = [d for d, dt in deltas if dt < 1.5]
    zero = sum(d == 0 for d in adjacent) / len(adjacent)
    assert 0.30 <= zero <= 0.46, zero  # 38 % zero deltas
    # The first row after the long gap holds the whole accumulated delta.
    after_gap = max(deltas, key=lambda x: x[1])
    assert after_gap[1] >= 250
    per_second = statistics.median(d for d in adjacent if d > 0)
    assert after_gap[0] >= 0.5 * per_second * after_gap[1]


def test_artefacts_alone_are_not_incidents() -> None:
    sc = zhejiang_job_stall(6)
    quiet = dataclasses.replace(
        sc, injections=[i for i in sc.injections if i.what != "checkpoint_write"]
    )
    assert run(quiet) == []
