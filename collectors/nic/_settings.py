"""``[collectors.nic]`` settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fabricwatch.collector import CollectorSettings
from fabricwatch.settings import option


@dataclass(kw_only=True)
class NicSettings(CollectorSettings):
    """``[collectors.nic]``: host RDMA NIC counters.

    Attributes:
        devices: glob patterns of RDMA devices to read; empty reads all.
        exclude: glob patterns of RDMA devices to skip.
        ethtool: read per-priority PFC and discard statistics through the ethtool ioctl.
        ethtool_stats_dir: read ``ethtool -S`` text dumps named after each netdev
            from this directory instead of the ioctl (replay, demo).
        gpu_locality: export which GPUs sit near each port.
        rescan_interval: how often to re-discover ports and topology.
        xmit_wait_tick_bytes: line time of one ``port_xmit_wait`` tick, in bytes.
        max_open_files: counter files kept open for cheap re-reads.
    """

    devices: list[str] = option([], "RDMA devices to read (glob patterns); empty = all.")
    exclude: list[str] = option([], "RDMA devices to skip (glob patterns).")
    ethtool: bool = option(
        True, "Read per-priority PFC/discard statistics through the ethtool ioctl."
    )
    ethtool_stats_dir: Path | None = option(
        None, "Read 'ethtool -S' dumps named <netdev> from this directory instead of the ioctl."
    )
    gpu_locality: bool = option(
        True, "Export which GPUs share a PCIe switch or NUMA node with each port."
    )
    rescan_interval: float = option(
        30.0,
        "Seconds between re-discovery of ports, netdevs and PCI topology.",
        min=1.0,
        max=3600.0,
        duration=True,
    )
    xmit_wait_tick_bytes: float = option(
        8.0, "Bytes of line time one port_xmit_wait tick stands for.", min=0.001, max=4096.0
    )
    max_open_files: int = option(
        1024,
        "Counter files kept open between reads (capped at half the soft RLIMIT_NOFILE).",
        min=0,
        max=65536,
    )
