"""One alerting path by design: with both the Prometheus rule and the node's
Alertmanager sink on, a stall pages once.

Real parts end to end: a real Prometheus scrapes a loopback target that shows a
stalled node and evaluates deploy/prometheus/rules.yml as shipped
(FabricwatchStallIncidentOpen, ``for: 30s``); the node's AlertmanagerSink sends
FabricwatchGPUStall for the same incident through the real outbox; a real
Alertmanager runs deploy/alertmanager/alertmanager.yml (receivers pointed at a
loopback HTTP receiver, timings shortened) and must notify once.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from fabricwatch.engine.db import IncidentDB
from fabricwatch.outputs.outbox import Outbox
from fabricwatch.outputs.sender import OutboxSender, RetryPolicy
from fabricwatch.outputs.sinks import AlertmanagerSink, Route, Router
from tests.alerting.conftest import Receiver, opened, wait_port
from tests.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
AM_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
NODE = "gpu-node-01"
CLUSTER = "lab"
RUNBOOK_BASE = "https://wiki.test/fabricwatch/runbook.md"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _ready(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{what} not ready within 30 s")


def example_config(receiver_url: str) -> dict[str, Any]:
    """The shipped routing with test receivers and timings short enough to see repeats."""
    cfg: dict[str, Any] = yaml.safe_load(AM_EXAMPLE.read_text(encoding="utf-8"))
    for rcv in cfg["receivers"]:
        for hook in rcv.get("webhook_configs", []):
            hook["url"] = f"{receiver_url}/{rcv['name']}"
    cfg["route"]["group_wait"] = "1s"
    cfg["route"]["group_interval"] = "2s"
    return cfg


@pytest.fixture
def alertmanager_example(tmp_path: Path, receiver: Receiver) -> Iterator[str]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (Debian package prometheus-alertmanager)")
    conf = tmp_path / "alertmanager.yml"
    conf.write_text(yaml.safe_dump(example_config(receiver.url)), encoding="utf-8")
    port = free_port()
    log = (tmp_path / "am.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={conf}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_port(port, proc, "alertmanager", within=20.0)
        _ready(url, proc, "alertmanager")
        yield url
    finally:
        _stop(proc)


@pytest.fixture
async def stalled_target() -> AsyncIterator[int]:
    """A scrape target showing 2 stalled GPUs on one node (what the daemon exports then)."""
    body = (
        "# TYPE fabricwatch_gpu_stalled gauge\n"
        'fabricwatch_gpu_stalled{gpu="0",cause="pfc_storm"} 1\n'
        'fabricwatch_gpu_stalled{gpu="1",cause="pfc_storm"} 1\n'
        'fabricwatch_gpu_stalled{gpu="2",cause="none"} 0\n'
    )

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


@pytest.fixture
def prometheus(tmp_path: Path, stalled_target: int, alertmanager_example: str) -> Iterator[str]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (Debian package prometheus)")
    am_host = alertmanager_example.removeprefix("http://")
    cfg = {
        "global": {
            "scrape_interval": "1s",
            "evaluation_interval": "1s",
            # Where this site serves docs/runbook.md: the rules' runbook_url base.
            "external_labels": {"fabricwatch_runbook_base": RUNBOOK_BASE},
        },
        "rule_files": [str(RULES)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_host]}]}]},
        "scrape_configs": [
            {
                "job_name": "fabricwatch",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{stalled_target}"],
                        "labels": {"cluster": CLUSTER},
                    }
                ],
                # Targets by the node's name, as docs/deploy.md and the ServiceMonitor do.
                "relabel_configs": [
                    {"target_label": "instance", "replacement": f"{NODE}:9477"},
                ],
            }
        ],
    }
    conf = tmp_path / "prometheus.yml"
    conf.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--rules.alert.resend-delay=1s",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_port(port, proc, "prometheus", within=20.0)
        _ready(url, proc, "prometheus")
        yield url
    finally:
        _stop(proc)


async def wait_for(pred: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.25)
    return False


def test_shipped_example_passes_amtool(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian package prometheus-alertmanager)")
    proc = subprocess.run(
        [amtool, "check-config", str(AM_EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout and "2 inhibit rules" in proc.stdout
    # amtool reads what it is given: a broken copy fails, so the check is real.
    bad = tmp_path / "bad.yml"
    bad.write_text(AM_EXAMPLE.read_text().replace("equal: [cluster, node, cause]", "equal: 7"))
    broken = subprocess.run(
        [amtool, "check-config", str(bad)], capture_output=True, timeout=60, check=False
    )
    assert broken.returncode != 0


def test_routing_sends_both_stall_alerts_to_oncall(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian package prometheus-alertmanager)")
    for name in ("FabricwatchGPUStall", "FabricwatchStallIncidentOpen"):
        proc = subprocess.run(
            [
                amtool,
                "config",
                "routes",
                "test",
                f"--config.file={AM_EXAMPLE}",
                f"alertname={name}",
                "severity=critical",
                "cause=pfc_storm",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.stdout.strip() == "fabricwatch-oncall", proc.stdout + proc.stderr


async def test_double_page_collapses_to_one_notification(
    tmp_path: Path, receiver: Receiver, alertmanager_example: str, prometheus: str
) -> None:
    # The node's sink, as the daemon wires it (cluster from daemon.cluster).
    db = IncidentDB.in_state_dir(tmp_path / "state")
    box = Outbox(db.connect())
    router = Router(CLUSTER, [Route("am", min_severity="info")])
    db.add_transition_hook(router)
    sink = AlertmanagerSink("am", alertmanager_example, resend_interval=5.0, timeout=5.0)
    sender = OutboxSender(box, [sink], RetryPolicy(backoff_initial=0.1, backoff_max=0.5))
    router.set_listener(sender.wake)
    await sender.start()
    try:
        db.record([opened("c" * 16, node=NODE, cause="pfc_storm", onset=time.time() - 5)])
        assert await sender.drain(within=10.0)

        def alerts() -> dict[str, dict[str, Any]]:
            got = _get(alertmanager_example + "/api/v2/alerts")
            return {a["labels"]["alertname"]: a for a in got}

        # Prometheus needs `for: 30s` (plus a scrape and an evaluation) to raise its alert.
        assert await wait_for(lambda: "FabricwatchStallIncidentOpen" in alerts(), within=90.0), (
            tmp_path / "prometheus.log"
        ).read_text()[-2000:]
        both = alerts()
        rule, node = both["FabricwatchStallIncidentOpen"], both["FabricwatchGPUStall"]
        for label in ("cluster", "node", "cause"):
            assert rule["labels"][label] == node["labels"][label], label
        assert rule["status"]["state"] == "suppressed"
        assert rule["status"]["inhibitedBy"] == [node["fingerprint"]]
        assert rule["annotations"]["runbook_url"] == (
            f"{RUNBOOK_BASE}#fabricwatchstallincidentopen"
        )
        # Several group intervals (2 s) and sink resends (5 s) later: still one page.
        await asyncio.sleep(8.0)
        pages = [json.loads(r.body) for r in receiver.requests]
        assert len(pages) == 1, [p["alerts"] for p in pages]
        (page,) = pages
        assert page["receiver"] == "fabricwatch-oncall"
        assert [a["labels"]["alertname"] for a in page["alerts"]] == ["FabricwatchGPUStall"]
        assert page["groupLabels"] == {"cluster": CLUSTER, "node": NODE, "cause": "pfc_storm"}
    finally:
        await sender.close()
        db.close()


def _anchors(markdown: str) -> set[str]:
    out = set()
    for line in markdown.splitlines():
        if line.startswith(("## ", "### ")):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return out


def test_runbook_links_point_at_real_anchors() -> None:
    from fabricwatch.outputs.sinks.alertmanager import ALERTNAMES

    anchors = _anchors((REPO / "docs" / "runbook.md").read_text(encoding="utf-8"))
    for name in ALERTNAMES.values():
        assert name.lower() in anchors, f"docs/runbook.md has no section for {name}"
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule.get("annotations", {}).get("runbook_url")
            if url is None:
                continue
            assert "example.invalid" not in url and "$externalLabels" in url
            assert url.endswith("#" + rule["alert"].lower())
    for doc in ("alerting.md", "deploy.md", "switches.md"):
        text = (REPO / "docs" / doc).read_text(encoding="utf-8")
        for anchor in re.findall(r"runbook\.md#([a-z0-9-]+)", text):
            assert anchor in anchors, f"docs/{doc} links to missing runbook anchor {anchor}"
        for target, anchor in re.findall(r"\]\(([a-z-]+\.md)#([a-z0-9-]+)\)", text):
            assert anchor in _anchors((REPO / "docs" / target).read_text()), (doc, anchor)
