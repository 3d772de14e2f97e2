"""``replay --jobs``: spans in worker processes give exactly the single-pass result."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.engine.replay import run_replay
from fabricwatch.engine.replay_jobs import Split, run_parallel, usable_cores
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
    # Faults spread over 80 minutes, several of them across the cuts that
    # 2, 3 and 4 equal spans make (at 1/4, 1/3, 1/2, 2/3, 3/4 of the run).
    return _samples(_scenario(4800, [300, 1180, 1580, 2390, 3190, 3590, 4300], seed=3))


@pytest.mark.parametrize("jobs", [2, 3, 4])
def test_parallel_replay_equals_one_pass(long_run: list[Sample], jobs: int) -> None:
    one = run_replay(long_run, node="n1")
    assert len(one.incidents()) >= 5
    split = Split(warmup=600.0, verify=240.0)
    par = run_parallel(long_run, node="n1", jobs=jobs, split=split)
    assert par.transitions == one.transitions
    assert (par.ticks, par.readings, par.rejected, par.skipped) == (
        one.ticks,
        one.readings,
        one.rejected,
        one.skipped,
    )
    assert (par.start, par.end) == (one.start, one.end)
    assert par.spans >= 2, "the cuts should have been kept: the run was not parallel"


def test_cuts_through_incidents_and_a_too_short_warmup_still_equal_one_pass(
    long_run: list[Sample],
) -> None:
    # A 20 s warm-up cannot know the job or the open incident: every such cut
    # must be detected and its spans replayed as one.
    one = run_replay(long_run, node="n1")
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
