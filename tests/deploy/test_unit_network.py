"""The unit's network allow-list drop-in: valid, and it lowers the exposure (issue 17, item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.conftest import UNIT, need
from tests.deploy.test_systemd import directives, exposure, runnable_copy, verify

DROPIN = UNIT.parent / "systemd" / "network.conf"


def _with_dropin() -> str:
    # systemd applies a drop-in's [Service] lines after the unit's own.
    body = DROPIN.read_text(encoding="utf-8").split("[Service]", 1)[1]
    unit = UNIT.read_text(encoding="utf-8")
    head, sep, rest = unit.partition("\n[Install]")
    return head.rstrip("\n") + "\n" + body.strip("\n") + "\n" + sep + rest


def test_dropin_denies_by_default_and_allows_localhost() -> None:
    d = directives(DROPIN.read_text(encoding="utf-8"))
    assert d["IPAddressDeny"] == ["any"]
    assert "localhost" in d["IPAddressAllow"]
    assert "IPAddressDeny" not in directives(UNIT.read_text(encoding="utf-8"))
    assert "ProcSubset" not in directives(UNIT.read_text(encoding="utf-8"))


@pytest.mark.integration
def test_unit_with_the_dropin_verifies_and_is_less_exposed(tmp_path: Path) -> None:
    need("systemd-analyze")
    base, _ = exposure(runnable_copy(tmp_path))
    merged = tmp_path / "merged"
    merged.mkdir()
    unit = runnable_copy(merged, _with_dropin())
    res = verify(unit)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    score, proc = exposure(unit)
    assert "IPAddressDeny=" in proc.stdout
    assert score < base < 2.5
