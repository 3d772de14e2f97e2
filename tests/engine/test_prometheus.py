"""Replay from a real Prometheus server loaded with promtool-backfilled data."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricwatch.cli import replay as cli_replay
from fabricwatch.engine.replay_openmetrics import write_openmetrics
from fabricwatch.testing.sim_scenarios import Injection, Scenario, flatten, run_live
from tests.conftest import free_port

from .test_replay import exporter_names

pytestmark = pytest.mark.integration

if shutil.which("promtool") is None or shutil.which("prometheus") is None:
    pytest.skip(
        "promtool/prometheus not installed (Debian package prometheus)", allow_module_level=True
    )


def scenario() -> Scenario:
    return Scenario(
        duration=700,
        injections=[
            Injection("pfc_storm", 150, 45, variant=0),
            Injection("nvlink_degraded", 330, 40, target=2),
            Injection("checkpoint_write", 520, 35),
        ],
        seed=31,
    )


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("prom")
    om = base / "data.om"
    with om.open("w") as f:
        write_openmetrics(
            flatten(scenario()),
            f.write,
            rename=exporter_names,
            extra_labels={"node": "n1", "job": "fabricwatch"},
        )
    yield from serve(base, om)


def serve(base: Path, om: Path) -> Iterator[str]:
    """Backfill an OpenMetrics file with promtool and serve it with a real Prometheus;
    yields its URL (also used by the fleet replay tests)."""
    tsdb = base / "tsdb"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cfg = base / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    log = (base / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "prometheus did not become ready: "
                    + (base / "prometheus.log").read_text()[-2000:]
                )
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_replay_from_prometheus_matches_live(
    prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = scenario()
    live = run_live(sc, node="n1")
    expected = sorted(
        {(t.incident.key, t.incident.cause, t.incident.culprit.key, t.incident.onset) for t in live}
    )
    parser = argparse.ArgumentParser()
    cli_replay.configure_parser(parser)
    args = parser.parse_args(
        [
            "--prometheus",
            prometheus,
            "--from",
            str(sc.start_ts - 1),
            "--to",
            str(sc.start_ts + sc.duration + 1),
            "--match",
            "node=n1",
            "--chunk",
            "5m",
            "--json",
        ]
    )
    assert cli_replay.run(args) == 0
    docs = json.loads(capsys.readouterr().out)
    got = sorted((d["key"], d["cause"], d["culprit"]["key"], d["onset_unix"]) for d in docs)
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], abs=1e-3)
    assert {d["node"] for d in docs} == {"n1"}
    # a matcher selecting nothing is a clear error, not an empty success
    args = parser.parse_args(
        [
            "--prometheus",
            prometheus,
            "--from",
            str(sc.start_ts),
            "--to",
            str(sc.start_ts + 60),
            "--match",
            "node=elsewhere",
        ]
    )
    assert cli_replay.run(args) == 1
    assert "no usable samples" in capsys.readouterr().err
