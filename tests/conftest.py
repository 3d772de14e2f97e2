"""Fixtures shared by the whole suite."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"

# free_port hands out ports below the kernel's ephemeral range (where bind(0) and
# outgoing connections take theirs), split evenly among pytest-xdist workers: a port
# one worker picked can then not be taken by another worker, nor be the source port
# of anyone's connection, in the moment before the program under test binds it.
PORT_FLOOR = 10_000


def _ephemeral_floor() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default range starts there
    return low


def _worker_ports() -> range:
    """This pytest-xdist worker's share of the ports below the ephemeral range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    width = (_ephemeral_floor() - PORT_FLOOR) // max(count, 1)
    if width < 64:
        return range(0)  # no room below the ephemeral range here: let the kernel choose
    start = PORT_FLOOR + (index % count) * width
    return range(start, start + width)


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port that was free a moment ago on ``host`` (TCP by default, UDP with SOCK_DGRAM).

    Only this test worker ever picks it (see ``PORT_FLOOR``), so it stays free until
    the caller's program binds it unless something outside the suite takes it.
    """
    ports = _worker_ports()
    pick = random.Random()  # own generator: hypothesis seeds the module-level one
    for _ in range(200 if ports else 0):
        port = ports[pick.randrange(len(ports))]
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # held by someone: try another
            return port
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        got: int = s.getsockname()[1]
        return got


@contextlib.contextmanager
def source_tree_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold while pip builds a wheel from the source tree: it writes build/ and
    fabricwatch.egg-info there, so one such build at a time across pytest-xdist workers
    (the lock file is in the directory their temp dirs share)."""
    lock = tmp_path_factory.getbasetemp().parent / "fabricwatch-source-tree-build.lock"
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # the other build takes a minute at most
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: real captures with provenance (read-only; never copied)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(
            f"{SHARED_DATA} is missing: the suite needs the shared captures beside the repo"
        )
    return SHARED_DATA
