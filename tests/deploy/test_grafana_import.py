"""Grafana import: each dashboard asks for its Prometheus data source, and the
provisioning example points at the files the package installs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DASHBOARDS, DEPLOY, REPO

BOARDS = sorted(DASHBOARDS.glob("*.json"))
PROVISIONING = DEPLOY / "grafana" / "provisioning"


def _walk(node: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            out.extend(_walk(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_walk(v))
    return out


def imported(text: str, uid: str) -> dict[str, Any]:
    """What Grafana's import does with the inputs: substitute each ``${NAME}``."""
    doc: dict[str, Any] = json.loads(text)
    for inp in doc["__inputs"]:
        text = text.replace("${" + inp["name"] + "}", uid)
    out: dict[str, Any] = json.loads(text)
    return out


@pytest.mark.parametrize("path", BOARDS, ids=[p.name for p in BOARDS])
def test_import_asks_for_a_prometheus_data_source(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    inputs = doc.get("__inputs")
    assert inputs, "no __inputs: import would not ask for a data source"
    (ds,) = [i for i in inputs if i["type"] == "datasource"]
    assert ds["pluginId"] == "prometheus" and re.fullmatch(r"DS_[A-Z0-9_]+", ds["name"])
    declared = {i["name"] for i in inputs}
    used = set(re.findall(r"\$\{(DS_[A-Z0-9_]+)\}", text))
    assert used == declared, f"undeclared inputs {used - declared}, unused {declared - used}"
    req = {r["id"]: r for r in doc["__requires"]}
    assert req["grafana"]["version"].startswith("11.") and "prometheus" in req

    after = imported(text, "prom-uid-42")
    assert "${DS_" not in json.dumps(after)
    (var,) = [v for v in after["templating"]["list"] if v["type"] == "datasource"]
    assert var["current"]["value"] == "prom-uid-42" and var["query"] == "prometheus"
    # Every query goes through $datasource, so the chosen source reaches every panel.
    refs = [
        n["datasource"] for n in _walk(after["panels"]) if isinstance(n.get("datasource"), dict)
    ]
    assert refs
    assert {r["uid"] for r in refs} == {"${datasource}"}


def test_provisioning_example_points_at_the_installed_dashboards() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fw_deb_build", DEPLOY / "debian" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # its dataclasses look their module up
    spec.loader.exec_module(build)
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "fabricwatch.yml").read_text())
    (provider,) = doc["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == str(build.SHARE / "dashboards")
    ds = yaml.safe_load((PROVISIONING / "datasources" / "fabricwatch.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    # docs/deploy.md explains where `cluster` comes from (the dashboards' first variable).
    deploy_md = (REPO / "docs" / "deploy.md").read_text()
    assert "provisioning" in deploy_md and "__inputs" in deploy_md
    assert "cluster" in deploy_md and "external_labels" in deploy_md
