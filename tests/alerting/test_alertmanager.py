"""Against a real Alertmanager (Debian prometheus-alertmanager) on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.engine.db import IncidentDB
from fabricwatch.engine.incidents import IncidentTransition
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.sinks import AlertmanagerSink, Route, Router
from tests.alerting.conftest import Alertmanager, make_incident, opened, resolved

pytestmark = pytest.mark.integration


async def wait_for(pred: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.1)
    return False


def ours(am: Alertmanager, node: str) -> list[dict[str, Any]]:
    return [a for a in am.alerts() if a["labels"].get("node") == node]


async def test_firing_then_resolved(alertmanager: Alertmanager, tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    box = Outbox(db.connect())
    router = Router("prod", [Route("am", min_severity="info")])
    db.add_transition_hook(router)
    now = time.time()
    sink = AlertmanagerSink("am", alertmanager.url, resend_interval=1.0, timeout=5.0)
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.1, backoff_max=0.5))
    router.set_listener(sender.wake)
    await sender.start()
    try:
        db.record([opened("a" * 16, node="am-node-1", onset=now - 70)])
        assert await sender.drain(within=10.0)
        assert await wait_for(lambda: len(ours(alertmanager, "am-node-1")) == 1)
        (alert,) = ours(alertmanager, "am-node-1")
        labels = alert["labels"]
        assert labels == {
            "alertname": "FabricwatchGPUStall",
            "cause": "pfc_storm",
            "node": "am-node-1",
            "culprit": "switch:leaf1:swp12:3",
            "severity": "critical",
            "cluster": "prod",
        }
        assert alert["status"]["state"] == "active"
        assert "evidence 0" in alert["annotations"]["evidence"]
        first_ends = alert["endsAt"]

        # Re-sent while firing: Alertmanager's endsAt moves forward (interval 1 s here).
        assert await wait_for(
            lambda: any(a["endsAt"] != first_ends for a in ours(alertmanager, "am-node-1")),
            within=10.0,
        )
        assert sender.stats()["am"].refreshes >= 1

        # A significant update changes the cause: the old label set ends at once and
        # only the new one is active.
        db.record(
            [
                IncidentTransition(
                    "updated",
                    time.time(),
                    make_incident("a" * 16, node="am-node-1", onset=now - 70,
                                  cause="ecn_congestion", revision=2),
                )
            ]
        )  # fmt: skip
        assert await sender.drain(within=10.0)
        assert await wait_for(
            lambda: (
                [a["labels"]["cause"] for a in ours(alertmanager, "am-node-1")]
                == ["ecn_congestion"]
            )
        )

        db.record(
            [
                resolved(
                    "a" * 16, node="am-node-1", onset=now - 70, cause="ecn_congestion", revision=3
                )
            ]
        )
        assert await sender.drain(within=10.0)
        # Resolved alerts (endsAt in the past) leave the active list.
        assert await wait_for(lambda: ours(alertmanager, "am-node-1") == [], within=10.0)
    finally:
        await sender.close()
        db.close()


async def test_down_alertmanager_is_retried_until_it_answers(
    alertmanager: Alertmanager, tmp_path: Path
) -> None:
    from tests.conftest import free_port

    box = Outbox.open(tmp_path / "o.db")
    router = Router("prod", [Route("am", min_severity="info")])
    with box.transaction() as conn:
        router(conn, opened("b" * 16, node="am-node-2", onset=time.time() - 5))
    down = AlertmanagerSink("am", f"http://127.0.0.1:{free_port()}", timeout=0.5)
    sender = OutboxSender(box, [down], RetryPolicy(backoff_initial=0.05, backoff_max=0.1))
    await sender.start()
    try:
        assert await wait_for(lambda: sender.stats()["am"].failed >= 2, within=10.0)
    finally:
        await sender.close()
    # Restart against the live one: the pending row is what gets delivered.
    up = AlertmanagerSink("am", alertmanager.url, timeout=5.0)
    sender = OutboxSender(box, [up])
    await sender.start()
    try:
        assert await sender.drain(within=10.0)
    finally:
        await sender.close()
    assert await wait_for(lambda: len(ours(alertmanager, "am-node-2")) == 1)
