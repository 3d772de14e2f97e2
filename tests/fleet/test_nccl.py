"""NCCL evidence: the culprit rank of a job incident from the nodes' job reports
(NCCL Inspector bus bandwidth, NCCL RAS missing ranks), and the node addresses
field that maps a RAS host to its node."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabricwatch.errors import ParseError
from fabricwatch.fleet.jobwork import JobWork, parse
from fabricwatch.fleet.nccl import node_of_host, score, with_nccl

JOB = "slurm:8812"
W = 60.0
T0 = 1_760_000_040.0  # a multiple of the window
GB = 1e9


def report(
    node: str,
    k: int,
    bw: dict[str, float],
    *,
    work: float = 80.0,
    missing: tuple[tuple[str, str, str], ...] = (),
    addresses: tuple[str, ...] = (),
    job: str = JOB,
) -> JobWork:
    """Window ``k`` of one node: 4 GPUs in ``job``, a work signal each 5 s."""
    lo = T0 + k * W
    pts = tuple((lo + s, work) for s in range(0, int(W), 5))
    return JobWork(
        node, lo, lo + W, ((job, ("0", "1", "2", "3")),), pts,
        tuple(sorted(bw.items())), missing, addresses,
    )  # fmt: skip


def fleet(
    nodes: int,
    windows: int,
    level: float,
    *,
    bad: tuple[str, str] | None = None,
    bad_bw: float = 0.0,
    from_k: int = 0,
    bad_work: float = 80.0,
) -> dict[str, list[JobWork]]:
    """``nodes`` nodes at ``level`` bytes/s; ``bad`` = (node, GPU) at ``bad_bw`` from
    window ``from_k`` on (its node's work at ``bad_work`` then)."""
    out: dict[str, list[JobWork]] = {}
    for i in range(nodes):
        name = f"gpu-{i:03d}"
        rs = []
        for k in range(windows):
            bw = {g: level * (1 + 0.02 * ((i + int(g) + k) % 3)) for g in "0123"}
            work = 80.0
            if bad is not None and bad[0] == name and k >= from_k:
                bw[bad[1]] = bad_bw
                work = bad_work
            rs.append(report(name, k, bw, work=work))
        out[name] = rs
    return out


def incident(onset: float, end: float, nodes: list[str], *, origin: Any = None) -> dict[str, Any]:
    return {
        "key": "ci-1", "group": {"kind": "job", "name": JOB, "id": "x"}, "job": JOB,
        "kind": "stall", "onset_unix": onset, "updated_unix": end, "resolved_unix": end,
        "cause": "unknown" if origin is None else origin["cause"], "confidence": 0.0,
        "culprit": {"key": f"job:{JOB}", "kind": "job", "labels": {"job": JOB}},
        "origin": origin, "nodes": nodes, "job_nodes": nodes, "waiting": nodes,
        "evidence": [], "gpu_seconds_lost": 100.0, "cost_lost": None, "summary": "s",
    }  # fmt: skip


# -- the report field ---------------------------------------------------------


def test_addresses_round_trip_and_are_optional() -> None:
    r = report("gpu-001", 0, {"0": 1.0}, addresses=("10.0.0.7", "gpu-001.cluster"))
    back = parse(r.body(), source="t")
    assert back.addresses == ("10.0.0.7", "gpu-001.cluster") and back == r
    old = r.to_json()
    del old["addresses"]  # a node of an older release sends none
    assert parse(json.dumps(old).encode(), source="t").addresses == ()


@pytest.mark.parametrize(
    "addresses",
    [{"a": 1}, "10.0.0.7", [1], [""], ["x" * 256], [None], ["a"] * 5000],
)
def test_garbage_addresses_are_rejected(addresses: Any) -> None:
    doc = report("gpu-001", 0, {}).to_json()
    doc["addresses"] = addresses
    with pytest.raises(ParseError):
        parse(json.dumps(doc).encode(), source="t")


def test_truncated_report_with_addresses_is_rejected() -> None:
    body = report("gpu-001", 0, {}, addresses=("10.0.0.7",)).body()
    for cut in (len(body) // 3, len(body) - 1):
        with pytest.raises(ParseError):
            parse(body[:cut], source="t")


# -- scoring ------------------------------------------------------------------


@pytest.mark.parametrize("level", [3 * GB, 24 * GB, 180 * GB])
@pytest.mark.parametrize("share", [0.05 + 0.01, 0.2, 0.45])
def test_a_collapse_on_one_rank_names_it(level: float, share: float) -> None:
    reps = fleet(4, 6, level, bad=("gpu-002", "3"), bad_bw=share * level, from_k=4)
    found = score(reps, JOB, T0 + 4 * W, T0 + 6 * W)
    assert found is not None
    assert (found.node, found.gpu, found.cause) == ("gpu-002", "3", "collective_slow")
    assert found.source == "nccl_inspector" and found.ratio == pytest.approx(share, rel=0.05)


def test_bandwidth_zero_is_a_hang() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-001", "0"), bad_bw=0.0, from_k=4)
    found = score(reps, JOB, T0 + 4 * W, T0 + 6 * W)
    assert found is not None and (found.node, found.cause) == ("gpu-001", "collective_hang")


def test_a_collapse_with_the_node_computing_slower_is_a_straggler() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-003", "1"), bad_bw=6 * GB, from_k=4, bad_work=40.0)
    found = score(reps, JOB, T0 + 4 * W, T0 + 6 * W)
    assert found is not None and (found.node, found.cause) == ("gpu-003", "straggler")


def test_all_ranks_equally_slow_name_no_rank() -> None:
    before = fleet(4, 4, 24 * GB)
    slow = fleet(4, 6, 3 * GB)
    reps = {n: [*before[n], *slow[n][4:]] for n in before}
    assert score(reps, JOB, T0 + 4 * W, T0 + 6 * W) is None


def test_a_rank_that_was_always_slower_is_no_collapse() -> None:
    # Its own earlier windows were as low: its path is slower, nothing collapsed.
    reps = fleet(4, 6, 24 * GB, bad=("gpu-002", "3"), bad_bw=8 * GB, from_k=0)
    assert score(reps, JOB, T0 + 4 * W, T0 + 6 * W) is None


def test_too_few_ranks_or_other_jobs_name_nothing() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-002", "3"), bad_bw=1 * GB, from_k=4)
    assert score(reps, "slurm:other", T0 + 4 * W, T0 + 6 * W) is None
    two = {"a": [report("a", 4, {"0": 24 * GB})], "b": [report("b", 4, {"0": 1 * GB})]}
    assert score(two, JOB, T0 + 4 * W, T0 + 5 * W) is None


@pytest.mark.parametrize(
    ("host", "addresses", "node"),
    [
        ("10.0.0.12", ("10.0.0.12",), "gpu-002"),
        ("10.0.0.12:28028", ("10.0.0.12",), "gpu-002"),
        ("[fd00::12]:28028", ("fd00::12",), "gpu-002"),
        ("gpu-002.cluster.local", (), "gpu-002"),
        ("GPU-002", (), "gpu-002"),
    ],
)
def test_a_missing_rank_maps_to_its_node(host: str, addresses: tuple[str, ...], node: str) -> None:
    reps = fleet(4, 6, 24 * GB)
    reps[node] = [
        report(node, k, dict(r.bus_bw), addresses=addresses) for k, r in enumerate(reps[node])
    ]
    seen = "gpu-000"  # any rank's RAS reports the missing one
    reps[seen][5] = report(seen, 5, dict(reps[seen][5].bus_bw), missing=((host, "2", "13"),))
    found = score(reps, JOB, T0 + 5 * W, T0 + 6 * W)
    assert found is not None
    assert (found.node, found.gpu, found.rank, found.cause) == (node, "2", "13", "collective_hang")
    assert node_of_host("10.9.9.9", reps) is None


def test_no_nccl_data_gives_no_evidence_and_the_same_document() -> None:
    reps = {n: [report(n, k, {}) for k in range(6)] for n in ("a", "b", "c", "d")}
    doc = incident(T0 + 4 * W, T0 + 6 * W, sorted(reps))
    assert score(reps, JOB, T0 + 4 * W, T0 + 6 * W) is None
    assert with_nccl(doc, reps) == doc
    assert with_nccl(doc, {}) == doc


def test_nccl_names_the_origin_when_no_member_has_evidence() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-002", "3"), bad_bw=2 * GB, from_k=4)
    out = with_nccl(incident(T0 + 4 * W + 10, T0 + 6 * W, sorted(reps)), reps)
    assert out["cause"] == "collective_slow"
    assert out["origin"]["node"] == "gpu-002" and out["origin"]["culprit"] == "gpu:gpu-002:3"
    assert out["origin"]["culprit_kind"] == "rank"
    assert out["culprit"]["labels"]["origin"] == "gpu-002"
    assert "gpu-002" not in out["waiting"] and out["waiting_count"] == 3
    assert "origin: gpu-002, NCCL Inspector" in out["summary"]
    assert out["nccl"]["node"] == "gpu-002" and out["evidence"][-1]["family"] == "nccl_inspector"


def test_local_evidence_keeps_its_origin_and_nccl_joins_the_evidence() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-002", "3"), bad_bw=2 * GB, from_k=4)
    origin = {"node": "gpu-001", "cause": "pfc_storm", "confidence": 0.9}
    doc = incident(T0 + 4 * W, T0 + 6 * W, sorted(reps), origin=origin)
    out = with_nccl(doc, reps)
    assert out["origin"] == origin and out["cause"] == "pfc_storm"
    assert [e["culprit"] for e in out["evidence"]] == ["gpu:gpu-002:3"]


def test_shared_culprit_groups_are_left_alone() -> None:
    reps = fleet(4, 6, 24 * GB, bad=("gpu-002", "3"), bad_bw=2 * GB, from_k=4)
    doc = dict(incident(T0 + 4 * W, T0 + 6 * W, sorted(reps)), group={"kind": "switch"})
    assert with_nccl(doc, reps) == doc
