"""README's benchmark figures are the benches' own output, regenerated, never typed in."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

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
