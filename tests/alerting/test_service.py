"""Settings, the wired service (engine DB hook -> outbox -> sinks), self metrics
through the snapshot store, and the `incidents --deliveries` view."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import tomllib
from pathlib import Path

import pytest

from fabricwatch.cli import deliveries as cli_deliveries
from fabricwatch.engine.db import IncidentDB
from fabricwatch.errors import ConfigError
from fabricwatch.outputs.alerting import METRICS, AlertingService
from fabricwatch.outputs.settings import AlertingSettings, MqttSettings
from fabricwatch.settings import build, dumps_toml, to_table
from fabricwatch.store import SnapshotStore
from tests.alerting.conftest import Receiver, new_secret, opened, resolved

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerting.md"


def doc_toml(heading: str) -> dict[str, object]:
    text = DOC.read_text()
    section = text[text.index(heading) :]
    m = re.search(r"```toml\n(.*?)```", section, re.S)
    assert m
    return tomllib.loads(m.group(1))


def test_documented_config_is_valid() -> None:
    a = build(AlertingSettings, doc_toml("### Sinks")["alerting"], prefix="alerting")  # type: ignore[arg-type]
    assert [s.type for s in a.sinks] == ["alertmanager", "pagerduty", "slack", "webhook"]
    assert a.max_age == 86400.0 and a.backoff_max == 300.0
    m = build(MqttSettings, doc_toml("### MQTT")["mqtt"], prefix="mqtt")  # type: ignore[arg-type]
    assert m.tls and m.effective_port() == 8883 and m.metrics_interval == 30.0
    # Round trip through the sample-config writer.
    again = build(AlertingSettings, tomllib.loads(dumps_toml(to_table(a, redact=False))))
    assert again == a


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"sinks": [{"name": "a", "type": "slack", "url": "http://x"}] * 2}, "duplicate sink"),
        ({"sinks": [{"name": "mqtt", "type": "slack", "url": "http://x"}]}, "reserved"),
        ({"backoff_initial": "10m", "backoff_max": "1m"}, "backoff_initial"),
        ({"max_age": "0s"}, "alerting.max_age"),
        ({"max_age": "forever"}, "duration"),
        ({"sinks": {"name": "a"}}, "alerting.sinks"),
        ({"sinks": [{"name": "a", "type": "slack", "url": "http://x", "burst": -1}]}, "burst"),
        ({"retry": 3}, "unknown key"),
    ],
)
def test_bad_alerting_config(table: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(AlertingSettings, table, prefix="alerting")


def test_empty_config_is_valid() -> None:
    assert build(AlertingSettings, {}).sinks == []
    assert not build(MqttSettings, {}).enabled


async def test_service_end_to_end_with_self_metrics(tmp_path: Path, receiver: Receiver) -> None:
    secret = tmp_path / "whsec"
    secret.write_text(new_secret())
    alerting = build(
        AlertingSettings,
        {
            "backoff_initial": "50ms",
            "backoff_max": "100ms",
            "sinks": [
                {"name": "hook", "type": "webhook", "url": receiver.url,
                 "secret_file": str(secret), "min_severity": "info"},
            ],
        },
    )  # fmt: skip
    db = IncidentDB.in_state_dir(tmp_path)
    svc = AlertingService(alerting, MqttSettings(), db, node="n1", cluster="prod")
    db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
    assert svc.name == "alerting" and list(svc.metrics()) == list(METRICS)
    store = SnapshotStore()
    store.register(svc.name, svc.metrics())
    receiver.script = [500, 500]
    db.record([opened("1" * 16)])
    store.ingest(svc.name, await svc.collect(), 0.0)
    assert store.get("fabricwatch_alert_outbox_depth", ("hook",)).value == 1.0  # type: ignore[union-attr]
    await svc.start()
    try:
        assert await svc.sender.drain(within=10.0)
        db.record([resolved("1" * 16)])
        assert await svc.sender.drain(within=10.0)
    finally:
        await svc.close()
    store.ingest(svc.name, await svc.collect(), 10.0)
    get = store.get
    assert get("fabricwatch_alert_outbox_depth", ("hook",)).value == 0.0  # type: ignore[union-attr]
    assert get("fabricwatch_alert_outbox_oldest_age_seconds", ("hook",)).value == 0.0  # type: ignore[union-attr]
    attempts = get("fabricwatch_alert_delivery_attempts", ("hook",))
    assert attempts is not None and attempts.rate is not None
    assert attempts.rate.per_second == pytest.approx(4 / 10.0)  # 2 failures + 2 successes in 10 s
    ok = get("fabricwatch_alert_deliveries", ("hook", "succeeded"))
    assert ok is not None and ok.value == 2.0
    failed = get("fabricwatch_alert_deliveries", ("hook", "failed"))
    assert failed is not None and failed.value == 2.0
    assert [json.loads(r.body)["type"] for r in receiver.ok()] == [
        "incident.opened",
        "incident.resolved",
    ]
    db.close()


def _ns(tmp_path: Path, **kw: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli_deliveries.configure_parser(p)
    args = p.parse_args(["--state-dir", str(tmp_path)])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_deliveries_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_deliveries.run(_ns(tmp_path)) == 0
    assert "no incident database" in capsys.readouterr().out

    db = IncidentDB.in_state_dir(tmp_path)
    db.connect()
    assert cli_deliveries.run(_ns(tmp_path)) == 0  # a database without an outbox yet
    assert "no deliveries" in capsys.readouterr().out

    from fabricwatch.outputs.outbox import Outbox
    from fabricwatch.outputs.sinks import Route, Router

    box = Outbox(db.connect())
    db.add_transition_hook(Router("prod", [Route("a"), Route("b")]))
    db.record([opened("1" * 16)])
    db.record([opened("2" * 16)])
    rows = box.head("a", 10)
    box.mark_delivered([rows[0].id])
    box.mark_failed([rows[1].id], "HTTP 503: busy", box.clock() + 30)
    box.mark_dead([box.head("b", 1)[0].id], "older than max_age (last error: HTTP 500)")

    assert cli_deliveries.run(_ns(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["ID", "STATE", "SINK", "TRANSITION"]
    assert len(out) == 5
    text = "\n".join(out)
    assert "delivered" in text and "next try in" in text and "last error: HTTP 503" in text
    assert "older than max_age" in text

    assert cli_deliveries.run(_ns(tmp_path, delivery_state="dead", json=True)) == 0
    (line,) = capsys.readouterr().out.splitlines()
    row = json.loads(line)
    assert row["state"] == "dead" and row["sink"] == "b" and row["incident"] == "1" * 16

    assert cli_deliveries.run(_ns(tmp_path, sink="a", limit=1)) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    db.close()


def test_deliveries_view_on_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "incidents.sqlite3").write_bytes(b"this is not a database" * 100)
    assert cli_deliveries.run(_ns(tmp_path)) == 1
    assert "cannot read" in capsys.readouterr().out


def test_deliveries_parser_coexists_with_existing_options() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", action="store_true")
    p.add_argument("--state-dir", type=Path, default=Path("/srv"))
    cli_deliveries.configure_parser(p)  # must not raise on the duplicates
    args = p.parse_args(["--delivery-state", "pending", "--json"])
    assert args.delivery_state == "pending" and args.json and args.state_dir == Path("/srv")


def test_read_only_view_does_not_create_tables(tmp_path: Path) -> None:
    db = IncidentDB.in_state_dir(tmp_path)
    db.connect()
    db.close()
    assert cli_deliveries.list_deliveries(tmp_path / "incidents.sqlite3") == []
    conn = sqlite3.connect(tmp_path / "incidents.sqlite3")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "outbox" not in names


async def test_wake_on_enqueue_delivers_promptly(tmp_path: Path, receiver: Receiver) -> None:
    secret = tmp_path / "whsec"
    secret.write_text(new_secret())
    alerting = build(
        AlertingSettings,
        {"sinks": [{"name": "hook", "type": "webhook", "url": receiver.url,
                    "secret_file": str(secret), "min_severity": "info"}]},
    )  # fmt: skip
    db = IncidentDB.in_state_dir(tmp_path)
    svc = AlertingService(alerting, MqttSettings(), db, node="n1", cluster="prod")
    db.add_transition_hook(svc.router)  # as Daemon._attach_outputs
    await svc.start()
    try:
        await asyncio.sleep(0.1)  # the worker is idle, waiting
        db.record([opened("5" * 16)])
        for _ in range(500):
            if receiver.ok():
                break
            await asyncio.sleep(0.01)
        assert len(receiver.ok()) == 1
    finally:
        await svc.close()
        db.close()
