"""The one way a bench writes its figures for ``bench/readme_table.py``.

A bench adds ``--results FILE`` with :func:`add_results_option` and, after
printing, hands the same figures to :func:`write_results`; README.md's
benchmark block is rendered from those files (``bench/results/*.json``), so
no figure there is typed in.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def add_results_option(ap: argparse.ArgumentParser) -> None:
    """``--results FILE``: where :func:`write_results` puts the figures."""
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the printed figures here as JSON "
        "(bench/readme_table.py renders bench/results/*.json into README.md)",
    )


def write_results(path: Path | None, figures: Mapping[str, Any]) -> None:
    """Write ``figures`` as JSON to ``path`` (nothing when it is ``None``).

    Keys are sorted so that a re-run changes only the lines whose figures
    changed.
    """
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
