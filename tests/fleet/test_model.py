"""Parsing node events and member documents, grouping keys, partitions, ownership."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from fabricwatch.engine.evidence import Culprit
from fabricwatch.errors import ParseError
from fabricwatch.fleet.model import (
    FleetTopics,
    GroupKey,
    grouping_key,
    member_from_json,
    member_to_json,
    owner_of,
    parse_node_event,
    partition_of,
    split_node_topic,
)
from fabricwatch.fleet.settings import DEFAULT_GROUP_BY, CliqueSettings
from tests.fleet.conftest import envelope, incident, switch_culprit

PREFIX = "fabricwatch/v1"
TOPIC = "fabricwatch/v1/prod/gpu-01/incidents"


def event(**kw: Any) -> bytes:
    return envelope(incident("gpu-01", "0123456789abcdef", **kw), "opened", at=1_760_000_010.0)


def test_parses_the_envelope_the_node_daemon_publishes() -> None:
    ev = parse_node_event(event(), TOPIC, prefix=PREFIX)
    m = ev.member
    assert ev.transition == "opened" and ev.event_id.startswith("msg_")
    assert (m.cluster, m.node, m.node_name, m.key) == (
        "prod",
        "gpu-01",
        "gpu-01",
        "0123456789abcdef",
    )
    assert m.state == "open" and m.cause == "pfc_storm" and len(m.gpus) == 8
    assert m.label("switch") == "leaf-7" and m.label("port") == "swp12"
    assert m.onset == pytest.approx(1_760_000_000.0) and m.published == pytest.approx(
        1_760_000_010.0
    )
    assert m.evidence[0].score == pytest.approx(0.95)


def test_member_documents_round_trip() -> None:
    m = parse_node_event(event(), TOPIC, prefix=PREFIX).member
    back = member_from_json(json.dumps(member_to_json(m)).encode(), source="t")
    assert back == m
    res = replace(m, state="resolved", resolved_at=1_760_000_100.0, revision=3, cost=1.5)
    assert member_from_json(json.dumps(member_to_json(res)).encode(), source="t") == res


def _mutate(doc: dict[str, Any], path: str, value: Any) -> bytes:
    target = doc
    *head, last = path.split(".")
    for k in head:
        target = target[k]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return json.dumps(doc).encode()


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("schema", "something/v9", "envelope"),
        ("type", "incident.exploded", "unknown transition"),
        ("event_id", 7, "event_id"),
        ("data", [], "data: expected an object"),
        ("data.schema", "x", "incident/v1"),
        ("data.key", "../../etc", "not an incident key"),
        ("data.state", "maybe", "state"),
        ("data.gpus", "0-7", "gpus"),
        ("data.confidence", "high", "confidence"),
        ("data.gpu_seconds_lost", float("nan"), "gpu_seconds_lost"),
        ("data.onset_unix", _DELETE, "onset"),
        ("data.culprit", "leaf", "culprit"),
        ("data.evidence", {"a": 1}, "evidence"),
        ("timestamp", "yesterday", "timestamp"),
    ],
)
def test_garbage_fields_raise_parse_errors(path: str, value: Any, message: str) -> None:
    doc = json.loads(event())
    if path == "data.onset_unix":
        doc["data"]["onset"] = "not a time"
    with pytest.raises(ParseError, match=message):
        parse_node_event(_mutate(doc, path, value), TOPIC, prefix=PREFIX)


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xff\xfe", b"[1,2", b"null", b"42", b'"text"', b"{}"],
)
def test_non_envelopes_raise_parse_errors(payload: bytes) -> None:
    with pytest.raises(ParseError):
        parse_node_event(payload, TOPIC, prefix=PREFIX)


def test_every_truncation_of_a_real_event_is_rejected_cleanly() -> None:
    raw = event()
    for cut in range(0, len(raw) - 1, 7):
        with pytest.raises(ParseError):
            parse_node_event(raw[:cut], TOPIC, prefix=PREFIX)


def test_oversized_messages_are_rejected_before_parsing() -> None:
    with pytest.raises(ParseError, match="exceeds"):
        parse_node_event(b"{" + b" " * 5000 + b"}", TOPIC, prefix=PREFIX, max_bytes=1024)


@pytest.mark.parametrize(
    "topic",
    [
        "fabricwatch/v1/prod/gpu-01/status",
        "fabricwatch/v1/prod/incidents",
        "other/v1/prod/gpu-01/incidents",
        "fabricwatch/v1/_fleet/gpu-01/incidents",
        "fabricwatch/v1//gpu-01/incidents",
    ],
)
def test_foreign_topics_are_refused(topic: str) -> None:
    with pytest.raises(ParseError):
        split_node_topic(topic, PREFIX, "incidents")


def test_member_garbage_is_rejected() -> None:
    for payload in (b"{", b"{}", json.dumps({"schema": "fabricwatch.fleet-member/v1"}).encode()):
        with pytest.raises(ParseError):
            member_from_json(payload, source="t")


def member(**kw: Any) -> Any:
    return parse_node_event(event(**kw), TOPIC, prefix=PREFIX).member


def test_grouping_prefers_switch_then_storage_then_clique_then_job() -> None:
    strategies = DEFAULT_GROUP_BY
    assert grouping_key(member(), strategies) == GroupKey("switch", "leaf-7")
    nfs = Culprit("storage:ckpt", "storage_path", (("path", "ckpt"), ("server", "nfs1")))
    assert grouping_key(member(culprit=nfs, cause="storage_latency"), strategies) == GroupKey(
        "storage", "nfs1"
    )
    local = Culprit("storage:ckpt", "storage_path", (("path", "ckpt"),))
    assert grouping_key(member(culprit=local), strategies) == GroupKey("storage", "ckpt")
    link = Culprit("gpu:3:link:7", "nvlink", (("gpu", "3"), ("link", "7")))
    cliques = [CliqueSettings(name="nvl72-a", nodes=["gpu-0*"])]
    nv = member(culprit=link, cause="nvlink_degraded")
    assert grouping_key(nv, strategies, cliques) == GroupKey("nvlink", "nvl72-a")
    # Without a known clique the NVLink fault falls through to its job.
    assert grouping_key(nv, strategies) == GroupKey("job", "slurm:42")
    nic = Culprit("nic:mlx5_0:1", "nic_port", (("device", "mlx5_0"),))
    assert grouping_key(member(culprit=nic), strategies) == GroupKey("job", "slurm:42")
    assert grouping_key(member(culprit=nic, job=""), strategies) == GroupKey("node", "gpu-01")
    # Strategies can be turned off or reordered.
    assert grouping_key(member(), ["job", "switch"]) == GroupKey("job", "slurm:42")
    assert grouping_key(member(), ["storage"]) == GroupKey("node", "gpu-01")


def test_partitions_are_stable_and_spread() -> None:
    keys = [GroupKey("switch", f"leaf-{i}") for i in range(2000)]
    parts = [partition_of("prod", k, 64) for k in keys]
    assert parts == [partition_of("prod", k, 64) for k in keys]
    counts = [parts.count(p) for p in range(64)]
    assert min(counts) > 10 and max(counts) < 60


def test_rendezvous_ownership_moves_only_the_leaving_replicas_partitions() -> None:
    three = ["a", "b", "c"]
    before = {p: owner_of(p, three) for p in range(256)}
    assert set(before.values()) == set(three)
    after = {p: owner_of(p, ["a", "c"]) for p in range(256)}
    moved = [p for p in range(256) if before[p] != after[p]]
    assert moved and all(before[p] == "b" for p in moved)
    assert owner_of(1, []) is None
    # Order of the replica list does not matter.
    assert all(owner_of(p, ["c", "a", "b"]) == before[p] for p in range(256))


def test_topics() -> None:
    t = FleetTopics("fabricwatch/v1", "fleet")
    m = member()
    assert t.incidents_filter() == "$share/fleet/fabricwatch/v1/+/+/incidents"
    assert t.member(3, m) == "fabricwatch/v1/_fleet/fleet/p/3/prod/gpu-01/0123456789abcdef/o"
    assert t.member(3, replace(m, state="resolved")).endswith("/r")
    assert t.partition_from(t.member(3, m)) == 3
    assert t.partition_from("fabricwatch/v1/prod/gpu-01/status") is None
    assert t.group("prod", "ab") == "fabricwatch/v1/_fleet/fleet/groups/prod/ab"
    assert switch_culprit().key == "switch:leaf-7:swp12:3"
