"""The durable outbox: schema, enqueue in the engine's transaction, routing,
ordering, backoff, Retry-After, dead letters, 410, flood control, restart."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import to_json
from fabricwatch.errors import StoreError
from fabricwatch.outputs.outbox import (
    Delivery,
    Outbox,
    build_event,
    dedup_key,
    enqueue,
    event_id,
    settle_pending,
)
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.sinks import Route, Router, SlackSink, WebhookSink
from fabricwatch.outputs.sinks.protocol import SinkError
from fabricwatch.outputs.token_bucket import TokenBucket
from tests.alerting.conftest import Receiver, make_incident, new_secret, opened, resolved


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Recorder:
    """A sink that records batches and fails on demand (no network: pure outbox logic)."""

    def __init__(self, name: str = "rec", *, max_batch: int = 1) -> None:
        self._name = name
        self._max_batch = max_batch
        self.batches: list[list[str]] = []
        self.failures: list[SinkError | Exception] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def timeout(self) -> float:
        return 2.0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def deliver(self, batch: Sequence[Delivery]) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.batches.append([d.event_id for d in batch])


def fill(box: Outbox, sinks: Sequence[str], n: int, *, start: int = 0) -> list[str]:
    router = Router("c1", [Route(s) for s in sinks], clock=box.clock)
    with box.transaction() as conn:
        for i in range(start, start + n):
            router(conn, opened(f"{i:016x}"))
    return [event_id(dedup_key("c1", f"{i:016x}"), "opened", 1) for i in range(start, start + n)]


def test_keys_are_stable_and_distinct() -> None:
    a = dedup_key("c1", "k1")
    assert a == dedup_key("c1", "k1")
    assert a != dedup_key("c2", "k1") and a != dedup_key("c1", "k2")
    assert len(a) <= 255
    assert event_id(a, "opened", 1) == event_id(a, "opened", 1)
    assert (
        len({event_id(a, "opened", 1), event_id(a, "updated", 2), event_id(a, "resolved", 3)}) == 3
    )


def test_enqueue_is_idempotent_and_survives_reopen(tmp_path: Path) -> None:
    box = Outbox.open(tmp_path / "o.db")
    inc = make_incident("k1")
    ev = build_event(
        transition="opened", at=1.0, incident=to_json(inc), cluster="c", severity="critical"
    )
    with box.transaction() as conn:
        assert enqueue(conn, "s", ev, now=1.0)
        assert not enqueue(conn, "s", ev, now=2.0)
    box.conn.close()
    again = Outbox.open(tmp_path / "o.db")
    rows = again.head("s", 10)
    assert len(rows) == 1
    assert rows[0].event()["data"]["key"] == "k1"
    assert rows[0].event()["type"] == "incident.opened"


def test_settle_pending_marks_only_that_incidents_rows_up_to_the_revision(
    tmp_path: Path,
) -> None:
    box = Outbox.open(tmp_path / "o.db")
    with box.transaction() as conn:
        for key, rev in (("k1", 1), ("k1", 2), ("k1", 3), ("k2", 1)):
            ev = build_event(
                transition="updated",
                at=float(rev),
                incident=to_json(make_incident(key, revision=rev)),
                cluster="c",
                severity="critical",
            )
            assert enqueue(conn, "s", ev, now=1.0)
    (dead,) = [d.id for d in box.rows() if (d.incident_key, d.revision) == ("k1", 1)]
    box.mark_dead([dead], "gone")  # already given up on: stays dead
    with box.transaction() as conn:
        n = settle_pending(conn, "k1", up_to_revision=2, now=9.0, reason="paged by peer r2")
    assert n == 1  # rev 2 only: rev 1 is dead, rev 3 is newer, k2 is another incident
    state = {(d.incident_key, d.revision): (d.state, d.last_error) for d in box.rows()}
    assert state == {
        ("k1", 1): ("dead", "gone"),
        ("k1", 2): ("delivered", "paged by peer r2"),
        ("k1", 3): ("pending", None),
        ("k2", 1): ("pending", None),
    }


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    box = Outbox.open(tmp_path / "o.db")
    box.conn.execute("UPDATE schema_parts SET version = 99 WHERE name = 'outbox'")
    box.conn.close()
    with pytest.raises(StoreError, match="newer"):
        Outbox.open(tmp_path / "o.db")


def test_enqueue_rides_the_incident_transaction(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    box = Outbox(db.connect())
    router = Router("c1", [Route("a"), Route("b", causes=frozenset({"link_down"}))])
    db.add_transition_hook(router)
    db.record([opened("k1")])
    assert [d.sink for d in box.head("a", 10)] == ["a"]
    assert box.head("b", 10) == []  # routed away by cause

    def boom(conn: sqlite3.Connection, tr: object) -> None:
        raise RuntimeError("later hook fails")

    db.add_transition_hook(boom)
    with pytest.raises(RuntimeError):
        db.record([opened("k2")])
    # Rolled back together: neither the incident nor its outbox row exists.
    assert db.get("k2") is None
    assert [d.incident_key for d in box.head("a", 10)] == ["k1"]
    db.close()


def test_routing_filters_and_follow_ups(tmp_path: Path) -> None:
    box = Outbox.open(tmp_path / "o.db")
    routes = [
        Route("crit", min_severity="critical"),
        Route("west", nodes=("west-*",)),
        Route("noupd", send_updates=False),
    ]
    router = Router("c1", routes)
    with box.transaction() as conn:
        tr = opened("k1", node="west-3")
        routed = router.route(conn, tr.kind, tr.at, to_json(tr.incident))
        assert sorted(routed) == ["crit", "noupd", "west"]
        assert router.route(conn, "opened", 1.0, to_json(make_incident("k2", node="east-1"))) == [
            "crit",
            "noupd",
        ]
        slow = to_json(make_incident("k3", kind="slowdown", node="east-1"))
        assert router.route(conn, "opened", 1.0, slow) == ["noupd"]  # warning < critical
        upd = to_json(make_incident("k1", node="west-3", revision=2))
        assert sorted(router.route(conn, "updated", 2.0, upd)) == ["crit", "west"]
        # A sink never told of k3 gets no resolve; one that was told always does,
        # even though the incident would no longer match its filters.
        res = to_json(
            make_incident("k3", kind="slowdown", node="east-1", state="resolved", revision=2)
        )
        assert router.route(conn, "resolved", 3.0, res) == ["noupd"]
    assert {d.transition for d in box.rows(sink="crit")} == {"opened", "updated"}


async def test_ordered_backoff_then_delivery() -> None:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    ids = fill(box, ["rec"], 3)
    sink = Recorder()
    sink.failures = [SinkError("HTTP 503"), SinkError("HTTP 503")]
    policy = RetryPolicy(backoff_initial=0.05, backoff_max=0.2)
    sender = OutboxSender(box, [sink], policy, rng=random.Random(1))
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert [b[0] for b in sink.batches] == ids  # order kept across retries
    rows = {d.event_id: d for d in box.rows()}
    assert rows[ids[0]].attempts == 3 and rows[ids[1]].attempts == 1
    st = sender.stats()["rec"]
    assert (st.attempted, st.succeeded, st.failed, st.dead) == (5, 3, 2, 0)


def test_backoff_grows_with_jitter_floor() -> None:
    p = RetryPolicy(backoff_initial=1.0, backoff_max=60.0)
    rng = random.Random(7)
    delays = [p.backoff(n, rng) for n in range(1, 10)]
    for n, d in enumerate(delays, start=1):
        base = min(60.0, 2.0 ** (n - 1))
        assert base / 2 <= d <= base
    spread = {round(p.backoff(3, rng), 6) for _ in range(20)}
    assert len(spread) > 10  # jittered


async def test_retry_after_wins_and_max_age_dead_letters() -> None:
    clock = Clock()
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None), clock=clock)
    (eid,) = fill(box, ["rec"], 1)
    sink = Recorder()
    sink.failures = [SinkError("HTTP 429", retry_after=120.0)]
    sender = OutboxSender(
        box, [sink], RetryPolicy(max_age=600.0, backoff_max=5.0), rng=random.Random(2)
    )
    w = sender._workers["rec"]
    wait = await sender._step(w)
    assert wait == 0.0
    row = box.head("rec", 1)[0]
    assert 120.0 <= row.next_attempt_at - clock.t <= 121.0  # Retry-After, not the 5 s backoff cap
    assert 119.0 <= await sender._step(w) <= 121.0  # waits, does not send
    assert sink.batches == []
    clock.t += 700.0  # older than max_age before it could go again
    await sender._step(w)
    (dead,) = box.rows(state="dead")
    assert dead.event_id == eid and "max_age" in (dead.last_error or "")
    assert "429" in (dead.last_error or "")
    assert sender.stats()["rec"].dead == 1


async def test_rejected_batch_is_split_and_only_the_bad_row_dies() -> None:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    ids = fill(box, ["rec"], 4)
    sink = Recorder(max_batch=10)
    sink.failures = [SinkError("HTTP 400", retryable=False), SinkError("HTTP 400", retryable=False)]
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.01))
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert [r.event_id for r in box.rows(state="dead")] == [ids[0]]
    assert [e for b in sink.batches for e in b] == ids[1:]
    assert sink.batches[0] == [ids[1]]  # retried one by one after the group was rejected


async def test_gone_disables_the_sink_and_keeps_rows() -> None:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    fill(box, ["rec", "other"], 2)
    gone, other = Recorder(), Recorder("other")
    gone.failures = [SinkError("HTTP 410", retryable=False, gone=True)]
    sender = OutboxSender(box, [gone, other])
    await sender.start()
    try:
        assert await sender.drain(within=10.0)  # disabled sinks do not count
    finally:
        await sender.close()
    assert sender.stats()["rec"].disabled
    assert len(box.rows(state="pending", sink="rec")) == 2
    assert len(other.batches) == 2


async def test_sink_bug_is_contained() -> None:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    fill(box, ["rec"], 1)
    sink = Recorder()
    sink.failures = [KeyError("bug")]
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.01))
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert len(sink.batches) == 1
    assert box.rows()[0].attempts == 2


def test_token_bucket() -> None:
    mono = Clock(0.0)
    b = TokenBucket(2.0, 3, monotonic=mono)
    for _ in range(3):
        assert b.delay() == 0.0
        b.take()
    assert b.delay() == pytest.approx(0.5)
    mono.t += 0.5
    assert b.delay() == 0.0
    unlimited = TokenBucket(0.0, 1)
    for _ in range(100):
        unlimited.take()
    assert unlimited.delay() == 0.0


async def test_storm_is_grouped_and_rate_limited(receiver: Receiver) -> None:
    """500 incidents at once: a handful of Slack messages, every incident in one of them."""
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    fill(box, ["slack"], 500)
    sink = SlackSink("slack", receiver.url, max_batch=100, timeout=5.0)
    sender = OutboxSender(box, [sink], limits={"slack": TokenBucket(20.0, 2)})
    await sender.start()
    try:
        assert await sender.drain(within=30.0)
    finally:
        await sender.close()
    assert len(receiver.requests) == 5
    texts = [json.loads(r.body)["blocks"][0]["text"]["text"] for r in receiver.requests]
    # One line per (transition, cause, culprit): the storm reads as one fault.
    assert all(t.count("\n") == 1 for t in texts)
    assert sum(int(t.split(" ")[1]) for t in texts) == 500
    assert all(
        "100 opened — *PFC pause storm* — culprit `switch:leaf1:swp12:3`" in t for t in texts
    )
    assert sender.stats()["slack"].succeeded == 500


async def test_pending_rows_resume_after_restart(tmp_path: Path, receiver: Receiver) -> None:
    path = tmp_path / "o.db"
    box = Outbox.open(path)
    ids = fill(box, ["hook"], 3)
    box.conn.close()  # the process "stops" before sending anything
    box2 = Outbox.open(path)
    sink = WebhookSink("hook", receiver.url, new_secret())
    sender = OutboxSender(box2, [sink])
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert [r.headers["webhook-id"] for r in receiver.ok()] == ids


def test_prune_keeps_pending(tmp_path: Path) -> None:
    clock = Clock(0.0)
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None), clock=clock)
    fill(box, ["a"], 3)
    first = box.head("a", 3)
    box.mark_delivered([first[0].id])
    box.mark_dead([first[1].id], "x")
    clock.t = 10_000.0
    assert box.prune(3600.0) == 2
    assert [d.state for d in box.rows()] == ["pending"]


def test_resolved_transition_helper() -> None:
    tr = resolved("k9")
    ev = build_event(
        transition=tr.kind,
        at=tr.at,
        incident=to_json(tr.incident),
        cluster="c",
        severity="critical",
    )
    assert ev["type"] == "incident.resolved" and ev["data"]["state"] == "resolved"


@pytest.mark.parametrize(
    "garbage", ["{not json", "[]", '{"type": "incident.opened"}', "", '{"data": 3}']
)
async def test_corrupt_rows_are_dead_lettered_not_retried(garbage: str) -> None:
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None))
    ids = fill(box, ["rec"], 2)
    box.conn.execute("UPDATE outbox SET payload = ? WHERE event_id = ?", (garbage, ids[0]))
    sink = Recorder()
    sender = OutboxSender(box, [sink])
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert sink.batches == [[ids[1]]]
    (dead,) = box.rows(state="dead")
    assert dead.event_id == ids[0] and "corrupt" in (dead.last_error or "")


async def test_unwritable_database_degrades_and_recovers(tmp_path: Path) -> None:
    """A locked database (another writer holds it) stalls delivery; it resumes afterwards."""
    path = tmp_path / "o.db"
    box = Outbox.open(path)
    (eid,) = fill(box, ["rec"], 1)
    box.conn.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    sink = Recorder()
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_max=0.2))
    await sender.start()
    try:
        for _ in range(100):
            if sink.batches:
                break
            await asyncio.sleep(0.02)
        # The send happened but marking it delivered could not be written yet.
        await asyncio.sleep(0.3)
        assert box.rows()[0].state == "pending"
        other.execute("ROLLBACK")
        other.close()
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert [d.state for d in box.rows()] == ["delivered"]
    assert sink.batches == [[eid]]  # not sent again while the write was refused


def test_firing_lists_latest_state_per_incident() -> None:
    clock = Clock(10_000.0)
    box = Outbox(sqlite3.connect(":memory:", isolation_level=None), clock=clock)
    router = Router("c1", [Route("am", min_severity="info")], clock=clock)
    with box.transaction() as conn:
        router(conn, opened("f1" * 8))  # stays firing
        router(conn, opened("f2" * 8))
        router(conn, resolved("f2" * 8))  # resolved just now
        router(conn, opened("f3" * 8))
        router(conn, resolved("f3" * 8))  # resolved long ago
        router(conn, opened("f4" * 8))  # not delivered yet: the worker sends it
    rows = box.head("am", 10)
    box.mark_delivered([r.id for r in rows if r.incident_key == "f3" * 8])
    clock.t += 600.0
    box.mark_delivered([r.id for r in rows if r.incident_key in ("f1" * 8, "f2" * 8)])
    firing = box.firing("am", resolved_within=300.0)
    assert [(d.incident_key, d.transition) for d in firing] == [
        ("f1" * 8, "opened"),
        ("f2" * 8, "resolved"),
    ]
