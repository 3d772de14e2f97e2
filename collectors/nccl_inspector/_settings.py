"""Settings of the nccl_inspector collector (``[collectors.nccl_inspector]``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fabricwatch.collector import CollectorSettings
from fabricwatch.settings import option


@dataclass(kw_only=True)
class InspectorSettings(CollectorSettings):
    """``[collectors.nccl_inspector]``: where NCCL Inspector writes its Prometheus dumps."""

    dump_dir: Path = option(
        Path("/var/lib/nccl-inspector"),
        "NCCL_INSPECTOR_DUMP_DIR of the jobs (NCCL_INSPECTOR_PROM_DUMP=1).",
    )
    max_age: float = option(
        120.0,
        "Ignore dump files not written for this long (the job ended or hangs: its last "
        "collective says nothing about now).",
        min=1.0,
        max=86400.0,
        duration=True,
    )
