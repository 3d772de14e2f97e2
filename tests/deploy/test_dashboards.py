"""Dashboards: reproducible JSON, parseable PromQL, exported metrics, real data."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dashboards.build import DASHBOARDS, main, render_all, stale
from dashboards.catalogue import Catalogue
from dashboards.queries import Query, concrete, constants, dashboard_queries, metric_names
from tests.deploy.conftest import DASHBOARDS as DASH_DIR
from tests.deploy.conftest import LoadedPrometheus, need


def committed() -> dict[str, dict[str, Any]]:
    return {n: json.loads((DASH_DIR / n).read_text(encoding="utf-8")) for n in DASHBOARDS}


def all_queries() -> list[tuple[Query, dict[str, str]]]:
    out: list[tuple[Query, dict[str, str]]] = []
    for doc in committed().values():
        consts = constants(doc)
        out.extend((q, consts) for q in dashboard_queries(doc))
    return out


QUERIES = all_queries()
IDS = [q.where for q, _ in QUERIES]


def test_regeneration_leaves_committed_json_unchanged() -> None:
    assert stale() == []
    assert main(["--check"]) == 0


def test_check_mode_detects_drift(tmp_path: Path) -> None:
    for name, text in render_all().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    first = next(iter(DASHBOARDS))
    (tmp_path / first).write_text("{}\n", encoding="utf-8")
    assert stale(tmp_path) == [first]
    assert main(["--check", "--out", str(tmp_path)]) == 1


def test_render_is_deterministic() -> None:
    assert render_all() == render_all()


def test_three_dashboards_with_expected_structure() -> None:
    docs = committed()
    assert len(docs) == 3
    for doc in docs.values():
        names = {v["name"] for v in doc["templating"]["list"]}
        assert {"datasource", "cluster"} <= names
        assert doc["schemaVersion"] >= 39
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids))
        for p in doc["panels"]:
            for t in p.get("targets", []):
                assert t["refId"]
                assert t["datasource"]["uid"] == "${datasource}"
    node = docs["fabricwatch-node.json"]
    assert {"node", "budget"} <= {v["name"] for v in node["templating"]["list"]}
    assert any(p["type"] == "heatmap" for p in node["panels"])
    assert any(p["type"] == "table" for p in node["panels"])
    switch = docs["fabricwatch-switch.json"]
    assert {"switch", "port"} <= {v["name"] for v in switch["templating"]["list"]}
    fleet = docs["fabricwatch-fleet.json"]
    assert any(a.get("expr") for a in fleet["annotations"]["list"])
    # The job panels: the fleet ledger's lost GPU-hours by cause, and the badput.
    exprs = " ".join(t["expr"] for p in fleet["panels"] for t in p.get("targets", []))
    for name in (
        "fabricwatch_fleet_job_gpu_seconds_lost",
        "fabricwatch_fleet_job_badput_ratio",
        "fabricwatch_fleet_gpu_seconds_lost_total",
        "fabricwatch_fleet_incidents_open",
    ):
        assert name in exprs, name


def test_every_panel_has_a_query() -> None:
    for doc in committed().values():
        for p in doc["panels"]:
            if p["type"] != "row":
                assert p.get("targets"), f"{doc['title']} / {p['title']} has no query"


@pytest.mark.parametrize(("query", "consts"), QUERIES, ids=IDS)
def test_query_parses_and_names_exported_metrics(
    query: Query, consts: dict[str, str], catalogue: Catalogue
) -> None:
    names = metric_names(concrete(query.expr, consts))
    if not names:
        # Only a reference line such as the checkpoint budget may be metric-free.
        assert re.fullmatch(r"vector\(\$\w+\)", query.expr), f"{query.where}: selects no metric"
        return
    unknown = names - catalogue.names()
    assert not unknown, f"{query.where}: not in the exporter's catalogue: {sorted(unknown)}"


@pytest.mark.integration
def test_queries_parse_with_promtool(tmp_path: Path) -> None:
    """Second parser: every expression as a throwaway recording rule."""
    need("promtool")
    rules = [
        {"record": f"check:query:{i}", "expr": concrete(q.expr, c)}
        for i, (q, c) in enumerate(QUERIES)
        if q.kind != "variable" or q.expr
    ]
    path = tmp_path / "queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))
    proc = subprocess.run(
        ["promtool", "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("query", "consts"), QUERIES, ids=IDS)
def test_query_returns_data_from_backfilled_prometheus(
    query: Query, consts: dict[str, str], loaded_prometheus: LoadedPrometheus
) -> None:
    lp = loaded_prometheus
    expr = concrete(query.expr, consts)
    if query.kind == "instant":
        result = lp.server.query(expr, lp.end)
    else:
        result = lp.server.query_range(expr, lp.start, lp.end, lp.step)
    assert result, f"{query.where}: no data for {expr}"
    assert any(len(s.points) for s in result)
