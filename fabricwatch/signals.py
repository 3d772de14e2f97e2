"""The signals contract: every metric family that crosses a module boundary.

A family here is produced by one collector and read by another module (the
engine, replay, the scenario simulator), or produced by two collectors (SNMP
and gNMI feed the same switch series). Each :class:`MetricSpec` fixes the
exported name, the kind, the unit (in the name and help, base units), the
label order (the engine reads labels by position) and the counter width (wrap
detection). Collectors put these objects in their ``_metrics.METRICS``; the
engine builds its tables from them (``fabricwatch/engine/signals.py``), so the
two cannot drift. ``docs/signals.md`` is the prose of this module.

Families only one collector produces and nothing else reads (a collector's own
health, vendor detail) are declared in that collector's ``_metrics.py``: adding
a collector does not touch this module unless the engine is to read it.
"""

from __future__ import annotations

from fabricwatch.readings import MetricKind, MetricSpec

G = MetricKind.GAUGE
C = MetricKind.COUNTER
H = MetricKind.HISTOGRAM

# Label orders.
GPU = ("gpu",)
GPU_LINK = ("gpu", "link")
SWITCH_PORT = ("switch", "port")
SWITCH_PORT_DIRECTION = ("switch", "port", "direction")
SWITCH_PORT_PRIORITY = ("switch", "port", "priority", "direction")
SWITCH_PORT_QUEUE = ("switch", "port", "queue")
NIC_PORT = ("device", "port")
NIC_PORT_PRIORITY = ("device", "port", "priority", "direction")
PATH = ("path",)

# --- GPU (collectors/gpu, NVML) -------------------------------------------------
GPU_UTIL = MetricSpec(
    "fabricwatch_gpu_utilization_ratio",
    G,
    "NVML utilization.gpu, 0-1 (time-based: stays high in hung collectives).",
    GPU,
)
GPU_SM = MetricSpec(
    "fabricwatch_gpu_sm_active_ratio", G, "GPM SM activity, 0-1 (Hopper and newer).", GPU
)
GPU_POWER = MetricSpec("fabricwatch_gpu_power_watts", G, "Power draw in watts.", GPU)
GPU_POWER_LIMIT = MetricSpec(
    "fabricwatch_gpu_power_limit_watts", G, "Enforced power limit in watts.", GPU
)
GPU_MEM = MetricSpec(
    "fabricwatch_gpu_memory_used_bytes", G, "Framebuffer memory used in bytes.", GPU
)
GPU_PROCS = MetricSpec(
    "fabricwatch_gpu_compute_processes", G, "Number of compute processes on the GPU.", GPU
)
GPU_HEALTHY = MetricSpec("fabricwatch_gpu_healthy", G, "1 healthy, 0 lost or failed.", GPU)
GPU_XID = MetricSpec(
    "fabricwatch_gpu_xid_errors", C, "XID critical-error events seen.", ("gpu", "xid")
)
NVLINK_TX = MetricSpec(
    "fabricwatch_gpu_nvlink_transmit_bytes", C, "NVLink data bytes transmitted.", GPU_LINK
)
NVLINK_RX = MetricSpec(
    "fabricwatch_gpu_nvlink_receive_bytes", C, "NVLink data bytes received.", GPU_LINK
)
NVLINK_ERRORS = MetricSpec(
    "fabricwatch_gpu_nvlink_errors",
    C,
    "NVLink errors by type (crc, replay, recovery, recovery_failed).",
    ("gpu", "link", "type"),
)
NVLINK_UP = MetricSpec("fabricwatch_gpu_nvlink_up", G, "NVLink state: 1 active, 0 down.", GPU_LINK)
GPU_INFO = MetricSpec(
    "fabricwatch_gpu_info",
    G,
    "GPU identity (value 1).",
    ("gpu", "uuid", "model", "pci_bus_id"),
)
GPU_JOB = MetricSpec(
    "fabricwatch_gpu_job_info",
    G,
    "Job owning the GPU's compute processes (value 1).",
    ("gpu", "job_id"),
)

