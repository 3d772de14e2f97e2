"""List functions that are long (> 80 lines) or complex (McCabe > 25).

Issue #21 asks for this list before and after the house-style reshuffle.
Complexity comes from ruff's own McCabe check (C901), so the figure is the
one the linter would report; length is counted from the function's first to
its last line with ``ast``. Declarative dashboard builders are left out:
their length is data, not logic.

Usage: ``python scripts/long_functions.py [--lines N] [--complexity N] [PATH ...]``
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

_EXCLUDED = ("dashboards/",)
_C901 = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+):\d+: C901 `(?P<name>[^`]+)` "
    r"is too complex \((?P<cc>\d+) > \d+\)"
)


def _lengths(paths: list[Path], limit: int) -> dict[tuple[str, int], tuple[str, int]]:
    found: dict[tuple[str, int], tuple[str, int]] = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for file in files:
            rel = file.as_posix()
            if any(part in rel for part in _EXCLUDED):
                continue
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=rel)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        found[(rel, node.lineno)] = (node.name, length)
    return found


def _complexities(paths: list[Path], limit: int) -> dict[tuple[str, int], tuple[str, int]]:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    proc = subprocess.run(
        [
            ruff,
            "check",
            "--select",
            "C901",
            "--output-format",
            "concise",
            "--config",
            f"lint.mccabe.max-complexity={limit}",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found: dict[tuple[str, int], tuple[str, int]] = {}
    for line in proc.stdout.splitlines():
        match = _C901.match(line)
        if match and not any(part in match["path"] for part in _EXCLUDED):
            found[(match["path"], int(match["line"]))] = (match["name"], int(match["cc"]))
    return found


def main(argv: list[str] | None = None) -> int:
    """Print one row per long or complex function; exit 0 always (a report, not a gate)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", type=Path, default=[Path("fabricwatch"), Path("collectors")]
    )
    parser.add_argument(
        "--lines", type=int, default=80, help="longest allowed function (default 80)"
    )
    parser.add_argument(
        "--complexity", type=int, default=25, help="highest allowed McCabe complexity (default 25)"
    )
    args = parser.parse_args(argv)
    long = _lengths(args.paths, args.lines)
    complex_ = _complexities(args.paths, args.complexity)
    rows = sorted(set(long) | set(complex_))
    for key in rows:
        name = (long.get(key) or complex_[key])[0]
        lines = long[key][1] if key in long else None
        cc = complex_[key][1] if key in complex_ else None
        print(f"{key[0]}:{key[1]} {name} lines={lines or '-'} complexity={cc or '-'}")  # noqa: T201 (a report)
    print(f"{len(rows)} functions over {args.lines} lines or complexity {args.complexity}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
