"""Metric families of the switch collector: the per-port switch families of the
signals contract (:mod:`fabricwatch.signals`, shared with gNMI) and the SNMP ones."""

from __future__ import annotations

from fabricwatch import signals as fam
from fabricwatch.readings import MetricKind, MetricSpec

G = MetricKind.GAUGE
C = MetricKind.COUNTER
SPD = fam.SWITCH_PORT_DIRECTION

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

METRICS: tuple[MetricSpec, ...] = (
    *fam.SWITCH_PORT_FAMILIES,
    PORT_PFC_PAUSE_FRAMES,
    PORT_PFC_PAUSE_RATIO,
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
