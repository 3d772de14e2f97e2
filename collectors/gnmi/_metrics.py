"""Metric families of the gNMI collector.

Switch data families are the signals contract's :class:`MetricSpec` objects
(:data:`fabricwatch.signals.SWITCH_PORT_FAMILIES`), exported by the SNMP
collector too, so both sources feed the same series names with identical
declarations. Only what SNMP has no
equivalent for, and the stream's own health, is declared here.
"""

from __future__ import annotations

from fabricwatch import signals as fam
from fabricwatch.readings import MetricKind, MetricSpec

G = MetricKind.GAUGE
C = MetricKind.COUNTER
S = ("switch",)

ECN_MARKED_BYTES = MetricSpec(
    "fabricwatch_switch_ecn_marked_bytes",
    C,
    "ECN-marked bytes per egress queue (gNMI ecn-marked-octets / SAI WRED_ECN_MARKED_BYTES).",
    fam.SWITCH_PORT_QUEUE,
)
QUEUE_TX_PACKETS = MetricSpec(
    "fabricwatch_switch_queue_transmit_packets",
    C,
    "Packets transmitted per egress queue (gNMI transmit-pkts / SAI_QUEUE_STAT_PACKETS).",
    fam.SWITCH_PORT_QUEUE,
)
TARGET_UP = MetricSpec(
    "fabricwatch_gnmi_target_up", G, "1 while the gNMI subscription to the switch is open.", S
)
TARGET_INFO = MetricSpec(
    "fabricwatch_gnmi_target_info",
    G,
    "1 per target: the path profile in use.",
    ("switch", "profile"),
)
CONNECTS = MetricSpec(
    "fabricwatch_gnmi_subscriptions",
    C,
    "Subscriptions opened (first connect, reconnects and resubscriptions).",
    S,
)
STREAM_ERRORS = MetricSpec(
    "fabricwatch_gnmi_stream_errors",
    C,
    "Failed connections or streams by reason (tls, auth, unreachable, timeout, stale, "
    "closed, rpc_error).",
    ("switch", "reason"),
)
NOTIFICATIONS = MetricSpec(
    "fabricwatch_gnmi_notifications", C, "Notifications processed from the target.", S
)
IGNORED = MetricSpec(
    "fabricwatch_gnmi_ignored_updates",
    C,
    "Updates ignored by reason: malformed (undecodable or wrong type) or unknown_path.",
    ("switch", "reason"),
)
QUEUE_DEPTH = MetricSpec(
    "fabricwatch_gnmi_queue_depth", G, "Notifications waiting for the next collection.", S
)
QUEUE_WAITS = MetricSpec(
    "fabricwatch_gnmi_queue_full",
    C,
    "Times the stream reader found the queue full and held the target back.",
    S,
)
TARGET_RESTARTS = MetricSpec(
    "fabricwatch_gnmi_target_restarts",
    C,
    "Target restarts seen (boot-time changed).",
    S,
)

METRICS: tuple[MetricSpec, ...] = (
    *fam.SWITCH_PORT_FAMILIES,
    ECN_MARKED_BYTES,
    QUEUE_TX_PACKETS,
    TARGET_UP,
    TARGET_INFO,
    CONNECTS,
    STREAM_ERRORS,
    NOTIFICATIONS,
    IGNORED,
    QUEUE_DEPTH,
    QUEUE_WAITS,
    TARGET_RESTARTS,
)
