"""``[collectors.storage]`` settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.collector import CollectorSettings
from fabricwatch.settings import option

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_ALIGN = 4096


@dataclass(kw_only=True)
class CheckpointPath:
    """``[[collectors.storage.paths]]``: one directory checkpoints are written to."""

    name: str = option("", "The `path` label value (e.g. 'ckpt'); short, unique.")
    path: Path = option(Path(), "Absolute directory checkpoints land in.")
    probe: bool = option(True, "Run the active write+fsync probe on this path.")
    probe_size: int = option(
        1 << 20, "Bytes each probe writes (1MiB...).", min=1, max=256 << 20, size=True
    )
    probe_interval: float = option(
        10.0, "Seconds between probe starts.", min=0.1, max=86_400.0, duration=True
    )
    probe_timeout: float = option(
        30.0,
        "A probe still running after this long is a timeout (seconds).",
        min=0.01,
        max=3600.0,
        duration=True,
    )
    o_direct: bool = option(False, "Write the probe with O_DIRECT (bypass the page cache).")

    def validate(self) -> None:
        """Names are label values; paths must be absolute; O_DIRECT needs aligned sizes."""
        if not _NAME.match(self.name):
            msg = "name must be 1-64 characters of letters, digits, '_', '.', ':' or '-'"
            raise ValueError(msg)
        if not self.path.is_absolute():
            msg = f"path must be an absolute directory, got {str(self.path)!r}"
            raise ValueError(msg)
        if self.o_direct and self.probe_size % _ALIGN:
            msg = f"o_direct needs probe_size to be a multiple of {_ALIGN}"
            raise ValueError(msg)


@dataclass(kw_only=True)
class StorageSettings(CollectorSettings):
    """``[collectors.storage]``: block devices, NFS mounts and checkpoint paths."""

    paths: list[CheckpointPath] = option(
        [], "Checkpoint directories to map, probe and watch for bursts."
    )
    burst_factor: float = option(
        4.0, "Writes this many times their baseline rate are a burst.", min=1.1, max=1e6
    )
    burst_window: float = option(
        10.0, "Short window (seconds) of the burst rate.", min=1.0, max=3600.0, duration=True
    )
    baseline_window: float = option(
        600.0,
        "Window (seconds) of the baseline median rate.",
        min=10.0,
        max=86_400.0,
        duration=True,
    )
    burst_min_rate: float = option(
        50e6, "Write rate (bytes/s) below which there is never a burst.", min=0.0, size=True
    )
    device_exclude: str = option(
        r"^(z?ram|fd|sr)\d+$", "Regex of block device names not exported per device."
    )
    include_partitions: bool = option(False, "Export partitions as well as whole disks.")
    include_idle: bool = option(False, "Export devices that never completed an I/O.")
    nfs_ops: list[str] = option(
        ["WRITE", "COMMIT", "READ"], "NFS RPC operations exported per mount."
    )
    remap_interval: float = option(
        30.0,
        "Seconds between re-reads of mountinfo (paths can be remounted).",
        min=1.0,
        max=3600.0,
        duration=True,
    )

    def validate(self) -> None:
        """Unique path names, a compilable regex, a baseline longer than the window."""
        names = [p.name for p in self.paths]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            msg = f"duplicate path names: {', '.join(sorted(dup))}"
            raise ValueError(msg)
        try:
            re.compile(self.device_exclude)
        except re.error as exc:
            msg = f"device_exclude is not a valid regex: {exc}"
            raise ValueError(msg) from None
        if self.baseline_window < 2 * self.burst_window:
            msg = "baseline_window must be at least twice burst_window"
            raise ValueError(msg)
