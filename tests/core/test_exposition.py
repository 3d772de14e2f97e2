"""Golden /metrics exposition from fixed readings, linted by the real promtool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from fabricwatch.outputs.exposition import (
    ReloadStatus,
    build_registry,
    choose_encoder,
    generate_text,
)
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


def _both(store: SnapshotStore) -> tuple[bytes, bytes]:
    reg = build_registry(store, list, ReloadStatus(True, 1.7e9), process_metrics=False)
    return generate_text(reg), generate_latest(reg)


def test_cached_text_path_writes_the_golden_bytes_and_survives_rescrapes() -> None:
    store = SnapshotStore()
    store.register("fake", SPECS)
    labels = ("leaf1", "swp12", "3", "rx")
    for i in range(3):
        store.ingest(
            "fake",
            [Reading(SPECS[1].name, labels, 1000 + 7 * i), Reading(SPECS[0].name, labels, i / 3)],
            float(i),
        )
        fast, reference = _both(store)
        assert fast == reference
    # A series that expires and comes back is rendered afresh.
    store.expire(1e9)
    store.ingest("fake", [Reading(SPECS[0].name, ("leaf2", 'p"\\\n', "3", "tx"), 5e-7)], 1e9)
    fast, reference = _both(store)
    assert fast == reference and b"leaf1" not in fast


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(
        st.tuples(st.text(max_size=6), st.text(max_size=6)), min_size=1, max_size=8, unique=True
    ),
    values=st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=1e300),
        min_size=8,
        max_size=8,
    ),
)
def test_cached_text_path_equals_prometheus_client(
    labels: list[tuple[str, str]], values: list[float]
) -> None:
    store = SnapshotStore()
    g = MetricSpec("fabricwatch_t_b_gauge", MetricKind.GAUGE, 'h\\e"lp\nx', ("zeta", "alpha"))
    c = MetricSpec("fabricwatch_t_a_count", MetricKind.COUNTER, "c", ("x", "b"))
    store.register("fake", [g, c, SPECS[2]])
    readings = [Reading(g.name, lv, v) for lv, v in zip(labels, values, strict=False)]
    readings += [Reading(c.name, lv, v) for lv, v in zip(labels, values, strict=False)]
    hist = HistogramValue(((0.5, 1.0), (2.0, values[0])), values[1], values[2])
    readings.append(Reading(SPECS[2].name, ("p",), 0.0, histogram=hist))
    store.ingest("fake", readings, 0.0)
    fast, reference = _both(store)
    assert fast == reference


@pytest.mark.integration
def test_cached_text_path_passes_promtool_check_metrics() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: the test command installs the Debian 'prometheus' package"
    store = SnapshotStore()
    store.register("fake", SPECS)
    labels = ("leaf1", "swp12", "3", "rx")
    store.ingest(
        "fake", [Reading(SPECS[1].name, labels, 1000), Reading(SPECS[0].name, labels, 1)], 0
    )
    reg = build_registry(store, list, ReloadStatus(True, 1.7e9), process_metrics=True)
    out = subprocess.run(
        [promtool, "check", "metrics"],
        input=generate_text(reg),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out


def test_text_scrapes_negotiate_the_cached_path_and_openmetrics_the_library() -> None:
    encoder, content_type = choose_encoder("text/plain;version=0.0.4")
    assert encoder is generate_text and "0.0.4" in content_type
    assert choose_encoder("")[0] is generate_text
    encoder, content_type = choose_encoder("application/openmetrics-text;version=1.0.0")
    assert encoder is not generate_text and content_type.startswith("application/openmetrics-text")


def test_cached_text_path_formats_values_as_prometheus_client_at_the_edges() -> None:
    """The cached path writes repr() itself below 1e6 and leaves the rest (Go's
    exponent form from 1e6 on, ints, bools) to prometheus_client: the same bytes
    at each edge."""
    edges = [-0.0, 0.0, 5e-324, 999999.9999999999, 1e6, 1234567.0, 1e16, -1e6, -2.5e300, 7, True]
    store = SnapshotStore()
    g = MetricSpec("fabricwatch_t_edge", MetricKind.GAUGE, "e", ("i",))
    store.register("fake", [g])
    store.ingest("fake", [Reading(g.name, (str(i),), v) for i, v in enumerate(edges)], 0.0)
    fast, reference = _both(store)
    assert fast == reference
    assert b'fabricwatch_t_edge{i="4"} 1e+06\n' in fast
    assert b'fabricwatch_t_edge{i="0"} -0.0\n' in fast
