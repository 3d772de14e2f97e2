"""The tooling behind the deploy tests: catalogue, PromQL helpers, Prometheus client."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

import fabricwatch.collectors
from dashboards import catalogue as cat
from dashboards.catalogue import Catalogue, CatalogueError, build_catalogue, parse_exposition
from dashboards.promserver import PrometheusError, PrometheusServer, backfill
from dashboards.queries import QueryError, concrete, metric_names, variable_expr
from fabricwatch.collector import CollectorFactory, CollectorSettings
from tests.deploy.conftest import REPO, RULES, LoadedPrometheus, need

SIGNALS = REPO / "docs" / "signals.md"


def signal_families() -> dict[str, tuple[str, list[str]]]:
    """docs/signals.md rows: family -> (kind, labels)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for line in SIGNALS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`fabricwatch_"):
            continue
        names = re.findall(r"`([a-z_]+)`", cells[0])
        first = names[0]
        labels = [x.strip() for x in cells[2].split(",")]
        kind = cells[1].split()[0]
        out[first] = (kind, labels)
        for extra in names[1:]:  # "`..._receive_bytes` / `_transmit_bytes`"
            out[first.rsplit("_", 2)[0] + extra] = (kind, labels)
    return out


# -- catalogue ----------------------------------------------------------------


def test_catalogue_has_every_signal_family_with_its_kind_and_labels(
    catalogue: Catalogue,
) -> None:
    fams = signal_families()
    assert len(fams) >= 35
    missing = sorted(n for n in fams if n not in catalogue.families)
    assert not missing, f"docs/signals.md families not exported by any collector: {missing}"
    for name, (kind, labels) in fams.items():
        fam = catalogue.families[name]
        assert fam.kind == kind, name
        assert set(fam.labels) == set(labels), name


def test_catalogue_has_engine_and_self_families(catalogue: Catalogue) -> None:
    names = catalogue.names()
    for sample in (
        "fabricwatch_gpu_stalled",
        "fabricwatch_incidents_opened_total",
        "fabricwatch_stall_gpu_seconds_total",
        "fabricwatch_stall_cost_total",
        "fabricwatch_collector_up",
        "fabricwatch_collector_failures_total",
        "fabricwatch_build_info",
        "fabricwatch_config_last_reload_successful",
        "instance_cause:fabricwatch_gpu_stalled:count",
        "up",
    ):
        assert sample in names
    assert catalogue.families["fabricwatch_gpu_stalled"].owner == cat.ENGINE


def test_catalogue_follows_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collector in the registry is in the catalogue; one taken out is not."""
    full = fabricwatch.collectors.builtin_registry()
    assert "gpu" in full and "nic" in full
    only_gpu = {"gpu": full["gpu"]}
    monkeypatch.setattr(fabricwatch.collectors, "builtin_registry", lambda: dict(only_gpu))
    small = build_catalogue()
    assert "fabricwatch_gpu_power_watts" in small.families
    assert not any(n.startswith("fabricwatch_nic_") for n in small.families)
    assert small.recording_rules == frozenset()


def test_a_collector_that_cannot_be_built_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_settings: CollectorSettings, _env: object) -> object:
        msg = "needs /dev/nvidiactl"
        raise OSError(msg)

    factory = CollectorFactory("broken", CollectorSettings, broken, "breaks")  # type: ignore[arg-type]
    monkeypatch.setattr(fabricwatch.collectors, "builtin_registry", lambda: {"broken": factory})
    with pytest.raises(CatalogueError, match=r"broken.*nvidiactl"):
        build_catalogue()


def test_missing_engine_families_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cat, "ENGINE_FAMILIES", (*cat.ENGINE_FAMILIES, "fabricwatch_incidents_open")
    )
    with pytest.raises(CatalogueError, match="fabricwatch_incidents_open"):
        cat.engine_specs()


def test_exposition_parser_rejects_garbage_and_truncation(catalogue: Catalogue) -> None:
    with pytest.raises(ValueError):
        parse_exposition('fabricwatch_x{gpu="0" 1\n', {})
    text = catalogue.exposition
    cut = text[: text.index("fabricwatch_gpu_power_watts{") + 35]
    with pytest.raises(ValueError):
        parse_exposition(cut, {})
    assert "fabricwatch_gpu_power_watts" in parse_exposition(text, {})


def test_recording_rule_names_come_from_the_rules_file() -> None:
    names = cat.recording_rule_names(RULES)
    assert "cluster_cause:fabricwatch_stall_gpu_hours:increase1h" in names


# -- PromQL helpers -------------------------------------------------------------


def test_concrete_substitutes_grafana_variables() -> None:
    expr = 'rate(x{instance=~"$node",c=~"${cluster}",d="[[dc]]"}[$__rate_interval]) > $budget'
    out = concrete(expr, {"budget": "1"})
    assert out == 'rate(x{instance=~".*",c=~".*",d=".*"}[2m]) > 1'
    assert metric_names(out) == {"x"}


@pytest.mark.parametrize(
    "garbage",
    ["sum(rate(x[5m])", "rate(x[5m]", "x{a=}", "", "foo bar", "rate(x[$__rate_interval])"],
)
def test_unparseable_promql_raises_query_error(garbage: str) -> None:
    with pytest.raises(QueryError):
        metric_names(garbage)


def test_metric_names_sees_every_selector() -> None:
    expr = (
        'a + on() b{x="1"} or rate(c[5m] offset 1h) and max_over_time(d[10m:1m]) '
        'unless {__name__="e"} > histogram_quantile(0.9, sum by (le) (rate(f_bucket[5m])))'
    )
    assert metric_names(expr) == {"a", "b", "c", "d", "e", "f_bucket"}


def test_variable_expr_extracts_the_selector() -> None:
    assert variable_expr('label_values(up{job="a,b"}, instance)') == 'up{job="a,b"}'
    assert variable_expr("label_values(instance)") is None
    assert variable_expr("up") == "up"


# -- Prometheus client ----------------------------------------------------------


@pytest.mark.integration
def test_bad_queries_are_errors_and_the_server_recovers(
    loaded_prometheus: LoadedPrometheus,
) -> None:
    lp = loaded_prometheus
    with pytest.raises(PrometheusError, match="rejected"):
        lp.server.query("sum(rate(", lp.end)
    assert lp.server.query("vector(1)", lp.end)


@pytest.mark.integration
def test_backfill_rejects_garbage_and_truncated_input(tmp_path: Path) -> None:
    need("promtool")
    bad = tmp_path / "bad.om"
    bad.write_text('# TYPE x gauge\nx{a="1" 1 100\n# EOF\n', encoding="utf-8")
    with pytest.raises(PrometheusError):
        backfill(bad, tmp_path / "tsdb1")
    trunc = tmp_path / "trunc.om"
    trunc.write_text('# TYPE x gauge\nx{a="1"} 1 100\nx{a="1"} 2 1', encoding="utf-8")
    with pytest.raises(PrometheusError):
        backfill(trunc, tmp_path / "tsdb2")


@pytest.mark.integration
def test_prometheus_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    need("prometheus")
    not_a_dir = tmp_path / "tsdb"
    not_a_dir.write_text("x", encoding="utf-8")
    with pytest.raises(PrometheusError), PrometheusServer(not_a_dir, tmp_path):
        pass


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the TCP handshake, never answers HTTP
        server = PrometheusServer(tmp_path, tmp_path, query_timeout=0.3)
        server.port = listener.getsockname()[1]
        with pytest.raises(PrometheusError, match="timed out"):
            server.query("up", 0.0)


def test_a_refused_connection_is_an_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = PrometheusServer(tmp_path, tmp_path, query_timeout=1.0)
    server.port = port
    with pytest.raises(PrometheusError):
        server.query_range("up", 0.0, 60.0, 15.0)
