"""Golden /metrics exposition from fixed readings, linted by the real promtool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from fabricwatch.outputs.exposition import ReloadStatus, build_registry
from fabricwatch.readings import HistogramValue, MetricKind, MetricSpec, Reading
from fabricwatch.store import SnapshotStore
from fabricwatch.supervisor import CollectorState

GOLDEN = Path(__file__).parent.parent / "data" / "core" / "golden_metrics.txt"

SPECS = [
    MetricSpec(
        "fabricwatch_switch_pfc_pause_ratio",
        MetricKind.GAUGE,
        "Share of time the port was paused by PFC, 0-1.",
        ("switch", "port", "priority", "direction"),
    ),
    MetricSpec(
        "fabricwatch_switch_pfc_pause_frames",
        MetricKind.COUNTER,
        "PFC pause frames.",
        ("switch", "port", "priority", "direction"),
        bits=64,
    ),
    MetricSpec(
        "fabricwatch_storage_probe_latency_seconds",
        MetricKind.HISTOGRAM,
        "Write+fsync probe latency.",
        ("path",),
    ),
]


def _exposition() -> str:
    store = SnapshotStore()
    store.register("fake", SPECS)
    labels = ("leaf1", "swp12", "3", "rx")
    store.ingest("fake", [Reading(SPECS[1].name, labels, 1000)], 0.0)
    store.ingest(
        "fake",
        [
            Reading(SPECS[0].name, labels, 0.97),
            Reading(SPECS[0].name, ("leaf1", "swp13", "3", "rx"), 0.0),
            Reading(SPECS[1].name, labels, 6960),
            Reading(
                SPECS[2].name,
                ("checkpoint",),
                0.0,
                histogram=HistogramValue(((0.001, 1.0), (0.01, 4.0), (0.1, 5.0)), 6.0, 0.4567),
            ),
        ],
        1.0,
    )
    states = [
        CollectorState("switch", up=True, last_duration=0.012, last_success_wall=1.7e9),
        CollectorState("gpu", up=False, failures={"error": 3}, rejected_readings=2),
    ]
    reg = build_registry(store, lambda: states, ReloadStatus(True, 1.7e9), process_metrics=False)
    text = generate_latest(reg).decode()
    return re.sub(r'python="[^"]+"', 'python="X"', re.sub(r'version="[^"]+"', 'version="X"', text))


def test_golden_exposition() -> None:
    text = _exposition()
    if os.environ.get("FABRICWATCH_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "intended? regenerate with FABRICWATCH_REGEN_GOLDEN=1"


@pytest.mark.integration
def test_golden_exposition_passes_promtool_check_metrics() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: the test command installs the Debian 'prometheus' package"
    out = subprocess.run(
        [promtool, "check", "metrics"],
        input=_exposition(),
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "" and out.stderr.strip() == "", out.stdout + out.stderr
