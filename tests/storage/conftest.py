"""Fixtures of the storage tests: fixture proc trees, a fake clock, a real loop file system."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data" / "storage"
BLKIO = Path("/sys/fs/cgroup/blkio")


class FakeClock:
    """A monotonic clock tests advance by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class ProcTree:
    """A procfs root in a temp dir whose files tests rewrite between cycles."""

    root: Path

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(p)

    def diskstats(self, text: str) -> None:
        self.write("diskstats", text)

    def mountinfo(self, text: str) -> None:
        self.write("self/mountinfo", text)

    def mountstats(self, text: str) -> None:
        self.write("self/mountstats", text)


@pytest.fixture
def proc(tmp_path: Path) -> ProcTree:
    """An empty fixture procfs root."""
    root = tmp_path / "proc"
    root.mkdir()
    return ProcTree(root)


@pytest.fixture
def clock() -> FakeClock:
    """A hand-driven monotonic clock."""
    return FakeClock()


def data(name: str) -> str:
    """A fixture file of tests/data/storage."""
    return (DATA / name).read_text()


@dataclass
class LoopFs:
    """An ext4 file system on a real loop device, mounted on ``mount``."""

    device: str  # /dev/loopN
    name: str  # loopN
    dev: str  # major:minor
    mount: Path

    def freeze(self) -> None:
        subprocess.run(["fsfreeze", "-f", str(self.mount)], check=True, timeout=30)

    def thaw(self) -> None:
        subprocess.run(
            ["fsfreeze", "-u", str(self.mount)], check=False, timeout=30, capture_output=True
        )


def _missing_capability() -> str | None:
    if os.geteuid() != 0:
        return "root (losetup, mount, fsfreeze)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount", "fsfreeze"):
        if shutil.which(tool) is None:
            return f"the {tool} program"
    if not Path("/dev/loop-control").exists():
        return "loop devices (/dev/loop-control)"
    return None


@pytest.fixture(scope="session")
def loopfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopFs]:
    """A 96 MiB ext4 on a loop device (skipped, naming what is missing, where impossible)."""
    missing = _missing_capability()
    if missing:
        pytest.skip(f"needs {missing}")
    base = tmp_path_factory.mktemp("loopfs")
    image = base / "disk.img"
    with image.open("wb") as f:
        f.truncate(96 << 20)
    res = subprocess.run(
        ["losetup", "-f", "--show", str(image)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if res.returncode != 0:
        pytest.skip(f"needs a free loop device: losetup said {res.stderr.strip()}")
    device = res.stdout.strip()
    mnt = base / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", device], check=True, timeout=60, capture_output=True
        )
        res = subprocess.run(
            ["mount", device, str(mnt)], check=False, capture_output=True, text=True, timeout=30
        )
        if res.returncode != 0:
            pytest.skip(f"needs mount(2) of an ext4 loop device: {res.stderr.strip()}")
        st = Path(device).stat()
        fs = LoopFs(
            device, Path(device).name, f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}", mnt
        )
        try:
            yield fs
        finally:
            fs.thaw()
            subprocess.run(["umount", str(mnt)], check=False, timeout=60, capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", device], check=False, timeout=30, capture_output=True)


@contextlib.contextmanager
def blkio_throttle(dev: str, write_bps: int) -> Iterator[None]:
    """Throttle this process's writes to block device ``dev`` (cgroup v1 blkio).

    The whole process moves into a fresh cgroup limited on that one device
    only, and back to the root cgroup afterwards; other devices are untouched.
    """
    if not (BLKIO / "blkio.throttle.write_bps_device").exists():
        pytest.skip("needs the cgroup v1 blkio controller with throttling")
    cg = BLKIO / f"fabricwatch-test-{os.getpid()}"
    cg.mkdir(exist_ok=True)
    try:
        (cg / "blkio.throttle.write_bps_device").write_text(f"{dev} {write_bps}\n")
        (cg / "cgroup.procs").write_text(str(os.getpid()))
        yield
    finally:
        # Lift the limit first so queued bios drain, then leave and remove the group.
        with contextlib.suppress(OSError):
            (cg / "blkio.throttle.write_bps_device").write_text(f"{dev} 0\n")
        (BLKIO / "cgroup.procs").write_text(str(os.getpid()))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.05)
