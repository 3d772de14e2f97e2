"""The grouping state machine with a controlled clock (no broker)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from fabricwatch.engine.incidents import to_json
from fabricwatch.fleet.grouper import Grouper, GroupTransition
from fabricwatch.fleet.model import Member, member_from_incident
from tests.fleet.conftest import T0, fleet_settings, incident, switch_culprit


def mk(node: str, key: str, *, state: str = "open", revision: int = 1, **kw: Any) -> Member:
    inc = incident(node, key, state=state, revision=revision, **kw)
    return member_from_incident(to_json(inc), cluster="prod", node=node, published=T0, source="t")


def grouper(**kw: Any) -> Grouper:
    g = Grouper(fleet_settings(**kw), "r1")
    g.set_owned(range(g.settings.partitions), T0 - 100)  # warm long ago
    return g


def run(g: Grouper, start: float, end: float, step: float = 0.05) -> list[GroupTransition]:
    out: list[GroupTransition] = []
    t = start
    for _ in range(int((end - start) / step) + 1):
        out += g.tick(t)
        t += step
    return out


def test_a_storm_opens_one_group_after_settle_with_every_node() -> None:
    g = grouper(settle=1.0)
    for i in range(32):
        g.on_member(
            mk(f"n{i:02d}", f"{i:016x}", culprit=switch_culprit(port=f"swp{i}")), T0 + i * 0.02
        )
    assert g.tick(T0 + 0.9) == []
    [tr] = g.tick(T0 + 1.0)
    assert tr.kind == "opened" and tr.doc["node_count"] == 32 and tr.doc["gpu_count"] == 256
    assert tr.doc["revision"] == 1 and tr.doc["state"] == "open"
    assert tr.doc["nodes_by_cause"] == {"pfc_storm": 32}
    assert tr.doc["evidence"][0]["text"].endswith("(32 nodes)") is False  # 32 distinct ports
    assert len(tr.doc["members"]) == 32
    json.dumps(tr.doc)  # serialisable as is


def test_same_port_everywhere_reads_as_that_port() -> None:
    g = grouper(settle=0.0)
    for i in range(3):
        g.on_member(mk(f"n{i}", f"{i:016x}"), T0)
    [tr] = g.tick(T0)
    assert tr.doc["summary"].startswith("leaf-7 swp12: PFC pause storm stalled 3 nodes / 24 GPUs")
    assert tr.doc["evidence"][0]["text"].endswith("(3 nodes)")
    assert tr.doc["culprit"] == {
        "key": "switch:leaf-7",
        "kind": "switch",
        "labels": {"switch": "leaf-7", "ports": "swp12"},
    }


def test_different_switches_are_different_groups() -> None:
    g = grouper(settle=0.0)
    g.on_member(mk("a", "a" * 16), T0)
    g.on_member(mk("b", "b" * 16, culprit=switch_culprit("leaf-8")), T0)
    trs = g.tick(T0)
    assert sorted(t.doc["node"] for t in trs) == ["switch leaf-7", "switch leaf-8"]
    assert len({t.doc["key"] for t in trs}) == 2


def test_resolves_only_when_every_member_resolved_for_the_hold() -> None:
    g = grouper(settle=0.0, resolve_hold=2.0, update_interval=1000.0)
    a, b = mk("a", "a" * 16), mk("b", "b" * 16)
    g.on_member(a, T0)
    g.on_member(b, T0)
    assert [t.kind for t in g.tick(T0)] == ["opened"]
    g.on_member(replace(a, state="resolved", revision=2, resolved_at=T0 + 5), T0 + 5)
    assert run(g, T0 + 5, T0 + 10) == []
    g.on_member(replace(b, state="resolved", revision=2, resolved_at=T0 + 10), T0 + 10)
    assert run(g, T0 + 10, T0 + 11.9) == []
    [tr] = run(g, T0 + 11.9, T0 + 12.1)
    assert tr.kind == "resolved" and tr.doc["state"] == "resolved" and tr.doc["revision"] == 2
    assert tr.doc["duration_seconds"] == pytest.approx(12.0 + (T0 - incident("a").onset), abs=0.2)
    # Their retained topics are cleared and a late duplicate does not re-open anything.
    assert {c.member.node for c in g.clears} == {"a", "b"}
    g.clears.clear()
    g.on_member(a, T0 + 20)
    assert run(g, T0 + 20, T0 + 25) == []
    assert [c.member.node for c in g.clears] == ["a"]


def test_a_new_member_during_the_hold_keeps_the_group_open() -> None:
    g = grouper(settle=0.0, resolve_hold=5.0, update_interval=0.0)
    a = mk("a", "a" * 16)
    g.on_member(a, T0)
    g.tick(T0)
    g.on_member(replace(a, state="resolved", revision=2, resolved_at=T0 + 1), T0 + 1)
    run(g, T0 + 1, T0 + 3)
    g.on_member(mk("b", "b" * 16, onset=T0 + 3), T0 + 3)
    trs = run(g, T0 + 3, T0 + 10)
    assert [t.kind for t in trs] == ["updated"]
    assert trs[0].doc["node_count"] == 2


def test_updates_are_rate_limited_and_only_on_change() -> None:
    g = grouper(settle=0.0, update_interval=10.0)
    g.on_member(mk("a", "a" * 16), T0)
    assert [t.kind for t in g.tick(T0)] == ["opened"]
    assert run(g, T0, T0 + 30) == []  # nothing changed
    trs: list[GroupTransition] = []
    for i in range(5):
        g.on_member(mk(f"n{i}", f"{i:016x}"), T0 + 31 + i)
        trs += run(g, T0 + 31 + i, T0 + 31.9 + i, step=0.5)
    trs += run(g, T0 + 36, T0 + 45, step=0.5)
    assert [t.kind for t in trs] == ["updated", "updated"]
    assert trs[0].at == pytest.approx(T0 + 31)
    assert trs[1].at >= trs[0].at + 10 and trs[1].doc["node_count"] == 6


def test_an_offline_node_is_shown_and_ends_after_the_grace() -> None:
    g = grouper(settle=0.0, offline_grace=30.0, update_interval=0.0)
    a, b = mk("a", "a" * 16), mk("b", "b" * 16)
    for m in (a, b):
        g.on_status("prod", m.node, True, T0 - 10)
        g.on_member(m, T0)
    g.tick(T0)
    g.on_status("prod", "b", False, T0 + 1)
    [up] = g.tick(T0 + 1)
    assert up.kind == "updated" and up.doc["nodes_offline"] == ["b"]
    assert "(1 offline)" in up.doc["summary"]
    assert [m["online"] for m in up.doc["members"]] == [True, False]
    g.on_member(replace(a, state="resolved", revision=2, resolved_at=T0 + 2), T0 + 2)
    trs = run(g, T0 + 2, T0 + 30)
    assert [t.kind for t in trs] == ["updated"]  # a resolved; b offline, not yet ended
    [res] = run(g, T0 + 30, T0 + 32)
    assert res.kind == "resolved" and res.doc["nodes_offline"] == ["b"]


def test_stale_and_out_of_order_revisions_are_ignored() -> None:
    g = grouper(settle=0.0)
    a = mk("a", "a" * 16, revision=3, gpu_seconds=300.0)
    g.on_member(a, T0)
    g.on_member(replace(a, revision=2, gpu_seconds=1.0), T0)
    [tr] = g.tick(T0)
    assert tr.doc["members"][0]["gpu_seconds_lost"] == 300.0


def test_a_peers_open_announcement_is_adopted_not_reopened() -> None:
    peer = grouper(settle=0.0)
    a = mk("a", "a" * 16)
    peer.on_member(a, T0)
    [opened] = peer.tick(T0)
    doc = json.loads(json.dumps(opened.doc))
    doc["owner"] = "r0"
    g = Grouper(fleet_settings(settle=0.0, handover_delay=1.0, update_interval=1000.0), "r1")
    g.on_announcement("prod", opened.topic_id, doc)
    g.set_owned(range(16), T0 + 5)
    g.on_member(a, T0 + 5)
    assert g.tick(T0 + 5.5) == []  # not warm yet
    assert g.tick(T0 + 6.0) == []
    assert [d["key"] for d in g.adopted] == [doc["key"]]
    g.on_member(replace(a, state="resolved", revision=2, resolved_at=T0 + 7), T0 + 7)
    [res] = g.tick(T0 + 7)
    assert res.kind == "resolved" and res.doc["key"] == doc["key"] and res.doc["revision"] == 2
    assert res.doc["owner"] == "r1"


def test_an_orphaned_open_announcement_is_resolved_by_the_new_owner() -> None:
    g = Grouper(fleet_settings(settle=0.0, handover_delay=0.0, resolve_hold=1.0), "r1")
    g.set_owned(range(16), T0)
    peer = grouper(settle=0.0)
    peer.on_member(mk("a", "a" * 16), T0)
    [opened] = peer.tick(T0)
    g.on_announcement("prod", opened.topic_id, opened.doc)
    trs = run(g, T0, T0 + 2)
    assert [t.kind for t in trs] == ["resolved"] and trs[0].doc["key"] == opened.doc["key"]


def test_a_resolved_announcement_marks_its_members_done() -> None:
    peer = grouper(settle=0.0)
    a = mk("a", "a" * 16)
    peer.on_member(a, T0)
    peer.tick(T0)
    peer.on_member(replace(a, state="resolved", revision=2, resolved_at=T0 + 1), T0 + 1)
    [res] = peer.tick(T0 + 1)
    g = grouper(settle=0.0)
    g.on_announcement("prod", res.topic_id, res.doc)
    g.on_member(a, T0 + 2)  # a replayed retained "open" of that finished incident
    assert run(g, T0 + 2, T0 + 4) == [] and len(g.clears) == 1


def test_resolved_only_members_never_page_and_expire() -> None:
    g = grouper(settle=0.0, join_window=10.0)
    g.on_member(mk("a", "a" * 16, state="resolved", resolved_at=T0), T0)
    assert run(g, T0, T0 + 11) == []
    assert not g.groups and [c.member.node for c in g.clears] == ["a"]


def test_only_owned_partitions_are_taken() -> None:
    g = Grouper(fleet_settings(), "r1")
    assert g.on_member(mk("a", "a" * 16), T0) is False
    g.set_owned(range(16), T0)
    assert g.on_member(mk("a", "a" * 16), T0) is True
    _, lost = g.set_owned((), T0)
    assert lost and not g.groups


def test_lost_gpu_seconds_and_cost_are_extrapolated_for_open_stalls() -> None:
    g = grouper(settle=0.0)
    m = replace(mk("a", "a" * 16, gpu_seconds=80.0), cost=2.0)
    g.on_member(m, T0)
    [tr] = g.tick(m.onset + 100)
    assert tr.doc["gpu_seconds_lost"] == pytest.approx(800.0)
    assert tr.doc["cost_lost"] == pytest.approx(20.0)
    assert "800 GPU-seconds lost (20.00 cost)" in tr.doc["summary"]
