"""``replay --jobs``: spans in worker processes give exactly the single-pass result."""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.engine.replay import ReplayResult, run_replay
from fabricwatch.engine.replay_jobs import (
    Split,
    _cuts,
    _run_forked,
    run_nodes,
    run_parallel,
    usable_cores,
)
from fabricwatch.engine.replay_mapping import Mapper, Sample
from fabricwatch.engine.replay_openmetrics import parse_openmetrics, write_openmetrics
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten


def _samples(sc: Scenario) -> list[Sample]:
    buf = io.StringIO()
    write_openmetrics(flatten(sc), buf.write)
    m = Mapper()
    parse_openmetrics(io.StringIO(buf.getvalue()), m, source="t.om")
    return m.finish()


def _scenario(duration: int, starts: list[int], seed: int) -> Scenario:
    kinds = ("pfc_storm", "checkpoint_write", "ecn_congestion", "gpu_fault", "nvlink_degraded")
    inj = [Injection(kinds[i % len(kinds)], t, 40) for i, t in enumerate(starts)]
    return Scenario(duration=duration, injections=inj, seed=seed)


@pytest.fixture(scope="module")
def long_run() -> list[Sample]:
    # Faults spread over 80 minutes, some across the cuts of the short split
    # below; the default split makes one cut (tick 2550; 80 minutes hold no
    # more spans of its margins).
    return _samples(_scenario(4800, [300, 1180, 1580, 2390, 3190, 3590, 4300], seed=3))


@pytest.fixture(scope="module")
def long_run_one_pass(long_run: list[Sample]) -> ReplayResult:
    # The reference every split of the long run is held to: replayed once for them all.
    return run_replay(long_run, node="n1")


@pytest.mark.parametrize("jobs", [2, 3, 4])
def test_parallel_replay_equals_one_pass(
    long_run: list[Sample], long_run_one_pass: ReplayResult, jobs: int
) -> None:
    one = long_run_one_pass
    assert len(one.incidents()) >= 5
    par = run_parallel(long_run, node="n1", jobs=jobs)
    assert par.transitions == one.transitions
    assert (par.ticks, par.readings, par.rejected, par.skipped) == (
        one.ticks,
        one.readings,
        one.rejected,
        one.skipped,
    )
    assert (par.start, par.end) == (one.start, one.end)
    assert par.spans == par.planned >= 2, "every cut should have been kept: not parallel"


def test_cuts_through_incidents_and_a_too_short_warmup_still_equal_one_pass(
    long_run: list[Sample], long_run_one_pass: ReplayResult
) -> None:
    # A 20 s warm-up cannot know the job or the open incident: every such cut
    # must be detected and its spans replayed as one.
    one = long_run_one_pass
    par = run_parallel(long_run, node="n1", jobs=4, split=Split(warmup=20.0, verify=60.0))
    assert par.transitions == one.transitions
    assert par.readings == one.readings and par.ticks == one.ticks
    assert par.spans < 4, "some cut should have been found to disagree"


def test_short_inputs_and_one_job_take_the_single_pass() -> None:
    samples = _samples(_scenario(400, [100], seed=4))
    one = run_replay(samples, node="n1")
    assert run_parallel(samples, node="n1", jobs=4).transitions == one.transitions
    assert run_parallel(samples, node="n1", jobs=1).transitions == one.transitions
    assert run_parallel([], node="n1", jobs=2).transitions == []
    assert usable_cores() >= 1


def test_replay_command_with_jobs_prints_what_one_process_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = _scenario(5800, [700, 2900, 2950, 5000], seed=6)
    path = tmp_path / "node.om"
    with path.open("w") as f:
        write_openmetrics(flatten(sc), f.write)
    outputs = []
    for jobs in ("1", "2"):
        assert main(["replay", str(path), "--json", "--node", "n1", "--jobs", jobs]) == 0
        outputs.append(capsys.readouterr().out)
    assert json.loads(outputs[0]) and outputs[0] == outputs[1]
    assert main(["replay", str(path), "--jobs", "0"]) == 2
    assert "--jobs must be 1 or more" in capsys.readouterr().err


def _same(a: ReplayResult, b: ReplayResult) -> None:
    assert a.transitions == b.transitions
    assert a.open_at_end == b.open_at_end
    assert (a.ticks, a.readings, a.rejected, a.skipped, a.start, a.end) == (
        b.ticks,
        b.readings,
        b.rejected,
        b.skipped,
        b.start,
        b.end,
    )


