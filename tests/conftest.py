"""Fixtures shared by the whole suite."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port that was free a moment ago on ``host`` (TCP by default, UDP with SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: real captures with provenance (read-only; never copied)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(
            f"{SHARED_DATA} is missing: the suite needs the shared captures beside the repo"
        )
    return SHARED_DATA
