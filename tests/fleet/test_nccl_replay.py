"""Fleet replay with NCCL evidence: a job-wide hang with no local evidence on any node
names, from the nodes' NCCL Inspector bandwidth, the node whose rank collapsed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.cli import main
from fabricwatch.engine import signals as sig
from fabricwatch.engine.replay_mapping import Sample
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.engine.settings import EngineSettings
from fabricwatch.fleet.jobwork import NCCL_BUS_BW, NCCL_RAS_MISSING
from fabricwatch.fleet.replay import replay_nodes
from fabricwatch.fleet.settings import FleetSettings
from fabricwatch.readings import Reading
from fabricwatch.settings import build
from fabricwatch.testing.sim_fleet import Cluster, build_cluster, node_samples


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return build_cluster(
        nodes=6, jobs=2, leaves=3, seed=4, kinds=("unknown",), spacing=200, fault_s=60,
        warmup=240,
    )  # fmt: skip


@pytest.fixture(scope="module")
def plain(cluster: Cluster) -> dict[str, list[Sample]]:
    return node_samples(cluster)


def with_bandwidth(
    cluster: Cluster, samples: dict[str, list[Sample]], share: float, gpu: str = "5"
) -> dict[str, list[Sample]]:
    """Every job GPU at ~20 GB/s each 5 s; the fault's node's ``gpu`` at ``share`` of
    that from the fault's start to its end."""
    [truth] = cluster.truth()
    f = truth.fault
    out: dict[str, list[Sample]] = {}
    for node, ss in samples.items():
        gpus = sorted({s[2][0] for s in ss if s[1] == sig.GPU_JOB and s[3] > 0})
        t0, t1 = min(s[0] for s in ss), max(s[0] for s in ss)
        extra: list[Sample] = []
        t = t0
        while t <= t1:
            for g in gpus:
                bw = 20e9 * (1 + 0.01 * (int(g) % 3))
                if node == f.target and g == gpu and truth.onset <= t < truth.onset + f.duration:
                    bw *= share
                extra.append((t, NCCL_BUS_BW, (g, "AllReduce"), bw))
            t += 5.0
        out[node] = sorted([*ss, *extra], key=lambda s: s[0])
    return out


def job_docs(samples: dict[str, list[Sample]], cluster: Cluster) -> list[dict[str, Any]]:
    [truth] = cluster.truth()
    engine = build(EngineSettings, {}, prefix="engine")
    res = replay_nodes(samples, engine, build(FleetSettings, {}, prefix="fleet"))
    return [d for d in res.fleet.jobs() if d["job"] == truth.jobs[0]]


def test_without_nccl_the_hang_has_no_origin(
    cluster: Cluster, plain: dict[str, list[Sample]]
) -> None:
    [doc] = job_docs(plain, cluster)
    assert doc["origin"] is None and doc["cause"] == "unknown" and "nccl" not in doc


@pytest.mark.parametrize(("share", "cause"), [(0.0, "collective_hang"), (0.2, "collective_slow")])
def test_nccl_bandwidth_names_the_origin_in_fleet_replay(
    cluster: Cluster, plain: dict[str, list[Sample]], share: float, cause: str
) -> None:
    [truth] = cluster.truth()
    [doc] = job_docs(with_bandwidth(cluster, plain, share), cluster)
    assert doc["origin"]["node"] == truth.fault.target
    assert doc["origin"]["culprit"] == f"gpu:{truth.fault.target}:5"
    assert doc["cause"] == cause and doc["nccl"]["source"] == "nccl_inspector"
    assert truth.fault.target not in doc["waiting"]
    assert sorted(doc["job_nodes"]) == sorted(truth.stalled)


def test_a_ras_missing_rank_names_its_node_in_fleet_replay(
    cluster: Cluster, plain: dict[str, list[Sample]]
) -> None:
    [truth] = cluster.truth()
    target = truth.fault.target
    witness = sorted(n for n in truth.stalled if n != target)[0]
    samples = dict(plain)
    miss = (truth.onset + 10, NCCL_RAS_MISSING, (f"{target}.cluster.local", "2", "21"), 1.0)
    samples[witness] = sorted([*plain[witness], miss], key=lambda s: s[0])
    [doc] = job_docs(samples, cluster)
    assert doc["origin"]["node"] == target and doc["cause"] == "collective_hang"
    assert doc["culprit"]["labels"]["rank"] == "21"


def test_nccl_families_in_openmetrics_files_name_the_origin(
    cluster: Cluster,
    plain: dict[str, list[Sample]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same evidence from files a site scraped: replay maps the NCCL families
    (fabricwatch's own names), so `replay --fleet` names the collapsed rank's node."""
    [truth] = cluster.truth()
    paths = []
    for node, ss in with_bandwidth(cluster, plain, 0.2).items():
        buf = io.StringIO()
        rs = [Reading(f, labels, v, ts) for ts, f, labels, v in ss]
        write_openmetrics(rs, buf.write, extra_labels={"instance": f"{node}:9400"})
        path = tmp_path / f"scrape-{node}.om"
        path.write_text(buf.getvalue())
        paths.append(str(path))
    assert main(["replay", "--fleet", *paths, "--json"]) == 0
    docs = [d for d in json.loads(capsys.readouterr().out) if d["job"] == truth.jobs[0]]
    assert [d["origin"]["node"] for d in docs] == [truth.fault.target]
    assert docs[0]["cause"] == "collective_slow"
