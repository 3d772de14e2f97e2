"""Fleet replay equals live: a multi-node scenario written as OpenMetrics (one file
per node, or mixed; fabricwatch names, or dcgm-exporter and node_exporter names)
and replayed with ``fabricwatch replay --fleet`` gives the same job incidents and
origins as the live nodes' incidents grouped by the fleet."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.cli import main
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.errors import ParseError
from fabricwatch.fleet.replay import NodeStreams, group_offline, node_name, samples_from_streams
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.readings import Reading
from fabricwatch.settings import build
from fabricwatch.testing.sim_fleet import (
    Cluster,
    all_transitions,
    build_cluster,
    in_time_order,
    node_steps,
    plan,
)
from tests.engine.test_replay import exporter_names

Rename = Callable[[str, tuple[str, ...]], tuple[str, dict[str, str], float] | None]

# The first test also builds the module's fixtures (the cluster, its live grouping and
# a one-process replay of 8 nodes): minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return build_cluster(
        nodes=8, jobs=2, leaves=4, seed=3, kinds=("port", "gpu", "switch", "unknown")
    )


def _fleet() -> FleetSettings:
    return build(FleetSettings, {}, prefix="fleet")


def view(docs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must be equal: per job incident its job, onset, cause, origin and nodes."""
    return sorted(
        (
            d["job"], round(float(d["onset_unix"]), 3), d["cause"],
            (d.get("origin") or {}).get("node"), tuple(d.get("job_nodes") or ()),
            d.get("paged"),
        )
        for d in docs
    )  # fmt: skip


@pytest.fixture(scope="module")
def live(cluster: Cluster) -> list[dict[str, Any]]:
    res = group_offline(in_time_order(all_transitions(cluster)), _fleet(), cluster="default")
    jobs = res.jobs()
    assert len(jobs) == 5  # port, gpu, unknown: one job each; the leaf storm: both jobs
    return jobs


def readings(cluster: Cluster, node: str) -> list[Reading]:
    p = next(x for x in plan(cluster) if x.node.name == node)
    return [r for _, batches in node_steps(cluster, p) for _, rs in batches for r in rs]


def dcgm_and_node_exporter(job: str) -> Rename:
    """dcgm-exporter (with its HPC job mapping label) and node_exporter names for the
    GPU and NIC families; the node daemon's own names for the switch uplink."""

    def rename(name: str, labels: tuple[str, ...]) -> tuple[str, dict[str, str], float] | None:
        if name == sig.GPU_JOB:
            return None  # the job comes from dcgm-exporter's hpc_job label
        if name.startswith("fabricwatch_switch_"):
            spec = sig.SIGNAL_SPECS[name]
            suffix = "_total" if spec.kind.value == "counter" else ""
            return name + suffix, dict(zip(spec.labels, labels, strict=True)), 1.0
        out = exporter_names(name, labels)
        if out is not None and out[0].startswith("DCGM_FI_"):
            out[1].pop("Hostname", None)
            out[1]["hpc_job"] = job.removeprefix("slurm:")
        return out

    return rename


def write_nodes(
    cluster: Cluster, folder: Path, *, names: str = "fabricwatch", mixed: bool = False
) -> list[str]:
    folder.mkdir()
    files: list[str] = []
    everything: list[Reading] = []
    for n in cluster.nodes:
        buf = io.StringIO()
        rename = dcgm_and_node_exporter(n.job) if names == "exporters" else None
        rs = readings(cluster, n.name)
        write_openmetrics(rs, buf.write, rename=rename, extra_labels={"instance": f"{n.name}:9400"})
        if mixed:
            everything.extend(rs)
            text = buf.getvalue()
            files.append(text)
            continue
        path = folder / f"scrape-{n.name}.om"
        path.write_text(buf.getvalue())
        files.append(str(path))
    if mixed:
        # One file: every node's series, each with its instance label.
        path = folder / "all.om"
        path.write_text("".join(t.replace("# EOF\n", "") for t in files) + "# EOF\n")
        return [str(path)]
    return files


def fleet_replay(paths: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["replay", "--fleet", *paths, "--json"]) == 0
    out: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return out


