"""Metric families of the switch collector (names per ``docs/signals.md``)."""

from __future__ import annotations

from fabricwatch.readings import MetricKind, MetricSpec

G = MetricKind.GAUGE
C = MetricKind.COUNTER
SP = ("switch", "port")
SPPD = ("switch", "port", "priority", "direction")
SPD = ("switch", "port", "direction")
SPQ = ("switch", "port", "queue")

PFC_PAUSE_RATIO = MetricSpec(
    "fabricwatch_switch_pfc_pause_ratio",
    G,
    "Share of time the port/priority was paused, 0-1 (from a duration counter, "
    "else frames x 65535 quanta x 512 bit-times at the port speed, capped at 1).",
    SPPD,
)
PFC_PAUSE_FRAMES = MetricSpec(
    "fabricwatch_switch_pfc_pause_frames", C, "PFC pause frames per priority.", SPPD
)
PFC_PAUSE_SECONDS = MetricSpec(
    "fabricwatch_switch_pfc_pause_seconds",
    C,
    "Time in PFC pause reported by the switch (Cisco wait us, Mellanox ms).",
    SPPD,
)
PORT_PFC_PAUSE_FRAMES = MetricSpec(
    "fabricwatch_switch_port_pfc_pause_frames",
    C,
    "PFC pause frames summed over priorities (IEEE8021-PFC-MIB).",
    SPD,
    bits=32,
)
PORT_PFC_PAUSE_RATIO = MetricSpec(
    "fabricwatch_switch_port_pfc_pause_ratio",
    G,
    "Pause-time fraction estimated from interface-total PFC frames, 0-1 (upper bound).",
    SPD,
)
LINK_PAUSE_FRAMES = MetricSpec(
    "fabricwatch_switch_link_pause_frames", C, "802.3x link-level PAUSE frames.", SPD
)
PORT_UP = MetricSpec("fabricwatch_switch_port_up", G, "Oper status: 1 up, 0 otherwise.", SP)
PORT_FLAPS = MetricSpec(
    "fabricwatch_switch_port_flaps", C, "Oper status changes seen by the collector.", SP
)
RX_BYTES = MetricSpec("fabricwatch_switch_port_receive_bytes", C, "IF-MIB ifHCInOctets.", SP)
TX_BYTES = MetricSpec("fabricwatch_switch_port_transmit_bytes", C, "IF-MIB ifHCOutOctets.", SP)
DISCARDS = MetricSpec(
    "fabricwatch_switch_port_discards",
    C,
    "IF-MIB ifIn/OutDiscards (Counter32).",
    SPD,
    bits=32,
)
ERRORS = MetricSpec(
    "fabricwatch_switch_port_errors", C, "IF-MIB ifIn/OutErrors (Counter32).", SPD, bits=32
)
UTILIZATION = MetricSpec(
    "fabricwatch_switch_port_utilization_ratio",
    G,
    "Octet rate x 8 / port speed, 0-1.",
    SPD,
)
SPEED = MetricSpec(
    "fabricwatch_switch_port_speed_bytes",
    G,
    "Port speed in bytes per second: the target's port_speeds setting, else ifHighSpeed, "
    "else ifSpeed below 4294967295.",
    SP,
)
QUEUE_DROPS = MetricSpec(
    "fabricwatch_switch_queue_dropped_packets", C, "Packets dropped per egress queue.", SPQ
)
ECN_MARKED = MetricSpec(
    "fabricwatch_switch_ecn_marked_packets",
    C,
    "ECN-marked packets per egress queue (gNMI queue counters; Cisco CBQoS RED class stats, "
    "where the queue label is the class-map name).",
    SPQ,
)
UPLINK_INFO = MetricSpec(
    "fabricwatch_switch_uplink_info",
    G,
    "1 for each switch port polled as this node's uplink (neighbor_port from LLDP, or static).",
    ("switch", "port", "neighbor_port"),
)
SWITCH_INFO = MetricSpec(
    "fabricwatch_switch_info",
    G,
    "1 per target: the vendor profile selected and the switch's sysName.",
    ("switch", "profile", "sys_name"),
)
TARGET_UP = MetricSpec(
    "fabricwatch_switch_target_up", G, "1 when the last poll of the switch succeeded.", ("switch",)
)
POLL_DURATION = MetricSpec(
    "fabricwatch_switch_poll_duration_seconds",
    G,
    "Wall time of the last poll of the switch.",
    ("switch",),
)
TIMEOUTS = MetricSpec(
    "fabricwatch_switch_timeouts", C, "SNMP requests that got no response.", ("switch",)
)
POLL_ERRORS = MetricSpec(
    "fabricwatch_switch_poll_errors",
    C,
    "Failed polls by reason (timeout, auth, malformed, snmp_error, too_big).",
    ("switch", "reason"),
)
MALFORMED = MetricSpec(
    "fabricwatch_switch_malformed_responses",
    C,
    "Undecodable SNMP datagrams received from the switch.",
    ("switch",),
)
ORPHAN_ROWS = MetricSpec(
    "fabricwatch_switch_orphan_rows",
    G,
    "Rows of the last poll whose ifIndex is not in ifTable (e.g. unused breakout lanes).",
    ("switch",),
)
TABLE_PRESENT = MetricSpec(
    "fabricwatch_switch_table_present",
    G,
    "1 when the switch serves the table, 0 when it is absent or empty "
    "(table = pfc, queue, ecn, lldp, ifxtable).",
    ("switch", "table"),
)
PORTS_POLLED = MetricSpec(
    "fabricwatch_switch_ports_polled", G, "Ports polled on the switch.", ("switch",)
)

ALL = (
    PFC_PAUSE_RATIO,
    PFC_PAUSE_FRAMES,
    PFC_PAUSE_SECONDS,
    PORT_PFC_PAUSE_FRAMES,
    PORT_PFC_PAUSE_RATIO,
    LINK_PAUSE_FRAMES,
    PORT_UP,
    PORT_FLAPS,
    RX_BYTES,
    TX_BYTES,
    DISCARDS,
    ERRORS,
    UTILIZATION,
    SPEED,
    QUEUE_DROPS,
    ECN_MARKED,
    UPLINK_INFO,
    SWITCH_INFO,
    TARGET_UP,
    POLL_DURATION,
    TIMEOUTS,
    POLL_ERRORS,
    MALFORMED,
    ORPHAN_ROWS,
    TABLE_PRESENT,
    PORTS_POLLED,
)
