"""Stragglers: a fail-slow node makes the others wait; fleet replay compares the job's
nodes with each other and names it, with the cause ``straggler``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.cli import main
from fabricwatch.fleet.stragglers import find_stragglers
from fabricwatch.testing.sim_fleet import all_transitions, build_cluster, node_samples
from tests.fleet.test_fleet_replay import write_nodes


@pytest.mark.parametrize(
    ("nodes", "jobs", "seed"),
    [(6, 2, 1), (9, 3, 2), (8, 2, 3)],
)
def test_the_slow_node_is_the_origin_over_sizes_and_severities(
    nodes: int, jobs: int, seed: int
) -> None:
    c = build_cluster(
        nodes=nodes, jobs=jobs, leaves=3, seed=seed, kinds=("straggler",),
        spacing=300, fault_s=200, warmup=120,
    )  # fmt: skip
    [truth] = c.truth()
    [doc] = find_stragglers(node_samples(c))
    assert doc["cause"] == "straggler" and doc["origin"]["node"] == truth.fault.target
    assert doc["job"] == truth.jobs[0] and doc["kind"] == "slowdown"
    assert truth.fault.target not in doc["waiting"] and len(doc["job_nodes"]) == nodes // jobs
    assert doc["gpu_seconds_lost"] > 0
    assert abs(doc["onset_unix"] - truth.onset) <= 60  # one window
    # No node engine opens an incident for it: only the comparison sees it.
    assert not any(tr.kind == "opened" for trs in all_transitions(c).values() for tr in trs)


def test_a_job_wide_hang_or_a_shared_pause_is_no_straggler() -> None:
    # A hang with no evidence (everyone idle together) and a GPU fault: nobody is calm
    # while the others wait.
    c = build_cluster(
        nodes=6, jobs=2, leaves=3, seed=4, kinds=("unknown", "gpu"),
        spacing=200, fault_s=60, warmup=120,
    )  # fmt: skip
    assert find_stragglers(node_samples(c)) == []


def test_fleet_replay_reports_the_straggler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = build_cluster(
        nodes=6, jobs=2, leaves=3, seed=5, kinds=("straggler", "gpu"),
        spacing=300, fault_s=200, warmup=120,
    )  # fmt: skip
    assert main(["replay", "--fleet", *write_nodes(c, tmp_path / "om"), "--json"]) == 0
    docs: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    slow = [d for d in docs if d["cause"] == "straggler"]
    [truth, gpu] = c.truth()
    assert [d["origin"]["node"] for d in slow] == [truth.fault.target]
    assert [d["origin"]["node"] for d in docs if d["cause"] == "gpu_fault"] == [gpu.fault.target]
