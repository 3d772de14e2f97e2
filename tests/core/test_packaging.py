"""A regular (non-editable) wheel holds every module and data file of the tree."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import source_tree_build

REPO = Path(__file__).resolve().parents[2]


def _source_files() -> set[str]:
    out: set[str] = set()
    for base, prefix in (
        (REPO / "fabricwatch", "fabricwatch"),
        (REPO / "collectors", "fabricwatch/collectors"),
    ):
        for f in base.rglob("*"):
            if "__pycache__" in f.parts or not f.is_file():
                continue
            rel = f.relative_to(base)
            if prefix == "fabricwatch" and rel.parts[0] == "collectors":
                continue  # the symlink to collectors/ (mapped separately)
            if f.suffix in (".py", ".toml") or f.name == "py.typed":
                out.add(f"{prefix}/{rel.as_posix()}")
    return out


def test_wheel_contains_every_module_and_profile(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with source_tree_build(tmp_path_factory):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-q",
                "-w",
                str(tmp_path),
                str(REPO),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert r.returncode == 0, r.stdout + r.stderr
    # The profile folders are packages Python sees: unlisted, setuptools warns ~90 lines.
    assert "would be ignored" not in r.stdout + r.stderr
    (wheel,) = tmp_path.glob("fabricwatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_source_files() - names)
    assert not missing, f"not in the wheel (add the package to pyproject): {missing}"
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
