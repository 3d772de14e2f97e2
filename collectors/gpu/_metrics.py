"""Metric families of the GPU collector: the GPU families of the signals contract
(:mod:`fabricwatch.signals`) first, then NVML detail only this collector exports."""

from __future__ import annotations

from fabricwatch.readings import MetricKind, MetricSpec
from fabricwatch.signals import (
    GPU_HEALTHY,
    GPU_INFO,
    GPU_JOB,
    GPU_MEM,
    GPU_POWER,
    GPU_POWER_LIMIT,
    GPU_PROCS,
    GPU_SM,
    GPU_UTIL,
    GPU_XID,
    NVLINK_ERRORS,
    NVLINK_RX,
    NVLINK_TX,
    NVLINK_UP,
)

NAME = "gpu"

GAUGE = MetricKind.GAUGE
COUNTER = MetricKind.COUNTER
_G = ("gpu",)
_GL = ("gpu", "link")


def _spec(name: str, kind: MetricKind, help: str, labels: tuple[str, ...] = _G) -> MetricSpec:
    return MetricSpec(f"fabricwatch_gpu_{name}", kind, help, labels)


MEMORY_UTILIZATION = _spec("memory_utilization_ratio", GAUGE, "NVML utilization.memory, 0-1.")
SM_OCCUPANCY = _spec("sm_occupancy_ratio", GAUGE, "GPM warp occupancy, 0-1 (Hopper and newer).")
TENSOR_ACTIVE = _spec(
    "tensor_active_ratio", GAUGE, "GPM tensor-core activity, 0-1 (Hopper and newer)."
)
DRAM_ACTIVE = _spec(
    "dram_active_ratio", GAUGE, "GPM DRAM bandwidth utilization, 0-1 (Hopper and newer)."
)
ENERGY = _spec("energy_joules", COUNTER, "Energy consumed since the driver loaded, in joules.")
SM_CLOCK = _spec("sm_clock_hertz", GAUGE, "SM clock in hertz.")
MEMORY_CLOCK = _spec("memory_clock_hertz", GAUGE, "Memory clock in hertz.")
CLOCK_EVENT = _spec(
    "clock_event_active",
    GAUGE,
    "1 while a clock-event (throttle) reason is active.",
    ("gpu", "reason"),
)
MEMORY_TOTAL = _spec("memory_total_bytes", GAUGE, "Framebuffer memory size in bytes.")
TEMPERATURE = _spec("temperature_celsius", GAUGE, "GPU core temperature in degrees Celsius.")
MEMORY_TEMPERATURE = _spec(
    "memory_temperature_celsius", GAUGE, "HBM temperature in degrees Celsius."
)
PCIE_TX = _spec("pcie_transmit_bytes", COUNTER, "PCIe bytes transmitted.")
PCIE_RX = _spec("pcie_receive_bytes", COUNTER, "PCIe bytes received.")
PCIE_REPLAYS = _spec(
    "pcie_replays", COUNTER, "PCIe replay counter (alert on its rate, not its value)."
)
ECC_ERRORS = _spec(
    "ecc_errors", COUNTER, "Volatile ECC errors by type (corrected, uncorrected).", ("gpu", "type")
)
REMAPPED_ROWS = _spec(
    "remapped_rows",
    GAUGE,
    "Remapped memory rows by cause (correctable, uncorrectable).",
    ("gpu", "type"),
)
REMAP_PENDING = _spec("row_remap_pending", GAUGE, "1 when a row remap waits for a GPU reset.")
REMAP_FAILURE = _spec("row_remap_failure", GAUGE, "1 when a row remap failed.")
RECOVERY_ACTION = _spec(
    "recovery_action",
    GAUGE,
    "NVML recovery action: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain+reset.",
)
CRITICAL_EVENTS = _spec(
    "critical_events", COUNTER, "Critical NVML events other than XIDs, by type.", ("gpu", "type")
)
FABRIC_INFO = _spec(
    "fabric_info",
    GAUGE,
    "NVLink fabric registration (value 1); clique = <clusterUUID>.<cliqueId> (gpu.clique).",
    ("gpu", "clique", "fabric_state"),
)
STALE = _spec("sample_stale", GAUGE, "1 while NVML calls for this GPU hang; last values are kept.")
STUCK = MetricSpec(
    "fabricwatch_gpu_nvml_stuck_calls",
    GAUGE,
    "NVML calls that outlived their timeout and still run.",
)

METRICS: tuple[MetricSpec, ...] = (
    GPU_UTIL, GPU_SM, GPU_POWER, GPU_POWER_LIMIT, GPU_MEM, GPU_PROCS, GPU_HEALTHY, GPU_XID,
    NVLINK_TX, NVLINK_RX, NVLINK_ERRORS, NVLINK_UP, GPU_INFO, GPU_JOB,
    MEMORY_UTILIZATION, SM_OCCUPANCY, TENSOR_ACTIVE, DRAM_ACTIVE, ENERGY, SM_CLOCK, MEMORY_CLOCK,
    CLOCK_EVENT, MEMORY_TOTAL, TEMPERATURE, MEMORY_TEMPERATURE, PCIE_TX, PCIE_RX, PCIE_REPLAYS,
    ECC_ERRORS, REMAPPED_ROWS, REMAP_PENDING, REMAP_FAILURE, RECOVERY_ACTION, CRITICAL_EVENTS,
    FABRIC_INFO, STALE, STUCK,
)  # fmt: skip
