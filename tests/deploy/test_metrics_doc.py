"""docs/metrics.md is the real catalogue, not a hand-kept list."""

from __future__ import annotations

from pathlib import Path

from dashboards.catalogue import build_catalogue, markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_metrics_doc_matches_the_exporter() -> None:
    assert DOC.read_text() == markdown(build_catalogue()), (
        "docs/metrics.md drifted: python -m dashboards.catalogue > docs/metrics.md"
    )
