"""Incident summaries name what the node could not see."""

from __future__ import annotations

from fabricwatch.engine.causes import Cause
from fabricwatch.engine.incidents import summarize


def test_unknown_names_the_missing_families() -> None:
    text = summarize(
        kind="stall",
        gpus=("0", "1"),
        seconds=60,
        cause=Cause.UNKNOWN,
        confidence=0.0,
        evidence=(),
        missing=("nic_pfc", "switch_pfc"),
    )
    assert "no host PFC counters, no switch PFC counters on this node" in text


def test_an_attributed_cause_does_not_list_them() -> None:
    text = summarize(
        kind="stall",
        gpus=("0",),
        seconds=10,
        cause=Cause.LINK_DOWN,
        confidence=0.9,
        evidence=(),
        missing=("nic_pfc",),
    )
    assert "on this node" not in text and "cause: link down" in text
