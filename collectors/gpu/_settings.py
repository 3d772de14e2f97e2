"""Settings of the GPU collector (``[collectors.gpu]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricwatch.collector import CollectorSettings
from fabricwatch.settings import option


@dataclass(kw_only=True)
class GpuSettings(CollectorSettings):
    """``[collectors.gpu]``: NVML GPU, NVLink, XID and job telemetry."""

    backend: Literal["nvml", "simulated"] = option(
        "nvml", "nvml (the driver's libnvidia-ml) or simulated (idle simulated GPUs, for demos)."
    )
    simulated_model: Literal["A100", "H100", "H200", "B200"] = option(
        "H100", "GPU model of the simulated backend."
    )
    simulated_count: int = option(8, "Number of simulated GPUs.", min=1, max=64)
    call_timeout: float = option(
        2.0,
        "A GPU whose NVML reads take longer is marked stale; its last values stay (seconds).",
        min=0.05,
        max=60.0,
        duration=True,
    )
    workers: int = option(
        4, "Threads making NVML calls (bounded; a hung call holds one).", min=1, max=16
    )
    retry_interval: float = option(
        60.0,
        "While NVML is unavailable, retry initialising it this often (seconds).",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    lost_retry_interval: float = option(
        30.0, "Re-read a lost GPU this often (seconds).", min=1.0, max=3600.0, duration=True
    )
    fabric_interval: float = option(
        60.0,
        "Re-read NVLink fabric (clique) info this often (seconds).",
        min=1.0,
        max=86400.0,
        duration=True,
    )
    events: bool = option(True, "Watch XID and other critical NVML events in a dedicated thread.")
    jobs: bool = option(
        True, "Attribute compute processes to Slurm jobs, Kubernetes pods or systemd units."
    )
