"""Write (or check) the generated dashboard JSON.

Usage: ``python -m dashboards.build`` rewrites ``dashboards/*.json``;
``python -m dashboards.build --check`` exits 1 if any committed file differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dashboards import fleet, node, switch

HERE = Path(__file__).resolve().parent

DASHBOARDS: Mapping[str, Callable[[], str]] = {
    "fabricwatch-fleet.json": fleet.render,
    "fabricwatch-node.json": node.render,
    "fabricwatch-switch.json": switch.render,
}
"""Output file name -> renderer."""


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: render() for name, render in DASHBOARDS.items()}


def stale(directory: Path = HERE) -> list[str]:
    """Files in ``directory`` that differ from a fresh render (or are missing)."""
    out = []
    for name, text in render_all().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed JSON is stale")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale(args.out)
        for name in bad:
            sys.stderr.write(f"stale: {name} (run python -m dashboards.build)\n")
        return 1 if bad else 0
    for name, text in render_all().items():
        (args.out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