@pytest.fixture(scope="module")
def node_files(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One OpenMetrics file per node, written once for the tests that only read them."""
    return write_nodes(cluster, tmp_path_factory.mktemp("fleet-om") / "om")


@pytest.fixture(scope="module")
def one_pass_json(node_files: list[str]) -> str:
    """``replay --fleet --json --jobs 1`` of :func:`node_files`: the output every other
    replay of those files is compared with, replayed once for them all."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["replay", "--fleet", *node_files, "--json", "--jobs", "1"]) == 0
    return out.getvalue()


def test_one_file_per_node_equals_live(live: list[dict[str, Any]], one_pass_json: str) -> None:
    got: list[dict[str, Any]] = json.loads(one_pass_json)
    assert view(got) == view(live)
    for d in got:  # --json carries, per job incident, origin, cause, culprit and members
        assert {"origin", "cause", "culprit", "members", "waiting"} <= d.keys()
        assert d["members"] and all("node_name" in m for m in d["members"])


def test_one_mixed_file_equals_live(
    cluster: Cluster, live: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert view(fleet_replay(write_nodes(cluster, tmp_path / "om", mixed=True), capsys)) == view(
        live
    )


def test_dcgm_and_node_exporter_names_equal_live(
    cluster: Cluster, live: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_nodes(cluster, tmp_path / "om", names="exporters")
    text = Path(paths[0]).read_text()
    assert "DCGM_FI_DEV_GPU_UTIL" in text and "hpc_job=" in text and sig.GPU_JOB not in text
    assert view(fleet_replay(paths, capsys)) == view(live)


def test_node_names_and_unplaced_lines() -> None:
    assert node_name("gpu-017:9400") == "gpu-017"
    assert node_name("[fe80::1]:9100") == "fe80::1"
    assert node_name("gpu-017") == "gpu-017"
    s = NodeStreams({})
    s.add(['x_total{a="1"} 1 100', "# TYPE x counter", "", 'y{instance="n1:1"} 2 100'])
    assert s.unplaced == 1 and list(s.lines) == ["n1"]
    s.add(['DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="t",pod="llama-worker-3"} 50 100'], default="n2")
    assert any('job_id="k8s:t/llama"' in line for line in s.lines["n2"])


def test_garbage_and_truncated_input_names_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.om"
    bad.write_text('fabricwatch_gpu_power_watts{gpu="0",instance="n7:1"} 1\n')  # no timestamp
    assert main(["replay", "--fleet", str(bad)]) == 1  # unusable input: ExitCode.FAILURE
    assert "node n7" in capsys.readouterr().err
    trunc = tmp_path / "trunc.om"
    trunc.write_text('fabricwatch_gpu_power_watts{gpu="0",instance="n7:1"} 1 1700000000\nfabric')
    assert main(["replay", "--fleet", str(trunc)]) == 1
    assert "not a sample line" in capsys.readouterr().err
    s = NodeStreams({"n": ["\x00\xff garbage"]})
    with pytest.raises(ParseError, match="node n"):
        samples_from_streams(s)
    empty = tmp_path / "empty.om"
    empty.write_text("# EOF\n")
    assert main(["replay", "--fleet", str(empty)]) == 1
    assert "no usable samples" in capsys.readouterr().err


def test_parallel_jobs_give_the_output_of_one_pass(
    node_files: list[str], one_pass_json: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 8 nodes: --jobs 3 runs nodes in parallel processes; --jobs 16 (more jobs than
    # nodes) splits each node's replay by time with the engine's parallel runner.
    paths = node_files
    outs: dict[str, str] = {"1": one_pass_json}
    for jobs in ("3", "16"):
        assert main(["replay", "--fleet", *paths, "--json", "--jobs", jobs]) == 0
        outs[jobs] = capsys.readouterr().out
    assert outs["3"] == outs["1"] and outs["16"] == outs["1"]
    assert len(json.loads(outs["1"])) == 5  # the job incidents came out
    # The text form is built from the same result; once is enough to see the
    # ledger with the job reports' GPU wall time.
    assert main(["replay", "--fleet", *paths, "--jobs", "3"]) == 0
    assert "badput" in capsys.readouterr().out
    assert main(["replay", "--fleet", *paths, "--jobs", "0"]) == 2
