"""README's benchmark figures are the benches' own output, regenerated, never typed in."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "readme_table", ROOT / "bench" / "readme_table.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_block_is_what_the_committed_results_give() -> None:
    gen = _generator()
    text = (ROOT / "README.md").read_text()
    block = text[text.index(gen.BEGIN) : text.index(gen.END) + len(gen.END)]
    assert block == gen.render(ROOT / "bench" / "results"), (
        "regenerate: .venv/bin/python bench/readme_table.py"
    )


def test_missed_budgets_are_named_with_their_ratio(tmp_path: Path) -> None:
    gen = _generator()
    results = json.loads((ROOT / "bench" / "results" / "daemon_budget.json").read_text())
    results["design"]["cpu_ratio"] = 1.37
    (tmp_path / "daemon_budget.json").write_text(json.dumps(results))
    replay = json.loads((ROOT / "bench" / "results" / "replay_throughput.json").read_text())
    replay["budget_ratio"] = 0.25
    (tmp_path / "replay_throughput.json").write_text(json.dumps(replay))
    block = gen.render(tmp_path)
    assert "CPU **1.37x (not met)**" in block
    assert "**0.25x (not met)**" in block


def _block() -> str:
    gen = _generator()
    text = (ROOT / "README.md").read_text()
    return text[text.index(gen.BEGIN) : text.index(gen.END) + len(gen.END)]


def test_every_results_file_is_rendered_as_its_bench_row() -> None:
    block = _block()
    results = ROOT / "bench" / "results"
    expected = ["daemon_budget", "replay_throughput", *_generator().OTHER_BENCHES]
    missing = [name for name in expected if not (results / f"{name}.json").is_file()]
    assert missing == [], "run these benches with --results bench/results/NAME.json"
    files = sorted(results.glob("*.json"))
    for path in files:
        script = path.stem.split("_")[:2] if path.stem.startswith("engine_eval_") else [path.stem]
        name = "_".join(script) + ".py"
        assert (ROOT / "bench" / name).is_file(), f"{path.name}: no bench/{name}"
        assert f"`{name}`" in block, f"{path.name} is not rendered"


def test_no_bench_figures_are_typed_outside_the_generated_block() -> None:
    gen = _generator()
    text = (ROOT / "README.md").read_text()
    outside = text[: text.index(gen.BEGIN)] + text[text.index(gen.END) :]
    benches = {p.name for p in (ROOT / "bench").glob("*.py")}
    typed = [
        line
        for line in outside.splitlines()
        if line.startswith("|") and any(f"`{b}`" in line for b in benches)
    ]
    assert typed == [], "README rows of bench figures belong in the generated block"


def test_a_results_file_nothing_renders_is_an_error(tmp_path: Path) -> None:
    gen = _generator()
    for path in (ROOT / "bench" / "results").glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "new_bench.json").write_text("{}")
    with pytest.raises(ValueError, match=r"new_bench\.json"):
        gen.render(tmp_path)


def _other_results(tmp_path: Path, name: str) -> dict[str, Any]:
    for path in (ROOT / "bench" / "results").glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    doc: dict[str, Any] = json.loads((tmp_path / f"{name}.json").read_text())
    return doc


def test_other_benches_name_missed_budgets_with_their_ratio(tmp_path: Path) -> None:
    gen = _generator()
    snmp = _other_results(tmp_path, "snmp_walk")
    snmp["clients"]["native walk"]["ratio"] = 2.5
    snmp["node_poll"]["budget_ratio"] = 1.25
    (tmp_path / "snmp_walk.json").write_text(json.dumps(snmp))
    gnmi = json.loads((tmp_path / "gnmi_ingest.json").read_text())
    gnmi["runs"]["node"]["cpu_share"] = 0.0137
    (tmp_path / "gnmi_ingest.json").write_text(json.dumps(gnmi))
    fleet = json.loads((tmp_path / "fleet_load.json").read_text())
    fleet["wall_s"] = 1.5 * fleet["wall_target_s"]
    (tmp_path / "fleet_load.json").write_text(json.dumps(fleet))
    rows = {
        line.split(" | ")[0]: line for line in gen.render(tmp_path).splitlines() if " | " in line
    }
    assert "native **2.50x (not met)** per varbind" in rows["| `snmp_walk.py`"]
    assert "**1.25x (not met)**" in rows["| `snmp_walk.py`"]
    assert (
        "1.37 % of a core (**1.37x (not met)** of the daemon budget)" in rows["| `gnmi_ingest.py`"]
    )
    assert "(**1.50x (not met)** of 2 min)" in rows["| `fleet_load.py`"]


def test_within_budget_is_plain(tmp_path: Path) -> None:
    gen = _generator()
    gpu = _other_results(tmp_path, "gpu_cycle")
    gpu["rows"]["simulated"]["cpu_share"] = 0.0042
    (tmp_path / "gpu_cycle.json").write_text(json.dumps(gpu))
    block = gen.render(tmp_path)
    assert "0.42 % of a core (0.42x of the daemon budget)" in block


def test_results_helper_writes_sorted_json_and_nothing_without_a_path(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("_results", ROOT / "bench" / "_results.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.write_results(None, {"x": 1})
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "sub" / "b.json"
    mod.write_results(out, {"ratio": 0.5, "budget": None, "rows": {"z": 1, "a": 2}})
    assert json.loads(out.read_text()) == {"ratio": 0.5, "budget": None, "rows": {"z": 1, "a": 2}}
    assert out.read_text().index('"budget"') < out.read_text().index('"ratio"')
    assert out.read_text().endswith("}\n")


def test_switch_mode_names_a_missed_budget_and_lost_data_per_shape(tmp_path: Path) -> None:
    gen = _generator()
    doc = _other_results(tmp_path, "switch_mode")
    shapes = doc["shapes"]
    four = next(s for s in shapes.values() if s["switches"] == 4)
    four["rss_ratio"], four["rss_steady_mib"] = 1.39, 208.9
    four["dropped_series_readings"] = 54_516
    (tmp_path / "switch_mode.json").write_text(json.dumps(doc))
    row = next(line for line in gen.render(tmp_path).splitlines() if "`switch_mode.py`" in line)
    one, many = row.split(" | ")[3].split("; ")
    assert "RSS **1.39x (not met)** (209 MiB" in many
    assert "**54516 readings dropped or failed**" in many
    assert "not met" not in one and "nothing dropped" in one


def test_switch_mode_results_keep_one_entry_per_shape(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("switch_mode", ROOT / "bench" / "switch_mode.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "switch_mode.json"
    figures: dict[str, Any] = {"cpu_ratio": 0.4, "rss_ratio": 0.5}
    for switches, interval, cpu in ((1, 1.0, 0.4), (4, 10.0, 0.2), (1, 1.0, 0.3)):
        args = argparse.Namespace(switches=switches, ports=512, interval=interval, seconds=60.0)
        mod._record(out, args, {**figures, "cpu_ratio": cpu})
    shapes = json.loads(out.read_text())["shapes"]
    assert sorted(shapes) == ["1x512@1", "4x512@10"]
    assert shapes["1x512@1"]["cpu_ratio"] == 0.3  # a re-run replaces its own shape only
    assert shapes["4x512@10"]["cpu_ratio"] == 0.2
