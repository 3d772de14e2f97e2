"""docs/architecture.md names real files: a reshuffle that moves one fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_ROOTS = ("fabricwatch/", "collectors/", "docs/", "bench/", "dashboards/", "deploy/", "tests/")


def _named_paths(text: str) -> list[str]:
    paths = []
    for code in re.findall(r"`([^`]+)`", text):
        candidate = code.split(" ")[0]
        if "<" in candidate or candidate.startswith("/") or "/" not in candidate.rstrip("/"):
            continue  # a placeholder, an absolute path on the node, or a bare folder name
        if not candidate.startswith(_ROOTS):
            # "engine/stall.py" next to "fabricwatch/engine/core.py" is short for it.
            candidate = "fabricwatch/" + candidate
        paths.append(candidate)
    return paths


def test_every_path_the_architecture_page_names_exists() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    paths = _named_paths(text)
    assert len(paths) > 30, "the page should name the files of the data path"
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_check_notices_a_missing_file() -> None:
    assert _named_paths("see `fabricwatch/nowhere.py` and `engine/gone.py`") == [
        "fabricwatch/nowhere.py",
        "fabricwatch/engine/gone.py",
    ]
