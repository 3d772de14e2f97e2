"""Fleet replay from one real Prometheus holding many nodes (promtool backfill):
``fabricwatch replay --fleet --prometheus URL --match 'instance=~"gpu-.*"'`` gives
the same job incidents and origins as the live nodes grouped by the fleet."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from fabricwatch.cli import main
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.fleet.replay import group_offline
from fabricwatch.testing.sim_fleet import Cluster, all_transitions, build_cluster, in_time_order
from tests.engine.test_prometheus import serve
from tests.fleet.test_fleet_replay import _fleet, readings, view

pytestmark = pytest.mark.integration

if shutil.which("promtool") is None or shutil.which("prometheus") is None:
    pytest.skip(
        "promtool/prometheus not installed (Debian package prometheus)", allow_module_level=True
    )

CLUSTER = build_cluster(nodes=4, jobs=2, leaves=2, seed=5, kinds=("gpu", "unknown"))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The engine tests' Prometheus fixture, loaded with every node's series."""
    base = tmp_path_factory.mktemp("fleet-prom")
    om = base / "nodes.om"
    parts: list[str] = []
    for n in CLUSTER.nodes:
        buf: list[str] = []
        write_openmetrics(
            readings(CLUSTER, n.name), buf.append, extra_labels={"instance": f"{n.name}:9478"}
        )
        parts.append("".join(buf).replace("# EOF\n", ""))
    om.write_text("".join(parts) + "# EOF\n")
    yield from serve(base, om)


def test_fleet_replay_from_prometheus_equals_live(
    prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    c: Cluster = CLUSTER
    live = group_offline(in_time_order(all_transitions(c)), _fleet(), cluster="default").jobs()
    assert len(live) == 2
    args = ["replay", "--fleet", "--prometheus", prometheus, "--from", str(c.start_ts - 1),
            "--to", str(c.start_ts + c.duration + 1), "--match", 'instance=~"gpu-.*"',
            "--chunk", "5m", "--json"]  # fmt: skip
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert view(got) == view(live)
    # A matcher selecting no node is a clear error.
    bad = [a if a != 'instance=~"gpu-.*"' else 'instance="nope"' for a in args]
    assert main(bad) == 1  # nothing usable: ExitCode.FAILURE
    assert "no usable samples" in capsys.readouterr().err
