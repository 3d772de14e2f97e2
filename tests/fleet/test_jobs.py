"""Job incidents: one page per job-wide hang, naming the node that stalled it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from fabricwatch.engine.evidence import Culprit
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.jobs import Candidate, rank
from fabricwatch.fleet.model import EvidenceLine, GroupKey, Member
from tests.fleet.conftest import T0, fleet_settings, switch_culprit
from tests.fleet.test_grouper import grouper, mk, run

JOB = "slurm:8812"


def gpu_culprit(gpu: str = "3") -> Culprit:
    return Culprit(f"gpu:{gpu}", "gpu", (("gpu", gpu),))


def nic_culprit(dev: str = "mlx5_3") -> Culprit:
    return Culprit(
        f"nic:{dev}:1:3", "nic_port", (("device", dev), ("port", "1"), ("priority", "3"))
    )


def waiter(node: str, onset: float, job: str = JOB) -> Member:
    """A node of the job that stalled with no local evidence."""
    m = mk(node, f"{abs(hash((node, onset))) % 16**16:016x}", onset=onset, job=job)
    return replace(
        m,
        cause="unknown",
        confidence=0.0,
        culprit_key="",
        culprit_kind="",
        culprit_labels=(),
        evidence=(),
    )


def evidenced(  # noqa: PLR0917 - reads as a table row at the call sites
    node: str, onset: float, cause: str, culprit: Culprit, conf: float, text: str, job: str = JOB
) -> Member:
    m = mk(
        node,
        f"{abs(hash((node, onset, cause))) % 16**16:016x}",
        onset=onset,
        job=job,
        cause=cause,
        culprit=culprit,
    )
    return replace(
        m, confidence=conf, evidence=(EvidenceLine(cause, "f", culprit.key, conf, text),)
    )


def paged(trs: list[GroupTransition]) -> list[GroupTransition]:
    return [t for t in trs if t.doc.get("paged") is not False]


def test_the_node_with_evidence_is_the_origin_and_the_rest_waited() -> None:
    g = grouper(settle=1.0)
    origin = evidenced(
        "gpu-017", T0 + 1, "gpu_fault", gpu_culprit(), 0.93, "XID 79 (fell off the bus) on GPU 3"
    )
    g.on_member(origin, T0 + 1)
    for i in range(63):
        g.on_member(waiter(f"gpu-{100 + i:03d}", T0 + 0.5 + (i % 3)), T0 + 1)
    trs = run(g, T0 + 1, T0 + 5)
    [tr] = trs
    d = tr.doc
    assert tr.kind == "opened" and d["paged"] is True
    assert d["group"]["kind"] == "job" and d["job"] == JOB and d["jobs"] == [JOB]
    assert d["origin"]["node"] == "gpu-017" and d["cause"] == "gpu_fault"
    assert d["culprit"]["labels"]["origin"] == "gpu-017"
    assert d["waiting_count"] == 63 and "gpu-017" not in d["waiting"]
    assert d["summary"].startswith(f"GPUs on 64 nodes of job {JOB} stalled ")
    assert (
        "origin: gpu-017, XID 79 (fell off the bus) on GPU 3; 63 nodes waited on it"
        in (d["summary"])
    )
    json.dumps(d)


def test_a_victim_with_weaker_evidence_is_never_the_origin_even_if_earlier() -> None:
    g = grouper(settle=0.0)
    # The victim stalled first and saw received pauses at a fraction of the origin's.
    victim = evidenced(
        "gpu-002", T0, "pfc_storm", nic_culprit("mlx5_0"), 0.6, "heavy PFC pausing: 30%"
    )
    origin = evidenced(
        "gpu-017", T0 + 1, "pfc_storm", nic_culprit(), 0.95, "PFC pause storm on NIC mlx5_3: 97%"
    )
    for m in (victim, origin, waiter("gpu-003", T0 + 1)):
        g.on_member(m, T0 + 1)
    [tr] = run(g, T0 + 1, T0 + 2)
    assert tr.doc["origin"]["node"] == "gpu-017"
    assert sorted(tr.doc["waiting"]) == ["gpu-002", "gpu-003"]


def test_equally_strong_evidence_names_the_first_to_stall() -> None:
    cands = [
        Candidate(n, n, "pfc_storm", conf, on, "c", "nic_port", "t", "job:x", "", 8)
        for n, conf, on in (("b", 0.95, T0 + 2), ("a", 0.9, T0 + 1), ("c", 0.5, T0))
    ]
    v = rank(cands)
    assert v.origin is not None and v.origin.node == "a"
    assert [c.node for c in v.also] == ["b"]  # same tier; "c" is a victim


def test_no_evidence_anywhere_says_so_and_lists_the_first_stalled() -> None:
    g = grouper(settle=1.0, job_link_wait=2.0)
    for i, on in enumerate([T0 + 3, T0 + 1, T0 + 2, T0 + 1.5, T0 + 4]):
        g.on_member(waiter(f"n{i}", on), T0)
    assert run(g, T0, T0 + 2.9) == []  # settle + link wait
    [tr] = run(g, T0 + 2.9, T0 + 3.1)
    d = tr.doc
    assert d["cause"] == "unknown" and d["origin"] is None and d["paged"] is True
    assert d["first_stalled"] == ["n1", "n3", "n2"]
    assert (
        "no node has local evidence (cause unknown); stalled first: n1 (+0 s), n3 (+0 s)"
        in (d["summary"])
    )
    assert d["waiting_count"] == 5


def _switch_fault_two_jobs(g: Grouper) -> None:
    """leaf-2's storm stalls the 2 nodes of each job behind it; the jobs' other
    nodes, behind other leaves, wait with no local evidence."""
    for job in ("slurm:1", "slurm:2"):
        for k in range(2):
            node = f"{job[-1]}-leaf2-{k}"
            g.on_member(
                evidenced(
                    node,
                    T0 + 0.2 * k,
                    "pfc_storm",
                    switch_culprit("leaf-2", f"swp{k}{job[-1]}"),
                    0.95,
                    f"PFC pause storm on switch leaf-2 port swp{k}: paused 97%",
                    job=job,
                ),
                T0,
            )
        for k in range(6):
            g.on_member(waiter(f"{job[-1]}-other-{k}", T0 + 1, job=job), T0 + 0.5)


def test_a_switch_fault_on_two_jobs_pages_once_and_lists_both() -> None:
    g = grouper(settle=1.0, update_interval=0.0)
    _switch_fault_two_jobs(g)
    trs = run(g, T0, T0 + 6)
    opened = [t for t in trs if t.kind == "opened"]
    assert sorted(t.doc["group"]["kind"] for t in opened) == ["job", "job", "switch"]
    [page] = [t for t in paged(trs) if t.kind == "opened"]
    assert page.doc["group"] == {"kind": "switch", "name": "leaf-2", "id": page.topic_id}
    assert page.doc["jobs"] == ["slurm:1", "slurm:2"]
    jobs = {t.doc["job"]: t.doc for t in opened if t.doc["group"]["kind"] == "job"}
    for job, d in jobs.items():
        assert d["paged"] is False
        assert d["covered_by"] == {"group": "switch:leaf-2", "key": page.doc["key"]}
        assert d["origin"]["node"] == f"{job[-1]}-leaf2-0"  # the first of the job to stall
        assert d["waiting_count"] == 6 and len(d["job_nodes"]) == 8
        assert "paged as switch leaf-2" in d["summary"]
    # The switch incident learns how many nodes of each job waited on it.
    last = [t.doc for t in trs if t.doc["group"]["kind"] == "switch"][-1]
    assert last["jobs_waiting"] == {"slurm:1": 6, "slurm:2": 6}
    assert "jobs: slurm:1 (6 nodes waited), slurm:2 (6 nodes waited)" in last["summary"]
    # Later transitions of the covered job incidents stay unpaged.
    assert all(t.doc["paged"] is False for t in trs if t.doc["group"]["kind"] == "job")


def test_a_switch_group_owned_by_another_replica_covers_the_job() -> None:
    peer = grouper(settle=0.0)
    _switch_fault_two_jobs(peer)
    sw = [t for t in run(peer, T0, T0 + 0.1) if t.doc["group"]["kind"] == "switch"]
    [announced] = sw
    s = fleet_settings(settle=1.0, job_link_wait=2.0)
    g = Grouper(s, "r1")
    switch_p = g.partition("prod", GroupKey("switch", "leaf-2"))
    g.set_owned([p for p in range(s.partitions) if p != switch_p], T0 - 100)
    for k in range(6):
        assert g.on_member(waiter(f"1-other-{k}", T0 + 1, job="slurm:1"), T0 + 0.5)
    assert run(g, T0 + 0.5, T0 + 2.0) == []  # no evidence: waits for a covering group
    g.on_announcement("prod", announced.topic_id, json.loads(json.dumps(announced.doc)))
    [tr] = run(g, T0 + 2.0, T0 + 4.0)
    assert tr.doc["paged"] is False and tr.doc["covered_by"]["key"] == announced.doc["key"]
    assert tr.doc["origin"]["node"] == "1-leaf2-0" and tr.doc["cause"] == "pfc_storm"


def test_a_job_incident_from_another_episode_does_not_link() -> None:
    g = grouper(settle=0.0, join_window=10.0, job_link_wait=1.0)
    old = evidenced("a", T0 - 100, "pfc_storm", switch_culprit("leaf-2"), 0.95, "storm")
    g.on_member(replace(old, state="resolved", resolved_at=T0 - 90), T0)
    g.on_member(waiter("b", T0), T0)
    trs = [t for t in run(g, T0, T0 + 2) if t.doc["group"]["kind"] == "job"]
    [tr] = trs
    assert tr.doc["origin"] is None and tr.doc["paged"] is True


def test_takeover_of_a_covered_job_incident_stays_unpaged() -> None:
    g = grouper(settle=1.0, update_interval=0.0)
    _switch_fault_two_jobs(g)
    trs = run(g, T0, T0 + 3)
    job_doc: dict[str, Any] = next(t.doc for t in trs if t.doc["group"]["kind"] == "job")
    h = Grouper(fleet_settings(handover_delay=0.0), "r2")
    tid = job_doc["group"]["id"]
    h.on_announcement("prod", tid, job_doc)
    h.set_owned(range(16), T0 + 3)
    run(h, T0 + 3, T0 + 3.1)
    assert h.groups[("prod", tid)].paged is False