# --- Switch ports (collectors/switch over SNMP, collectors/gnmi) ----------------
SW_PFC_RATIO = MetricSpec(
    "fabricwatch_switch_pfc_pause_ratio",
    G,
    "Share of time the port/priority was paused, 0-1 (from a duration counter, "
    "else frames x 65535 quanta x 512 bit-times at the port speed, capped at 1).",
    SWITCH_PORT_PRIORITY,
)
SW_PFC_FRAMES = MetricSpec(
    "fabricwatch_switch_pfc_pause_frames",
    C,
    "PFC pause frames per priority.",
    SWITCH_PORT_PRIORITY,
)
SW_PFC_SECONDS = MetricSpec(
    "fabricwatch_switch_pfc_pause_seconds",
    C,
    "Time in PFC pause reported by the switch (Cisco wait us, Mellanox ms).",
    SWITCH_PORT_PRIORITY,
)
SW_LINK_PAUSE_FRAMES = MetricSpec(
    "fabricwatch_switch_link_pause_frames",
    C,
    "802.3x link-level PAUSE frames.",
    SWITCH_PORT_DIRECTION,
)
SW_PORT_UP = MetricSpec(
    "fabricwatch_switch_port_up", G, "Oper status: 1 up, 0 otherwise.", SWITCH_PORT
)
SW_PORT_FLAPS = MetricSpec(
    "fabricwatch_switch_port_flaps", C, "Oper status changes seen by the collector.", SWITCH_PORT
)
SW_RX_BYTES = MetricSpec(
    "fabricwatch_switch_port_receive_bytes", C, "IF-MIB ifHCInOctets.", SWITCH_PORT
)
SW_TX_BYTES = MetricSpec(
    "fabricwatch_switch_port_transmit_bytes", C, "IF-MIB ifHCOutOctets.", SWITCH_PORT
)
SW_DISCARDS = MetricSpec(
    "fabricwatch_switch_port_discards",
    C,
    "IF-MIB ifIn/OutDiscards (Counter32).",
    SWITCH_PORT_DIRECTION,
    bits=32,
)
SW_ERRORS = MetricSpec(
    "fabricwatch_switch_port_errors",
    C,
    "IF-MIB ifIn/OutErrors (Counter32).",
    SWITCH_PORT_DIRECTION,
    bits=32,
)
SW_UTILIZATION = MetricSpec(
    "fabricwatch_switch_port_utilization_ratio",
    G,
    "Octet rate x 8 / port speed, 0-1.",
    SWITCH_PORT_DIRECTION,
)
SW_SPEED = MetricSpec(
    "fabricwatch_switch_port_speed_bytes",
    G,
    "Port speed in bytes per second: the target's port_speeds setting, else ifHighSpeed, "
    "else ifSpeed below 4294967295.",
    SWITCH_PORT,
)
SW_QUEUE_DROPS = MetricSpec(
    "fabricwatch_switch_queue_dropped_packets",
    C,
    "Packets dropped per egress queue.",
    SWITCH_PORT_QUEUE,
)
SW_ECN = MetricSpec(
    "fabricwatch_switch_ecn_marked_packets",
    C,
    "ECN-marked packets per egress queue (gNMI queue counters; Cisco CBQoS RED class stats, "
    "where the queue label is the class-map name).",
    SWITCH_PORT_QUEUE,
)
SW_UPLINK_INFO = MetricSpec(
    "fabricwatch_switch_uplink_info",
    G,
    "1 for each switch port polled as this node's uplink (neighbor_port from LLDP, or static).",
    ("switch", "port", "neighbor_port"),
)

# --- Host NIC RDMA ports (collectors/nic) ----------------------------------------
NIC_PFC_RATIO = MetricSpec(
    "fabricwatch_nic_pfc_pause_ratio",
    G,
    "Host NIC PFC pause-time fraction 0-1 per priority; rx = we were paused, tx = we paused "
    "the peer (from pause duration, else estimated from frames at the link rate).",
    NIC_PORT_PRIORITY,
)
NIC_PFC_FRAMES = MetricSpec(
    "fabricwatch_nic_pfc_pause_frames", C, "Host NIC PFC pause frames.", NIC_PORT_PRIORITY
)
NIC_ECN = MetricSpec(
    "fabricwatch_nic_ecn_marked_packets",
    C,
    "RoCEv2 packets received with ECN CE (np_ecn_marked_roce_packets).",
    NIC_PORT,
)
NIC_CNP_SENT = MetricSpec(
    "fabricwatch_nic_cnp_sent_packets",
    C,
    "Congestion notification packets sent (np_cnp_sent).",
    NIC_PORT,
)
NIC_CNP_HANDLED = MetricSpec(
    "fabricwatch_nic_cnp_handled_packets",
    C,
    "CNPs that cut our send rate (rp_cnp_handled).",
    NIC_PORT,
)
NIC_XMIT_WAIT = MetricSpec(
    "fabricwatch_nic_xmit_wait_ratio",
    G,
    "Share of time the port waited to transmit, 0-1 (port_xmit_wait).",
    NIC_PORT,
)
NIC_LINK_UP = MetricSpec(
    "fabricwatch_nic_link_up", G, "1 when the RDMA port is ACTIVE, 0 otherwise.", NIC_PORT
)
NIC_LINK_DOWNED = MetricSpec(
    "fabricwatch_nic_link_downed",
    C,
    "Failed link recoveries that took the link down (link_downed).",
    NIC_PORT,
)
NIC_TX_BYTES = MetricSpec(
    "fabricwatch_nic_transmit_bytes",
    C,
    "RDMA port data transmitted in bytes (port_xmit_data x 4).",
    NIC_PORT,
)
NIC_RX_BYTES = MetricSpec(
    "fabricwatch_nic_receive_bytes",
    C,
    "RDMA port data received in bytes (port_rcv_data x 4).",
    NIC_PORT,
)
NIC_RATE = MetricSpec(
    "fabricwatch_nic_link_rate_bytes_per_second",
    G,
    "RDMA port link rate in bytes per second.",
    NIC_PORT,
)
NIC_GPU_LOCALITY = MetricSpec(
    "fabricwatch_nic_gpu_locality_info",
    G,
    "(=1) a GPU near this port; pci_bus_id in NVML spelling, locality = pcie_switch, "
    "host_bridge, numa_node or system.",
    (*NIC_PORT, "pci_bus_id", "locality"),
)

