"""Fixtures for the deploy artefacts: the exporter catalogue and a loaded Prometheus."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dashboards.catalogue import Catalogue, CatalogueError, build_catalogue
from dashboards.promserver import PrometheusServer, backfill, tools_available
from dashboards.telemetry import simulate

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "rules_test.yml"
UNIT = DEPLOY / "fabricwatch.service"
K8S = DEPLOY / "kubernetes"
DASHBOARDS = REPO / "dashboards"
RUNBOOK = REPO / "docs" / "runbook.md"

SIM_DURATION = 3600.0
SIM_STEP = 30.0


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    """The exporter's real catalogue (every registered collector + engine + self metrics)."""
    try:
        return build_catalogue(RULES)
    except CatalogueError as exc:
        pytest.fail(f"cannot build the metric catalogue: {exc}")


def need(*tools: str) -> None:
    """Skip when a program the test drives is not installed."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian package prometheus / systemd)")


@dataclass(frozen=True)
class LoadedPrometheus:
    """A running Prometheus holding ``[start, end]`` of simulated telemetry."""

    server: PrometheusServer
    start: float
    end: float
    step: float


@pytest.fixture(scope="session")
def loaded_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadedPrometheus]:
    """Simulated fleet telemetry, backfilled with promtool, served by a real prometheus."""
    if not tools_available():
        pytest.skip("promtool/prometheus not installed (Debian package prometheus)")
    work = tmp_path_factory.mktemp("prometheus")
    # Whole minutes, an hour ago: inside retention, outside the head block.
    start = float(int(time.time() // 60 * 60 - SIM_DURATION - 600))
    text = simulate(start, SIM_DURATION, SIM_STEP, gpus=4, links=2)
    om = work / "telemetry.om"
    om.write_text(text, encoding="utf-8")
    tsdb = work / "tsdb"
    backfill(om, tsdb)
    om.unlink()
    with PrometheusServer(tsdb, work) as server:
        yield LoadedPrometheus(server, start, start + SIM_DURATION, SIM_STEP)
