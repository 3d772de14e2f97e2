"""Fixtures of the fault-injection suite: a small file system that fills and empties."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.alerting.conftest import Receiver


@dataclass
class SmallFs:
    """A 2 MiB tmpfs mounted for one test; :meth:`fill` and :meth:`empty` it."""

    root: Path

    @property
    def filler(self) -> Path:
        return self.root / "filler"

    def fill(self) -> None:
        """Write until the file system says ENOSPC (bounded by its size)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (65536, 4096, 512, 1):
                for _ in range(1024):  # 64 MiB at most: far above the mount's size
                    try:
                        os.write(fd, b"\0" * size)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)

    def empty(self) -> None:
        """Free the space again."""
        self.filler.unlink(missing_ok=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[SmallFs]:
    """A real tmpfs of 2 MiB (needs CAP_SYS_ADMIN to mount)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs CAP_SYS_ADMIN: {res.stderr.strip()}")
    try:
        yield SmallFs(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """The alerting suite's scripted loopback HTTP receiver."""
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()
