"""Options, scenario definitions and the exit code of a run whose verdict is wrong."""

from __future__ import annotations

import dataclasses
import io

import pytest

from fabricwatch.cli import main
from fabricwatch.demo.runner import Demo, DemoOptions
from fabricwatch.demo.scenarios import (
    ALL,
    FLAP_DOWN,
    FLAP_PERIOD,
    HEALTHY,
    SCENARIOS,
    Timing,
    Truth,
    Work,
    select,
)
from fabricwatch.demo.view import PlainReporter
from fabricwatch.errors import ExitCode


@pytest.mark.parametrize(
    "argv",
    [["--speed", "0"], ["--speed", "fast"], ["--scenario", "meteor-strike"], ["--duration", "-1"]],
)
def test_bad_options_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", *argv])
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_too_short_a_fault_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--duration", "5"]) == 2
    assert "at least 20" in capsys.readouterr().err


def test_help_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in [*SCENARIOS, ALL, "--keep-running", "--summary-json"]:
        assert name in out


def test_select() -> None:
    assert [s.name for s in select(ALL)] == [
        "healthy",
        "pfc-storm",
        "checkpoint-stall",
        "ecn-congestion",
        "nvlink-degraded",
        "link-flap",
    ]
    assert [s.name for s in select("link-flap")] == ["link-flap"]
    with pytest.raises(ValueError, match="known: healthy"):
        select("nope")


def test_conditions_follow_the_fault_timeline() -> None:
    pfc = SCENARIOS["pfc-storm"]
    assert pfc.condition(None) is HEALTHY
    early = pfc.condition(0.5)
    assert early.uplink_pause == 0.97
    assert early.work is Work.TRAIN  # the fabric first, the job a moment later
    assert pfc.condition(1.5).work is Work.HUNG
    flap = SCENARIOS["link-flap"]
    downs = [not flap.condition(t / 2).link_up for t in range(int(2 * FLAP_PERIOD * 2))]
    assert sum(downs) == 2 * int(2 * FLAP_DOWN)
    assert SCENARIOS["healthy"].condition(3.0) is HEALTHY
    for sc in SCENARIOS.values():
        if sc.truth is not None:
            assert sc.truth.culprits
    assert Timing().span(SCENARIOS["healthy"]) == Timing().healthy


async def test_a_wrong_ground_truth_makes_the_run_fail() -> None:
    # The same PFC storm, but the "truth" claims a link went down: the verdict
    # must say WRONG and the exit code must be 1.
    lie = dataclasses.replace(SCENARIOS["pfc-storm"], truth=Truth("link_down", ("nic:mlx5_0:1",)))
    out = io.StringIO()
    demo = Demo(
        DemoOptions(
            # x5: on a loaded machine x10 can outrun the simulated node (not detected).
            scenarios=[lie],
            speed=5.0,
            timing=Timing(warmup=15.0, fault=20.0, settle=14.0),
        ),
        PlainReporter(out),
    )
    result = await demo.run()
    assert result.code == ExitCode.FAILURE
    assert result.summary is not None
    sc = result.summary["scenarios"][0]
    assert not sc["ok"]
    assert sc["reason"].startswith("expected link_down on nic:mlx5_0:1, got ")
    assert result.summary["ok"] is False
    assert demo.root is not None
    assert not demo.root.exists()
    assert "incident opened" in out.getvalue()