@pytest.mark.parametrize("jobs", [2, 3])
def test_replay_of_several_nodes_split_by_node_equals_each_nodes_single_pass(jobs: int) -> None:
    # Different faults, lengths and seeds per node: a result handed to the
    # wrong node, or a node's engine seeing another node's samples, differs.
    by_node = {
        "n1": _samples(_scenario(900, [200, 600], seed=7)),
        "n2": _samples(_scenario(1200, [400], seed=8)),
        "n3": _samples(_scenario(700, [150, 450], seed=9)),
        "n4": [],
    }
    par = run_nodes(by_node, jobs=jobs)
    assert list(par) == ["n1", "n2", "n3", "n4"]
    for node, samples in by_node.items():
        one = run_replay(samples, node=node)
        _same(par[node], one)
        assert all(tr.incident.node == node for tr in par[node].transitions)
    assert sum(len(r.incidents()) for r in par.values()) >= 3


def test_replay_of_one_node_is_split_by_time() -> None:
    # One node goes to the time split (whose equality with one pass the
    # tests above show), with the caller's split and jobs.
    samples = _samples(_scenario(3400, [300, 1650, 2900], seed=10))
    split = Split(warmup=600.0, verify=240.0)
    par = run_nodes({"n1": samples}, jobs=2, split=split)
    _same(par["n1"], run_parallel(samples, node="n1", jobs=2, split=split))
    assert par["n1"].spans == 2, "one node's input should have been cut in time"


def _pid() -> int:
    return os.getpid()


def _fail() -> int:
    msg = "the span in this process failed"
    raise ValueError(msg)


def _sleep() -> int:
    time.sleep(60)
    return os.getpid()


def test_this_process_runs_the_last_call_when_all_fit() -> None:
    # One fork fewer: with as many calls as jobs, the last is not forked.
    pids = _run_forked([_pid, _pid, _pid], jobs=3)
    assert pids[-1] == os.getpid()
    assert len({*pids[:-1]} - {os.getpid()}) == 2
    # More calls than jobs: every call in a worker, as before.
    assert os.getpid() not in _run_forked([_pid, _pid, _pid], jobs=2)


def test_a_failing_call_in_this_process_stops_the_workers() -> None:
    with pytest.raises(ValueError, match="span in this process"):
        _run_forked([_sleep, _fail], jobs=2)
    assert multiprocessing.active_children() == []


def test_cuts_through_slowdowns_verify_on_a_long_run() -> None:
    # Slowdowns across cuts: their lost GPU-seconds integrate the GPUs' work
    # baselines, which a span warmed up by the default split reproduces bit
    # for bit only when they remember a bounded history (two epochs). With an
    # EWMA over the whole run a cut either failed (one pass again) or, where
    # the discrete state agreed at the cut, passed with baselines that differ
    # and gave other GPU-seconds later on.
    kinds = ("pfc_storm", "checkpoint_write", "ecn_congestion", "gpu_fault", "nvlink_degraded")
    starts = range(500, 5000, 700)
    sc = Scenario(
        duration=5400,
        injections=[Injection(kinds[(i + 2) % 5], t, 40) for i, t in enumerate(starts)],
        seed=12,
    )
    samples = _samples(sc)
    one = run_replay(samples, node="n1")
    assert any(tr.incident.kind == "slowdown" for tr in one.transitions)
    par = run_parallel(samples, node="n1", jobs=3)
    _same(par, one)
    assert par.spans == par.planned == 3, "every cut should verify: each span warmed up enough"


@pytest.mark.parametrize(("n", "count"), [(3600, 2), (4801, 3), (7200, 4), (86400, 16)])
def test_spans_run_equal_work(n: int, count: int) -> None:
    # The first span has no warm-up and the last no verification: each owns
    # more ticks than the inner ones, so that every worker runs as many ticks.
    warm, verify = 600, 300
    cuts = _cuts(n, count, warm, verify)
    assert cuts[0] == 0 and cuts[-1] == n and cuts == sorted(cuts)
    work = [
        (b - a) + (warm if k > 0 else 0) + (verify if k < count - 1 else 0)
        for k, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    assert max(work) - min(work) <= 1


@pytest.mark.parametrize("warmup", [600.0, 630.0])
def test_cuts_verify_whatever_the_warmup_s_phase_to_the_minute(warmup: float) -> None:
    # The slowdown check measures the job's rhythm once a minute and checks
    # once a sample. Chained from the engine's first check, a span started
    # fresh at another phase of the minute (a 630 s warm-up) measured the
    # rhythm at other ticks, over other windows, got another figure, and the
    # cut failed (one pass again) wherever no stall had re-timed the chain
    # before it; on the absolute clock every span measures at the ticks one
    # pass measures at.
    samples = _samples(_scenario(4800, [300, 4300], seed=3))
    one = run_replay(samples, node="n1")
    par = run_parallel(samples, node="n1", jobs=2, split=Split(warmup=warmup, verify=300.0))
    _same(par, one)
    assert par.spans == par.planned == 2, "the cut should verify"
