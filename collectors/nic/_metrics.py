"""The NIC collector's metric families: names, kinds, help and labels.

Families the engine reads are the signals contract's (:mod:`fabricwatch.signals`);
the rest are the collector's own.
"""

from __future__ import annotations

from fabricwatch import signals as fam
from fabricwatch.readings import MetricKind, MetricSpec

NAME = "nic"

_DP = ("device", "port")
G, C = MetricKind.GAUGE, MetricKind.COUNTER


def _spec(
    name: str, kind: MetricKind, help: str, labels: tuple[str, ...] = _DP, bits: int = 64
) -> MetricSpec:
    return MetricSpec(f"fabricwatch_nic_{name}", kind, help, labels, bits)


PAUSE_RATIO = fam.NIC_PFC_RATIO
PAUSE_FRAMES = fam.NIC_PFC_FRAMES
PAUSE_DURATION = _spec(
    "pfc_pause_duration_seconds",
    C,
    "Host NIC PFC pause duration in seconds (summed over bond members).",
    (*_DP, "priority", "direction"),
)
ECN_MARKED = fam.NIC_ECN
CNP_SENT = fam.NIC_CNP_SENT
CNP_HANDLED = fam.NIC_CNP_HANDLED
CNP_IGNORED = _spec(
    "cnp_ignored_packets", C, "CNPs ignored by the reaction point (rp_cnp_ignored)."
)
CC_PRESENT = _spec(
    "congestion_counters_present",
    G,
    "1 when the port exposes np_*/rp_* congestion counters, 0 when firmware hides them.",
)
XMIT_WAIT_RATIO = fam.NIC_XMIT_WAIT
XMIT_WAIT_TICKS = _spec("xmit_wait_ticks", C, "Raw port_xmit_wait ticks.", bits=32)
LINK_UP = fam.NIC_LINK_UP
LINK_DOWNED = fam.NIC_LINK_DOWNED
TX_BYTES = fam.NIC_TX_BYTES
RX_BYTES = fam.NIC_RX_BYTES
TX_PACKETS = _spec("transmit_packets", C, "RDMA port packets transmitted (port_xmit_packets).")
RX_PACKETS = _spec("receive_packets", C, "RDMA port packets received (port_rcv_packets).")
INFO = _spec(
    "info",
    G,
    "RDMA port identity (=1): netdev, PCI address, NUMA node and link layer.",
    (*_DP, "netdev", "pci_address", "numa_node", "link_layer"),
)
GPU_LOCALITY = fam.NIC_GPU_LOCALITY
LINK_RATE = fam.NIC_RATE
PORT_STATE = _spec(
    "port_state", G, "Logical port state id (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)."
)
PHYS_STATE = _spec("port_physical_state", G, "Physical port state id (5 LinkUp).")
LINK_PAUSE_FRAMES = _spec(
    "link_pause_frames", C, "802.3x link-level pause frames.", (*_DP, "direction")
)
LINK_PAUSE_RATIO = _spec(
    "link_pause_ratio", G, "802.3x link-level pause-time fraction 0-1.", (*_DP, "direction")
)
STORM_EVENTS = _spec(
    "pause_storm_events", C, "Pause storm events (level = warning, error).", (*_DP, "level")
)
DROPS = _spec(
    "drops",
    C,
    "Packets dropped by the NIC (reason = driver counter: rx_discards_phy, port_xmit_discards...).",
    (*_DP, "reason"),
)
PRIORITY_DISCARDS = _spec(
    "priority_discards",
    C,
    "Per-priority receive discards (reason = buffer, congestion, other).",
    (*_DP, "priority", "reason"),
)
PRIORITY_MARKED = _spec(
    "priority_ecn_marked_packets",
    C,
    "Per-priority packets ECN-marked by the device.",
    (*_DP, "priority"),
)
LINK_DOWN_EVENTS = _spec(
    "link_down_events", C, "Physical link down events of the netdev (link_down_events_phy)."
)
TRANSPORT = _spec(
    "rdma_transport_events",
    C,
    "RDMA transport events from 32-bit hw Q-counters (type = out_of_buffer, out_of_sequence, "
    "local_ack_timeout_err, ...).",
    (*_DP, "type"),
    bits=32,
)
PORT_ERRORS = _spec(
    "port_errors",
    C,
    "InfiniBand PMA error counters (type = symbol_error, port_rcv_errors, ...).",
    (*_DP, "type"),
)
ETHTOOL_UP = _spec(
    "ethtool_up", G, "1 when every netdev of the port answered the ethtool statistics query."
)
READ_ERRORS = _spec("read_errors", C, "Counter values that could not be read or parsed.")
SATURATED = _spec(
    "counter_saturated",
    G,
    "1 while a counter is pinned at its maximum, so its rate is unknown (not zero) and it is "
    "not exported: counter = sysfs or driver statistic name.",
    (*_DP, "counter"),
)

METRICS: tuple[MetricSpec, ...] = (
    PAUSE_RATIO, PAUSE_FRAMES, PAUSE_DURATION, ECN_MARKED, CNP_SENT, CNP_HANDLED, CNP_IGNORED,
    CC_PRESENT, XMIT_WAIT_RATIO, XMIT_WAIT_TICKS, LINK_UP, LINK_DOWNED, TX_BYTES, RX_BYTES,
    TX_PACKETS, RX_PACKETS, INFO, GPU_LOCALITY, LINK_RATE, PORT_STATE, PHYS_STATE,
    LINK_PAUSE_FRAMES, LINK_PAUSE_RATIO, STORM_EVENTS, DROPS, PRIORITY_DISCARDS, PRIORITY_MARKED,
    LINK_DOWN_EVENTS, TRANSPORT, PORT_ERRORS, ETHTOOL_UP, READ_ERRORS, SATURATED,
)  # fmt: skip
