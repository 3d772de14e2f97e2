"""Prometheus rules: promtool-checked, unit-tested, and written against the real catalogue."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.catalogue import Catalogue
from dashboards.queries import metric_names, parse
from tests.deploy.conftest import RULES, RULES_TEST, RUNBOOK, need

TARGET_LABELS = {"instance", "job", "cluster"}
REQUIRED_ANNOTATIONS = {"summary", "description", "runbook_url"}
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z_]+:[a-z0-9_]+$")


def rules_doc() -> dict[str, Any]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def all_rules() -> list[dict[str, Any]]:
    return [r for g in rules_doc()["groups"] for r in g["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "alert" in r]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.mark.integration
def test_promtool_check_rules() -> None:
    need("promtool")
    proc = promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.integration
def test_promtool_rule_unit_tests_pass() -> None:
    need("promtool")
    proc = promtool("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.integration
def test_rule_unit_tests_fail_when_a_threshold_breaks(tmp_path: Path) -> None:
    """The unit tests are not vacuous: raising a threshold makes a firing case fail."""
    need("promtool")
    text = RULES.read_text(encoding="utf-8")
    broken = text.replace(
        "fabricwatch_switch_pfc_pause_ratio[2m]) > 0.5",
        "fabricwatch_switch_pfc_pause_ratio[2m]) > 0.99",
    )
    assert broken != text
    (tmp_path / "rules.yml").write_text(broken, encoding="utf-8")
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yml")
    proc = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert proc.returncode != 0
    assert "FabricwatchSwitchPfcPauseHigh" in proc.stdout + proc.stderr


def test_issue_alerts_are_all_present() -> None:
    names = {r["alert"] for r in alerts()}
    assert {
        "FabricwatchStallIncidentOpen",
        "FabricwatchSwitchPfcPauseHigh",
        "FabricwatchNicPfcPauseHigh",
        "FabricwatchEcnCnpSurge",
        "FabricwatchNvlinkErrorsRising",
        "FabricwatchStorageProbeLatencyOverBudget",
        "FabricwatchCollectorDown",
        "FabricwatchDown",
    } <= names


def test_lost_gpu_hours_are_recorded_per_cause() -> None:
    records = {r["record"]: r["expr"] for r in all_rules() if "record" in r}
    hours = [n for n in records if "stall_gpu_hours" in n]
    assert hours
    for name in hours:
        assert "cause" in name.split(":")[0]
        assert "fabricwatch_stall_gpu_seconds_total" in records[name]


def test_recording_rules_follow_level_metric_operations() -> None:
    for rule in all_rules():
        if "record" in rule:
            assert RECORD_NAME.match(rule["record"]), rule["record"]


def test_every_alert_has_annotations_severity_and_a_runbook_section() -> None:
    runbook = RUNBOOK.read_text(encoding="utf-8")
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in runbook.splitlines()
        if line.startswith("## ")
    }
    for rule in alerts():
        missing = REQUIRED_ANNOTATIONS - set(rule.get("annotations", {}))
        assert not missing, f"{rule['alert']} lacks {missing}"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        url = rule["annotations"]["runbook_url"]
        anchor = url.rsplit("#", 1)[1]
        assert anchor == rule["alert"].lower()
        assert anchor in anchors, f"docs/runbook.md has no section for {rule['alert']}"


def rule_tests() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    tests: list[dict[str, Any]] = doc["tests"]
    return tests


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for t in rule_tests():
        for case in t.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r["alert"] for r in alerts()}
    assert names - firing == set(), "alerts never shown firing"
    assert names - quiet == set(), "alerts never shown quiet"


def test_rule_expressions_name_only_exported_metrics(catalogue: Catalogue) -> None:
    known = catalogue.names()
    for rule in all_rules():
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"


_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$")


def test_unit_test_series_look_like_the_exporter_output(catalogue: Catalogue) -> None:
    """Names, label names and histogram shape as a real scrape produces them."""
    for t in rule_tests():
        for s in t.get("input_series", []):
            m = _SERIES.match(s["series"])
            assert m, s["series"]
            name = m.group(1)
            labels = set(re.findall(r'([a-zA-Z_]\w*)="', m.group(2)))
            if name == "up":
                assert labels == {"instance", "job"}
                continue
            fam = catalogue.family_of(name)
            assert fam is not None, f"{t['name']}: {name} is not exported"
            expected = set(fam.labels) | {"instance", "job"}
            if name.endswith("_bucket"):
                expected.add("le")
            assert labels - {"cluster"} == expected, f"{t['name']}: {s['series']}"


def test_expressions_parse_with_a_second_parser() -> None:
    for rule in all_rules():
        parse(rule["expr"])