# --- Checkpoint paths (collectors/storage) -------------------------------------
ST_PROBE_HIST = MetricSpec(
    "fabricwatch_storage_probe_latency_seconds",
    H,
    "Active probe latency: open + write + fsync (timeouts count).",
    PATH,
)
ST_PROBE_LAST = MetricSpec(
    "fabricwatch_storage_probe_last_latency_seconds",
    G,
    "Latest probe latency (a timeout reports the timeout).",
    PATH,
)
ST_PROBE_FAIL = MetricSpec(
    "fabricwatch_storage_probe_failures",
    C,
    "Failed probes by reason: enospc, erofs, eio, timeout, permission, other.",
    ("path", "reason"),
)
ST_WRITE_LAT = MetricSpec(
    "fabricwatch_storage_write_latency_seconds",
    G,
    "Average write latency of the path's block device or NFS mount (WRITE execute time) over "
    "the last interval; 0 when no write completed.",
    PATH,
)
ST_WRITE_BYTES = MetricSpec(
    "fabricwatch_storage_write_bytes",
    C,
    "Bytes written to the path's block device or NFS server.",
    PATH,
)
ST_WRITE_OPS = MetricSpec(
    "fabricwatch_storage_writes_completed",
    C,
    "Write requests completed by the path's block device (diskstats writes completed) or "
    "WRITE operations sent to its NFS server; bytes / writes is the request size.",
    PATH,
)
ST_WRITE_BURST = MetricSpec(
    "fabricwatch_storage_write_burst",
    G,
    "1 while writes exceed their baseline by the burst factor.",
    PATH,
)

# --- NCCL's own view (collectors/nccl_inspector, collectors/nccl_ras) ---------
# Read by the fleet (node job reports: the culprit rank of a job incident), so
# replay maps them too.
NCCL_RAS_MISSING_SHOWN = 64
"""Missing ranks one RAS collection exports at most (the rest are counted, not named)."""
NCCL_BUS_BW = MetricSpec(
    "fabricwatch_nccl_bus_bandwidth_bytes_per_second",
    G,
    "Bus bandwidth of the GPU's latest completed NCCL collective (NCCL Inspector), "
    "largest communicator.",
    ("gpu", "collective"),
)
NCCL_RAS_MISSING = MetricSpec(
    "fabricwatch_nccl_ras_missing_rank",
    G,
    "A rank RAS reports missing (value 1; 2 when considered dead), by host and GPU; only "
    f"while missing, at most {NCCL_RAS_MISSING_SHOWN}.",
    ("host", "cuda_dev", "rank"),
)

SIGNALS: tuple[MetricSpec, ...] = (
    GPU_UTIL, GPU_SM, GPU_POWER, GPU_POWER_LIMIT, GPU_MEM, GPU_PROCS, GPU_HEALTHY, GPU_XID,
    NVLINK_TX, NVLINK_RX, NVLINK_ERRORS, NVLINK_UP, GPU_INFO, GPU_JOB,
    SW_PFC_RATIO, SW_PFC_FRAMES, SW_ECN, SW_PORT_UP, SW_RX_BYTES, SW_TX_BYTES, SW_DISCARDS,
    SW_SPEED,
    NIC_PFC_RATIO, NIC_PFC_FRAMES, NIC_ECN, NIC_CNP_SENT, NIC_CNP_HANDLED, NIC_XMIT_WAIT,
    NIC_LINK_UP, NIC_LINK_DOWNED, NIC_TX_BYTES, NIC_RX_BYTES, NIC_RATE, NIC_GPU_LOCALITY,
    ST_PROBE_HIST, ST_PROBE_LAST, ST_PROBE_FAIL, ST_WRITE_LAT, ST_WRITE_BYTES, ST_WRITE_BURST,
    ST_WRITE_OPS, NCCL_BUS_BW, NCCL_RAS_MISSING,
)  # fmt: skip
"""The families of ``docs/signals.md``: what replay and the scenario simulator
register, and what the engine may read."""

SWITCH_PORT_FAMILIES: tuple[MetricSpec, ...] = (
    SW_PFC_RATIO, SW_PFC_FRAMES, SW_PFC_SECONDS, SW_LINK_PAUSE_FRAMES, SW_PORT_UP,
    SW_PORT_FLAPS, SW_RX_BYTES, SW_TX_BYTES, SW_DISCARDS, SW_ERRORS, SW_UTILIZATION, SW_SPEED,
    SW_QUEUE_DROPS, SW_ECN, SW_UPLINK_INFO,
)  # fmt: skip
"""Per-port switch families both switch sources (SNMP and gNMI) export."""
